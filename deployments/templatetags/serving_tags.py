"""Fragments of deployments that registry pages show (registry imports nothing from
deployments; its templates load these tags): `{% build_vs_stable build artifacts %}`."""

from django import template

from deployments.selectors.stable_compare import build_vs_stable as build_vs_stable_rows

register = template.Library()


@register.inclusion_tag("deployments/_build_vs_stable.html", takes_context=True)
def build_vs_stable(context, build, artifacts):
    """A build's variants against the stable of each endpoint serving its model (batch-1 latency)."""
    return {"rows": build_vs_stable_rows(user=context["request"].user, build=build, artifacts=artifacts)}
