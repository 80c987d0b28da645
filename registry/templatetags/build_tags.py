"""The version page's build panel: start-build form, variants table, latency chart."""

from django import template

from registry.factory import DEFAULT_TARGETS, GR_DEFAULT_TARGETS, GR_TARGETS, GR_TASK, VARIANTS
from registry.selectors import builds as build_selectors
from registry.sizes import human_size

register = template.Library()


@register.inclusion_tag("registry/build_version_panel.html", takes_context=True)
def version_build_panel(context, version):
    user = context["request"].user
    artifacts = build_selectors.latest_artifacts(user=user, version=version)
    generative = version.model.task == GR_TASK
    return {
        "version": version,
        "builds": build_selectors.build_list(user=user, version=version).order_by("-created_at")[:10],
        "artifacts": artifacts,
        "latency": build_selectors.latency_series(artifacts),
        "variants": GR_TARGETS if generative else VARIANTS,
        "default_targets": GR_DEFAULT_TARGETS if generative else DEFAULT_TARGETS,
        "csrf_token": context.get("csrf_token"),
    }


@register.filter
def size(n_bytes):
    """Bytes as the build log writes them (registry/sizes.py): "1.23 MiB"."""
    return human_size(n_bytes)
