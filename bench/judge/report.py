"""The judge benchmark's figures from its rollouts (bench/judge/sim.py results): false
rollbacks over the A/A rollouts, per fault class its rollback rate (recall when the fault is
harmful), precision and time to detect, per rate; the goals; and what others publish.

Precision of a class: of the rollbacks in a 1:1 mix of that class's rollouts and A/A
rollouts under the same conditions (traces, rates, splits), the share that were right:
recall / (recall + the A/A false rollback rate). Gandalf's precision is the same question
asked of production alerts.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from bench.judge.faults import HEALTHY, catalogue

PUBLISHED = [
    {
        "system": "Netflix (anytime-valid canary tests)",
        "method": "sequential tests of stochastic order / equality in distribution, monitored continuously",
        "figure": "+1 % p75 play-delay shift detected in ~60 s; false detection held at alpha however often it looks",
        "source": "Lindon, Sanden, Shirikian, KDD 2022, arXiv:2205.14762; netflixtechblog.com 'Sequential A/B Testing Keeps the World Streaming Netflix Part 1: Continuous Data' (2024)",
    },
    {
        "system": "Azure Gandalf",
        "method": "spatial/temporal correlation of fault signals with rollouts, ensemble ranking, impact classifier",
        "figure": "92.4 % precision, 100 % recall on data-plane rollouts (94.9 % / 99.8 % control plane); decisions in ~5 min",
        "source": "Li et al., 'Gandalf: An Intelligent, End-To-End Analytics Service for Safe Deployment in Cloud-Scale Infrastructure', USENIX NSDI 2020; azure.microsoft.com/blog 'Advancing safe deployment with AIOps—introducing Gandalf' (2021)",
    },
    {
        "system": "Kayenta (Spinnaker)",
        "method": "fixed-horizon Mann-Whitney U per metric and interval, effect-size thresholds",
        "figure": "no published error rates; users report wrong passes and failures on noisy metrics",
        "source": "github.com/spinnaker/kayenta PR #282 (the Mann-Whitney judge), issue #780",
    },
    {
        "system": "Argo Rollouts",
        "method": "threshold analysis: successCondition per measurement every interval, abort after failureLimit",
        "figure": "no published error rates (the user sets thresholds and limits)",
        "source": "argoproj/argo-rollouts docs/features/analysis.md",
    },
    {
        "system": "Flagger",
        "method": "thresholdRange checks every interval, rollback after `threshold` failed checks",
        "figure": "no published error rates (the user sets thresholds and limits)",
        "source": "docs.flagger.app (Canary analysis: interval, threshold, metrics thresholdRange)",
    },
]


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson interval of a rate."""
    if n == 0:
        return (math.nan, math.nan)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def _times(rows: list[dict]) -> dict:
    seconds = [r["seconds"] for r in rows if r["outcome"] == "rolled_back"]
    if not seconds:
        return {"median_s": None, "p95_s": None, "n": 0}
    return {"median_s": float(np.median(seconds)), "p95_s": float(np.percentile(seconds, 95)), "n": len(seconds)}


def _rate(rows: list[dict], outcome: str = "rolled_back") -> float | None:
    return sum(r["outcome"] == outcome for r in rows) / len(rows) if rows else None


def summarize(results: list[dict]) -> dict:
    by_fault: dict[str, list[dict]] = defaultdict(list)
    for row in results:
        by_fault[row["fault"]].append(row)
    healthy = by_fault.get(HEALTHY.name, [])
    false_rollbacks = sum(r["outcome"] == "rolled_back" for r in healthy)
    aa = {
        "rollouts": len(healthy),
        "false_rollbacks": false_rollbacks,
        "false_rollback_rate": _rate(healthy),
        "false_rollback_ci95": wilson(false_rollbacks, len(healthy)),
        "outcomes": _outcomes(healthy),
        "by_trace_rate": {
            f"{trace} {rate:g}": {
                "rollouts": len(rows),
                "false_rollback_rate": _rate(rows),
                "outcomes": _outcomes(rows),
            }
            for (trace, rate), rows in _grouped(healthy, ("trace", "rate")).items()
        },
        "failed_checks": _failed_checks(healthy),
        "failed_checks_by_trace": {
            trace: _failed_checks(rows) for (trace,), rows in _grouped(healthy, ("trace",)).items()
        },
        "rolled_back_at_step": _steps(healthy),
        "paused_waiting_for": _waiting(healthy),
        "promote_seconds_median": _median([r["seconds"] for r in healthy if r["outcome"] == "promoted"]),
    }
    aa_by_cell = {cell: _rate(rows) for cell, rows in _grouped(healthy, ("trace", "rate", "split")).items()}
    classes = {}
    for fault in catalogue():
        rows = by_fault.get(fault.name, [])
        if not rows:
            continue
        rolled = _rate(rows)
        # the A/A false rollback rate under the same conditions as this class's rollouts
        fp = float(np.mean([aa_by_cell.get((r["trace"], r["rate"], r["split"]), 0.0) or 0.0 for r in rows]))
        classes[fault.name] = {
            "harmful": fault.harmful,
            "critical": fault.critical,
            "rollouts": len(rows),
            "rolled_back": rolled,
            "recall": rolled if fault.harmful else None,
            "precision": (rolled / (rolled + fp)) if fault.harmful and rolled + fp > 0 else None,
            "outcomes": _outcomes(rows),
            "detect": _times(rows),
            "by_rate": {
                f"{rate:g}": {"rolled_back": _rate(part), **_times(part)}
                for (rate,), part in _grouped(rows, ("rate",)).items()
            },
            "failed_checks": _failed_checks(rows),
        }
    return {"aa": aa, "classes": classes, "goals": goals(aa, classes, by_fault)}


def goals(aa: dict, classes: dict, by_fault: dict) -> dict:
    critical = [name for name, c in classes.items() if c["critical"]]
    critical_rows = [r for name in critical for r in by_fault[name]]
    recall = _rate(critical_rows)
    fp = aa["false_rollback_rate"] or 0.0
    p75 = [r for r in by_fault.get("latency p75 +1%", []) if r["rate"] == 2000]
    within = sum(r["outcome"] == "rolled_back" and r["seconds"] <= 60 for r in p75) / len(p75) if p75 else None
    outage = classes.get("shared outage 15 s", {})
    return {
        "false_rollbacks_at_most_1pct": {
            "value": aa["false_rollback_rate"],
            "met": (aa["false_rollback_rate"] or 0) <= 0.01,
        },
        "critical_recall_100pct": {"value": recall, "met": recall == 1.0, "classes": critical},
        "critical_precision_at_least_95pct": {
            "value": (recall / (recall + fp)) if recall else None,
            "met": bool(recall) and recall / (recall + fp) >= 0.95,
        },
        "p75_plus_1pct_within_60s_at_2000rps": {"value": within, "met": within == 1.0},
        "shared_outage_never_blamed": {"value": outage.get("rolled_back"), "met": outage.get("rolled_back") == 0},
    }


def _grouped(rows, keys) -> dict:
    out: dict = defaultdict(list)
    for row in rows:
        out[tuple(row[k] for k in keys)].append(row)
    return dict(sorted(out.items()))


def _outcomes(rows) -> dict:
    counts: dict[str, int] = defaultdict(int)
    for row in rows:
        counts[row["outcome"]] += 1
    return dict(sorted(counts.items()))


def _failed_checks(rows) -> dict:
    counts: dict[str, int] = defaultdict(int)
    for row in rows:
        if row["outcome"] == "rolled_back":
            for name in row["failed_checks"] or ["(none)"]:
                counts[name] += 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def _waiting(rows) -> dict:
    """What paused rollouts' last verdicts still waited for (runs before this field: none)."""
    counts: dict[str, int] = defaultdict(int)
    for row in rows:
        if row["outcome"] == "paused":
            for name in row.get("waiting_checks") or ["(not recorded)"]:
                counts[name] += 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def _steps(rows) -> dict:
    """Rollbacks by the step (index) they happened in; the last step of the plan is 100 %."""
    counts: dict[str, int] = defaultdict(int)
    for row in rows:
        if row["outcome"] == "rolled_back":
            last = len(row["steps_bp"]) - 1
            counts["100 %" if row["last_step"] == last else f"step {row['last_step'] + 1}"] += 1
    return dict(sorted(counts.items()))


def _median(values):
    return float(np.median(values)) if values else None


def _pct(value) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _secs(value) -> str:
    return "-" if value is None else f"{value:.0f}"


def table_rows(summary: dict, rates) -> tuple[list[str], list[list]]:
    headers = ["class", "n", "rolled back", "recall", "precision", "detect med/p95 s"] + [
        f"{r:g} req/s: rb, med/p95 s" for r in rates
    ]
    aa = summary["aa"]
    rows = [
        ["A/A (false rollback)", aa["rollouts"], _pct(aa["false_rollback_rate"]), "-", "-", "-"] + ["" for _ in rates]
    ]
    for rate in rates:
        part = [v for k, v in aa["by_trace_rate"].items() if k.endswith(f" {rate:g}")]
        n = sum(p["rollouts"] for p in part)
        fr = sum((p["false_rollback_rate"] or 0) * p["rollouts"] for p in part) / n if n else None
        rows[0][6 + list(rates).index(rate)] = _pct(fr)
    for name, c in summary["classes"].items():
        d = c["detect"]
        mark = " *" if c["critical"] else ("" if c["harmful"] else " (healthy)")
        row = [
            name + mark,
            c["rollouts"],
            _pct(c["rolled_back"]),
            _pct(c["recall"]),
            _pct(c["precision"]),
            f"{_secs(d['median_s'])}/{_secs(d['p95_s'])}",
        ]
        for rate in rates:
            r = c["by_rate"].get(f"{rate:g}")
            row.append("-" if r is None else f"{_pct(r['rolled_back'])}, {_secs(r['median_s'])}/{_secs(r['p95_s'])}")
        rows.append(row)
    return headers, rows
