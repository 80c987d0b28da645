"""The version page's build panel: start-build form, variants table, latency chart."""

from django import template

from registry.factory import DEFAULT_TARGETS, VARIANTS
from registry.selectors import builds as build_selectors

register = template.Library()


@register.inclusion_tag("registry/build_version_panel.html", takes_context=True)
def version_build_panel(context, version):
    user = context["request"].user
    artifacts = build_selectors.latest_artifacts(user=user, version=version)
    return {
        "version": version,
        "builds": build_selectors.build_list(user=user, version=version).order_by("-created_at")[:10],
        "artifacts": artifacts,
        "latency": build_selectors.latency_series(artifacts),
        "variants": VARIANTS,
        "default_targets": DEFAULT_TARGETS,
        "csrf_token": context.get("csrf_token"),
    }
