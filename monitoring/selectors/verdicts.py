"""The judge's verdicts on one rollout as people read them: one row per check with its
latest outcome, its trend over the last ticks and its progress toward a verdict, instead
of one row per one-second tick. Pure functions over stored Verdict rows.

A check's evidence may carry `progress` {"have", "need", "unit"} and `eta_seconds`
(produced by the judge, see wave-3's shared contract); they are shown when present and
nothing is invented when absent."""

from __future__ import annotations

from dataclasses import dataclass, field

TREND_LENGTH = 12
SYMBOLS = {"pass": "✓", "fail": "✗", "inconclusive": "·", "skipped": "–"}
UNITS = {"requests", "samples", "scores", "windows"}


@dataclass
class CheckRow:
    name: str
    kind: str
    outcome: str
    detail: str
    trend: list[dict] = field(default_factory=list)  # oldest first: {"outcome", "symbol", "at"}
    progress: str = ""  # "312 of 500 requests · ~40 s"
    progress_fraction: float | None = None


def _number(value, digits: int) -> str:
    return f"{value:.{digits}g}" if isinstance(value, (int, float)) else ""


def detail(check: dict) -> str:
    """The check's figures, rounded: statistic, p- or e-value against its threshold."""
    parts = []
    if isinstance(check.get("share_over"), dict) and isinstance(check.get("over"), dict):
        return _exceedance_detail(check)
    if isinstance(check.get("statistic"), (int, float)):
        parts.append(f"statistic {_number(check['statistic'], 3)}")
    if isinstance(check.get("p_value"), (int, float)):
        parts.append(f"p={_number(check['p_value'], 2)}")
    if isinstance(check.get("e_value"), (int, float)):
        parts.append(f"e={check['e_value']:.2f}")
    if isinstance(check.get("threshold"), (int, float)):
        parts.append(f"threshold {_number(check['threshold'], 3)}")
    if isinstance(check.get("breaches"), int) and check["breaches"] > 0:  # a sustained guardrail
        parts.append(breach_text(check))
    if isinstance(check.get("samples"), (int, float)):
        parts.append(f"{int(check['samples'])} samples")
    return " · ".join(parts)


def breach_text(check: dict) -> str:
    """How far a sustained guardrail is from failing, in words that hold at every count:
    "breach 1 of 3 needed to fail"; at the count but not yet for long enough, "breaching
    at 3 looks for 4 s of 10 s needed to fail"; once failed, "failed after 3 breaches"."""
    count, limit = check["breaches"], check.get("failure_limit")
    if check.get("outcome") == "fail":
        return f"failed after {count} breach{'es' if count != 1 else ''}"
    if not isinstance(limit, int) or count < limit:
        return f"breach {count} of {limit if isinstance(limit, int) else '?'} needed to fail"
    held, sustain = check.get("breach_held_s"), check.get("sustain_s")
    if isinstance(held, (int, float)) and isinstance(sustain, (int, float)):
        return f"breaching at {count} looks for {held:.0f} s of {sustain:.0f} s needed to fail"
    return f"breaching at {count} looks"


def windows_text(check: dict) -> str:
    """The p99 guardrail's disjoint windows over the SLO against the count it needs."""
    count, limit = check["windows_over"], check.get("failure_limit")
    if check.get("outcome") == "fail" or not isinstance(limit, int):
        return f"over in {count} window{'s' if count != 1 else ''}"
    if count < limit:
        return f"over in {count} of {limit} windows needed to fail"
    return f"over in {count} windows ({limit} needed to fail: met; the e-values decide)"


def _exceedance_detail(check: dict) -> str:
    """The p99 guardrail: its requests over the SLO and its e-values (monitoring/judge/p99_guardrail.py)."""
    parts = []
    over, samples = check["over"].get("candidate"), (check.get("samples") or {}).get("candidate")
    share, allowed = check["share_over"].get("candidate"), check.get("allowed_share")
    if isinstance(over, (int, float)) and isinstance(samples, (int, float)):
        text = f"{int(over)} of {int(samples)} over {_number(check.get('threshold'), 3)} ms"
        if isinstance(share, (int, float)) and isinstance(allowed, (int, float)):
            text += f" ({share:.1%}, {allowed:.0%} allowed)"
        parts.append(text)
    needed = f" of {_number(check['e_threshold'], 3)}" if isinstance(check.get("e_threshold"), (int, float)) else ""
    if isinstance(check.get("e_value"), (int, float)):
        parts.append(f"e={check['e_value']:.2f}{needed} vs SLO")
    if isinstance(check.get("e_value_control"), (int, float)):
        parts.append(f"e={check['e_value_control']:.2f}{needed} vs control")
    if isinstance(check.get("windows_over"), int):
        parts.append(windows_text(check))
    if isinstance(check.get("statistic"), (int, float)):
        parts.append(f"p99 {_number(check['statistic'], 3)} ms")
    return " · ".join(parts)


def eta_text(seconds) -> str:
    if not isinstance(seconds, (int, float)) or seconds < 0:
        return ""
    if seconds < 90:
        return f"~{round(seconds)} s"
    if seconds < 5400:
        return f"~{round(seconds / 60)} min"
    return f"~{seconds / 3600:.1f} h"


def progress_text(check: dict) -> tuple[str, float | None]:
    """("312 of 500 requests · ~40 s", 0.624) from the check's evidence, ("", None) without it."""
    progress = check.get("progress")
    if not isinstance(progress, dict) or not isinstance(progress.get("have"), (int, float)):
        return "", None
    unit = progress.get("unit") if progress.get("unit") in UNITS else "samples"
    have, need = int(progress["have"]), progress.get("need")
    if isinstance(need, (int, float)) and 0 < need <= have:
        text, fraction = f"sample complete: {have} {unit}", 1.0
    elif isinstance(need, (int, float)) and need > 0:
        text, fraction = f"{have} of {int(need)} {unit}", min(1.0, have / need)
    else:
        text, fraction = f"{have} {unit}", None
    eta = eta_text(check.get("eta_seconds"))
    return (f"{text} · {eta}" if eta else text), fraction


def summarize(verdicts: list, *, trend_length: int = TREND_LENGTH) -> list[CheckRow]:
    """One row per check, in the order of the latest verdict; `verdicts` newest first."""
    rows: dict[str, CheckRow] = {}
    for verdict in verdicts:
        for check in verdict.checks or []:
            name = check.get("name")
            if not name:
                continue
            row = rows.get(name)
            if row is None:
                text, fraction = progress_text(check)
                row = rows[name] = CheckRow(
                    name=name,
                    kind=check.get("kind", ""),
                    outcome=check.get("outcome", ""),
                    detail=detail(check),
                    progress=text,
                    progress_fraction=fraction,
                )
            if len(row.trend) < trend_length:
                outcome = check.get("outcome", "")
                row.trend.append({"outcome": outcome, "symbol": SYMBOLS.get(outcome, "?"), "at": verdict.created_at})
    for row in rows.values():
        row.trend.reverse()
    return list(rows.values())


def canary_measured(verdicts) -> dict | None:
    """What a canary measured, from its verdicts (newest first): the latest verdict whose
    latency check has quantiles of both arms gives p50/p99 of the candidate and its control
    (the fair baseline when the rollout had one, else the stable) and their ratios; the
    latest error-rate check gives both arms' error rates. None before any such verdict."""
    for verdict in verdicts:
        checks = {c.get("name"): c for c in verdict.checks or [] if isinstance(c, dict)}
        quantiles = (checks.get("latency") or {}).get("quantiles_ms") or {}
        candidate, control = quantiles.get("candidate") or {}, quantiles.get("stable") or {}
        if candidate.get("p50") is None or control.get("p50") is None:
            continue
        rates = (checks.get("error_rate") or {}).get("rates") or {}
        samples = (checks.get("latency") or {}).get("samples") or {}

        def ratio(key, candidate=candidate, control=control):
            a, b = candidate.get(key), control.get(key)
            return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0 else None

        return {
            "at": verdict.created_at,
            "step": verdict.step,
            "candidate_variant": verdict.candidate_variant,
            "control_variant": verdict.stable_variant,
            "candidate_p50_ms": candidate.get("p50"),
            "candidate_p99_ms": candidate.get("p99"),
            "control_p50_ms": control.get("p50"),
            "control_p99_ms": control.get("p99"),
            "p50_ratio": ratio("p50"),
            "p99_ratio": ratio("p99"),
            "candidate_requests": samples.get("candidate"),
            "control_requests": samples.get("stable"),
            "candidate_error_rate": rates.get("candidate"),
            "control_error_rate": rates.get("stable"),
            "outcome": verdict.outcome,
        }
    return None
