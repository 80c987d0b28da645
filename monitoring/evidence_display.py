"""Alert evidence as people read it: a definition list for a mapping, a table for a list
of records (the judge's checks: one row per check), rounded numbers, outcomes as badges,
and nested values inline — instead of a Python pprint dump. Everything is escaped."""

from __future__ import annotations

from django.utils.html import conditional_escape, format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

FIRST_COLUMNS = ("name", "check", "outcome")
OUTCOMES = {
    "pass": "ok",
    "passed": "ok",
    "ok": "ok",
    "fail": "failed",
    "failed": "failed",
    "inconclusive": "warning",
    "waiting": "queued",
    "rollback": "failed",
    "promote": "ok",
}
MAX_DEPTH = 4


def label(key) -> str:
    text = str(key).replace("_", " ").strip()
    return text[:1].upper() + text[1:]


def number(value: float) -> str:
    if value != value or value in (float("inf"), float("-inf")):  # NaN, ±inf
        return str(value)
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    if abs(value) >= 100:
        return f"{value:,.1f}"
    return f"{value:.4g}"


def scalar(value) -> SafeString:
    if value is None:
        return mark_safe('<span class="muted">—</span>')
    if isinstance(value, bool):
        return mark_safe("yes" if value else "no")
    if isinstance(value, (int, float)):
        return conditional_escape(number(float(value)) if isinstance(value, float) else str(value))
    text = str(value)
    if text.lower() in OUTCOMES:
        return format_html('<span class="badge {}">{}</span>', OUTCOMES[text.lower()], text)
    return conditional_escape(text)


def progress(value) -> str | None:
    """A judge check's progress toward a verdict ({"have", "need", "unit"}, the contract
    with the judge): "312 of 500 requests", or None when `value` is not one."""
    if not (
        isinstance(value, dict) and set(value) == {"have", "need", "unit"} and isinstance(value["have"], (int, float))
    ):
        return None
    have = number(float(value["have"]))
    if isinstance(value["need"], (int, float)):
        return f"{have} of {number(float(value['need']))} {value['unit']}"
    return f"{have} {value['unit']}"


def inline(value, depth: int = 0) -> SafeString:
    """A value inside a table cell: nested mappings as "key: value" pairs on one line."""
    text = progress(value)
    if text is not None:
        return conditional_escape(text)
    if isinstance(value, dict) and depth < MAX_DEPTH:
        return format_html_join(", ", "{}: {}", ((label(k), inline(v, depth + 1)) for k, v in value.items()))
    if isinstance(value, (list, tuple)) and depth < MAX_DEPTH:
        return format_html_join(", ", "{}", ((inline(v, depth + 1),) for v in value))
    if isinstance(value, (dict, list, tuple)):
        return conditional_escape(str(value))
    return scalar(value)


def _columns(rows: list[dict]) -> list[str]:
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            seen.setdefault(key, None)
    return [k for k in FIRST_COLUMNS if k in seen] + [k for k in seen if k not in FIRST_COLUMNS]


def render(value, depth: int = 0) -> SafeString:
    if depth >= MAX_DEPTH or progress(value) is not None:
        return inline(value, depth)
    if isinstance(value, dict):
        if not value:
            return mark_safe('<span class="muted">none</span>')
        items = format_html_join(
            "", "<dt>{}</dt><dd>{}</dd>", ((label(k), render(v, depth + 1)) for k, v in value.items())
        )
        return format_html('<dl class="props evidence">{}</dl>', items)
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(item, dict) for item in value):
            columns = _columns(value)
            head = format_html_join("", "<th>{}</th>", ((label(c),) for c in columns))
            body = format_html_join(
                "",
                "<tr>{}</tr>",
                ((format_html_join("", "<td>{}</td>", ((inline(row.get(c)),) for c in columns)),) for row in value),
            )
            return format_html(
                '<div class="scroll-x"><table class="evidence"><thead><tr>{}</tr></thead><tbody>{}</tbody></table></div>',
                head,
                body,
            )
        return inline(value, depth)
    return scalar(value)
