from django.conf import settings
from django.urls import NoReverseMatch, reverse

# Dashboard sections; a section appears once its app serves a page for it.
NAV = [
    ("Models", "registry:model-list"),
    ("Builds", "registry:build-list"),
    ("Deployments", "deployments:endpoint-list"),
    ("Keys", "deployments:key-list"),
    ("Experiments", "experiments:online-list"),
    ("Monitoring", "monitoring:overview"),
    ("Alerts", "monitoring:alert-list"),
]


def _nav(path: str) -> list[dict]:
    items = []
    for label, name in NAV:
        try:
            url = reverse(name)
        except NoReverseMatch:
            continue
        items.append({"label": label, "url": url, "active": path.startswith(url)})
    return items


def platform(request):
    return {
        "GATEWAY_PORT": settings.GATEWAY_PORT,
        "MAX_UPLOAD_MB": settings.MAX_UPLOAD_MB,
        "nav_items": _nav(request.path) if getattr(request, "user", None) and request.user.is_authenticated else [],
    }
