"""Fragments of monitoring that other apps' pages show: the open-alerts banner on every
page and the judge's verdicts on an endpoint's page (deployments imports nothing from
monitoring; its template loads these tags)."""

from django import template

from monitoring import selectors

register = template.Library()


@register.inclusion_tag("monitoring/_alert_banner_items.html", takes_context=True)
def open_alerts_banner(context):
    """Open alerts of the user's teams, for the banner on every page."""
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"alerts": [], "total": 0}
    alerts = selectors.open_alerts(user=user)
    return {"alerts": list(alerts[:3]), "total": alerts.count(), "request": request}


@register.inclusion_tag("monitoring/_rollout_verdicts.html", takes_context=True)
def rollout_verdicts(context, rollout, limit: int = 15):
    """The judge's latest verdicts on `rollout` that the user may see."""
    return {"verdicts": selectors.verdict_list(user=context["request"].user, rollout_id=rollout.pk)[:limit]}
