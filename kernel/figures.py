"""How the dashboard prints a measured figure (a training metric, a score): four significant
digits, whole numbers as they are. The one owner of the rule: experiments' tables and the
`rounded` template filter (registry/templatetags/figures.py) both call it."""

import math


def rounded(value) -> str:
    """0.741234 → "0.7412", 1234.56 → "1235", 3 → "3", 3.0 → "3", None → "—", "n/a" → "n/a"."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—" if value is None or math.isnan(value) else str(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    if abs(value) >= 1000:
        return f"{value:.0f}"
    return f"{value:.4g}"
