"""`{{ value|rounded }}`: a measured figure with four significant digits (kernel/figures.py),
one rule for the version page, the model's version list and the run compare. A builtin
(config/settings.py TEMPLATES), so no template prints a metric another way by forgetting a load."""

from django import template

from kernel.figures import rounded as _rounded

register = template.Library()


@register.filter
def rounded(value) -> str:
    return _rounded(value)
