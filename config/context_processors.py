from django.conf import settings
from django.urls import NoReverseMatch, reverse

# Dashboard sections; a section appears once its app serves a page for it. A section is
# active for its own URL and for the extra prefixes listed (pools live under Deployments).
NAV = [
    ("Models", "registry:model-list", ()),
    ("Builds", "registry:build-list", ()),
    ("Deployments", "deployments:endpoint-list", ("deployments:pool-list",)),
    ("Keys", "deployments:key-list", ()),
    ("Experiments", "experiments:online-list", ("experiments:experiment-list",)),
    ("Monitoring", "monitoring:overview", ()),
    ("Alerts", "monitoring:alert-list", ()),
]


def _nav(path: str) -> list[dict]:
    """The sections, exactly one of them active: the one whose URL (or extra prefix) is
    the longest prefix of `path` — /models/builds/ is Builds, not also Models."""
    items, best, best_length = [], None, 0
    for label, name, extra in NAV:
        try:
            url = reverse(name)
            prefixes = [url, *(reverse(other) for other in extra)]
        except NoReverseMatch:
            continue
        item = {"label": label, "url": url, "active": False}
        items.append(item)
        for prefix in prefixes:
            if path.startswith(prefix) and len(prefix) > best_length:
                best, best_length = item, len(prefix)
    if best is not None:
        best["active"] = True
    return items


def platform(request):
    return {
        "GATEWAY_PORT": settings.GATEWAY_PORT,
        "MAX_UPLOAD_MB": settings.MAX_UPLOAD_MB,
        "nav_items": _nav(request.path) if getattr(request, "user", None) and request.user.is_authenticated else [],
    }
