"""Alert evidence as people read it: first the few figures that decided (for
each check that failed, else each that was inconclusive: candidate against its control,
the threshold, the p- or e-value, the sample sizes), with units; then everything else
folded, as definition lists (one per check, never one table with a column per key), with
numbers rounded, epoch seconds as UTC times and outcomes as badges. Everything is escaped.

Generic over checks: the judge's known checks get their own words for the statistic and
the threshold (CHECK_WORDS); any other check (a new metric's) is read by its keys'
names: `*_ms` in ms, `*_s`/`*_seconds` in s, `*rate*`/`*share*` in %, `*_at`/`*_since`
as times, and a {"candidate": …, "stable"|"baseline"|"control": …} mapping as "candidate
vs control"."""

from __future__ import annotations

from datetime import UTC, datetime

from django.utils.html import conditional_escape, format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

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
    "skipped": "skipped",
}
MAX_DEPTH = 4
# Epoch seconds between 2001 and 2286: a time, never a count (no count here is that large and a time).
EPOCH_RANGE = (1e9, 1e10)
CONTROLS = ("baseline", "stable", "control")
FIRST_KEYS = ("name", "check", "outcome")

# (label, unit) of a known check's `statistic` and `threshold`; None: not a figure that decided.
CHECK_WORDS: dict[str, dict[str, tuple[str, str] | None]] = {
    "error_rate": {"statistic": ("Error-rate difference", "%"), "threshold": ("e-value needed", "")},
    "error_slo": {"statistic": ("Error rate", "%"), "threshold": ("SLO", "%")},
    "p99_slo": {"statistic": ("p99", "ms"), "threshold": ("SLO p99", "ms")},
    "psi": {"statistic": ("PSI", ""), "threshold": ("PSI limit", "")},
    "latency": {"statistic": ("Share of windows over the control +margin", "%"), "threshold": ("e-value needed", "")},
    "latency_tail": {
        "statistic": ("Share of windows over the control +margin", "%"),
        "threshold": ("e-value needed", ""),
    },
}
# The keys that decide a check, in the order they are shown; every other key is folded.
DECIDING = (
    "rates",
    "quantiles_ms",
    "share_over",
    "statistic",
    "threshold",
    "p_value",
    "e_value",
    "e_value_control",
    "e_threshold",
    "windows",
    "samples",
    "errors",
    "over",
    "breaches",
    "windows_over",
)


def label(key) -> str:
    text = str(key).replace("_", " ").strip()
    return text[:1].upper() + text[1:]


def number(value: float) -> str:
    if value != value or value in (float("inf"), float("-inf")):  # NaN, ±inf
        return str(value)
    if abs(value) >= 1e7:  # e-values, odds: the magnitude is what a person reads
        return f"{value:.3g}"
    if value == int(value):
        return f"{int(value):,}" if abs(value) >= 10_000 else str(int(value))
    if abs(value) >= 100:
        return f"{value:,.1f}"
    return f"{value:.4g}"


def when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso_time(text: str) -> str:
    """An ISO 8601 time as "2026-11-23 12:00:00 UTC"; any other text as it is."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return text
    if moment.tzinfo is None:
        return text
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def unit_of(key) -> str:
    """The unit a key's name implies: "ms", "s", "%", "time" or "". Only a snake_case name
    says one (a variant name, a URL or an arm's name says nothing: its values keep the
    unit of the key above them), and by whole words ("separate" is no rate)."""
    key = str(key)
    if not key.isidentifier() or key.lower() != key:
        return ""
    words = key.split("_")
    if words[-1] == "ms":
        return "ms"
    if words[-1] in ("at", "since", "time", "until") or key == "time":
        return "time"
    if words[-1] in ("s", "seconds"):
        return "s"
    if {"rate", "rates", "share", "shares"} & set(words):
        return "%"
    return ""


def with_unit(value, unit: str) -> str:
    """A number as people read it in `unit` (fractions shown in %, epochs as times)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "—" if value is None else str(value)
    if unit == "time" and EPOCH_RANGE[0] <= value <= EPOCH_RANGE[1]:
        return when(float(value))
    if unit == "%":
        return f"{value * 100:.3g} %"
    if unit in ("ms", "s"):
        return f"{number(float(value))} {unit}"
    return number(float(value))


def scalar(value, unit: str = "") -> SafeString:
    if value is None:
        return mark_safe('<span class="muted">—</span>')
    if isinstance(value, bool):
        return mark_safe("yes" if value else "no")
    if isinstance(value, (int, float)):
        return conditional_escape(with_unit(value, unit) if unit else number(float(value)))
    text = str(value)
    if unit == "time":
        text = iso_time(text)
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


def inline(value, depth: int = 0, unit: str = "") -> SafeString:
    """A value on one line: nested mappings as "key: value" pairs."""
    text = progress(value)
    if text is not None:
        return conditional_escape(text)
    if isinstance(value, dict) and depth < MAX_DEPTH:
        return format_html_join(
            ", ", "{}: {}", ((label(k), inline(v, depth + 1, unit_of(k) or unit)) for k, v in value.items())
        )
    if isinstance(value, (list, tuple)) and depth < MAX_DEPTH:
        return format_html_join(", ", "{}", ((inline(v, depth + 1, unit),) for v in value))
    if isinstance(value, (dict, list, tuple)):
        return conditional_escape(str(value))
    return scalar(value, unit)


def render(value, depth: int = 0, unit: str = "") -> SafeString:
    """Everything, folded under the summary: mappings as definition lists, a list of
    records (the judge's checks) as one small definition list per record."""
    if depth >= MAX_DEPTH or progress(value) is not None:
        return inline(value, depth, unit)
    if isinstance(value, dict):
        if not value:
            return mark_safe('<span class="muted">none</span>')
        items = format_html_join(
            "",
            "<dt>{}</dt><dd>{}</dd>",
            ((label(k), render(v, depth + 1, unit_of(k) or unit)) for k, v in value.items()),
        )
        return format_html('<dl class="props evidence">{}</dl>', items)
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(item, dict) for item in value):
            records = ({**{k: r[k] for k in FIRST_KEYS if k in r}, **r} for r in value)  # name and outcome first
            return format_html_join(
                "", '<div class="evidence-record">{}</div>', ((render(item, depth + 1, unit),) for item in records)
            )
        return inline(value, depth, unit)
    return scalar(value, unit)


# --- the figures that decided --------------------------------------------------------------------
def _checks(evidence, depth: int = 0) -> list[dict]:
    """Every judge-style check ({"name", "outcome", …}) in the evidence, however nested."""
    if depth > 3:
        return []
    if isinstance(evidence, list):
        if evidence and all(isinstance(c, dict) and "name" in c and "outcome" in c for c in evidence):
            return list(evidence)
        return [c for item in evidence for c in _checks(item, depth + 1)]
    if isinstance(evidence, dict):
        return [c for v in evidence.values() for c in _checks(v, depth + 1)]
    return []


def _versus(value: dict, unit: str) -> str | None:
    """{"candidate": a, "baseline"|"stable"|"control": b} as "candidate a vs baseline b"."""
    if "candidate" not in value:
        return None
    control = next((c for c in CONTROLS if c in value), None)
    text = f"candidate {with_unit(value['candidate'], unit)}"
    if control is not None:
        text += f" vs {control} {with_unit(value[control], unit)}"
    return text


def _figure(check: dict, key: str) -> tuple[str, str] | None:
    value = check.get(key)
    if value is None:
        return None
    words = CHECK_WORDS.get(str(check.get("name")), {})
    if key in ("statistic", "threshold") and key in words:
        if words[key] is None:
            return None
        name, unit = words[key]
        return name, with_unit(value, unit)
    if key == "quantiles_ms" and isinstance(value, dict):
        cand = value.get("candidate") or {}
        control = next((c for c in CONTROLS if c in value), None)
        ctrl = value.get(control) or {} if control else {}
        quantile = "p99" if cand.get("p99") is not None else "p50"
        return f"Latency {quantile}", _versus(
            {"candidate": cand.get(quantile), control or "control": ctrl.get(quantile)}, "ms"
        )
    if isinstance(value, dict):
        text = _versus(value, "%" if key in ("rates", "share_over") else unit_of(key))
        return (label(key), text) if text else None
    if key == "breaches" and not value:
        return None
    if key == "breaches":
        limit = check.get("failure_limit")
        return (
            "Breaches",
            f"{value} (fails at {limit}, held {with_unit(check.get('sustain_s'), 's')})" if limit else str(value),
        )
    if key == "windows_over":
        return "Windows over", f"{value} of {check.get('windows', '?')} ({check.get('failure_limit', '?')} to fail)"
    if key in ("p_value", "e_value", "e_value_control", "e_threshold"):
        return {
            "p_value": "p-value",
            "e_value": "e-value",
            "e_value_control": "e-value vs control",
            "e_threshold": "e-value needed",
        }[key], number(float(value)) if isinstance(value, (int, float)) else str(value)
    return label(key), with_unit(value, unit_of(key))


def evidence_summary(evidence) -> dict:
    """{"checks": [{"name", "outcome", "figures": [(label, text)]}], "facts": [(label, text)]}:
    the checks that decided (failed; else inconclusive; else all) with their deciding
    figures, and the evidence's top-level scalars (variant names, ids, times)."""
    checks = _checks(evidence)
    deciding = [c for c in checks if c.get("outcome") == "fail"] or [
        c for c in checks if c.get("outcome") == "inconclusive"
    ]
    shown = []
    for check in deciding or checks:
        figures = [f for f in (_figure(check, key) for key in DECIDING) if f]
        shown.append({"name": check.get("name"), "outcome": check.get("outcome"), "figures": figures})
    facts = []
    if isinstance(evidence, dict):
        for key, value in evidence.items():
            if isinstance(value, (str, int, float, bool)) or value is None:
                unit = unit_of(key)
                text = iso_time(value) if isinstance(value, str) and unit == "time" else value
                facts.append((label(key), with_unit(text, unit) if not isinstance(text, str) else text))
    return {"checks": shown[:6], "facts": facts[:8], "more": len(checks) - len(shown[:6])}
