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
