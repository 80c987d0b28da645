"""The endpoint page's release card (build → tune → canary): `{% release_card endpoint %}`."""

from django import template

from deployments.selectors.releases import release_card as release_card_state

register = template.Library()


@register.inclusion_tag("deployments/_release.html", takes_context=True)
def release_card(context, endpoint):
    request = context["request"]
    return {
        **release_card_state(user=request.user, endpoint=endpoint),
        "endpoint": endpoint,
        "request": request,
        "csrf_token": context.get("csrf_token"),
    }
