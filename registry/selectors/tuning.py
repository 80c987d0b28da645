"""Reads of the tune stage's evidence (an artifact's `benchmark["tune"]`, written by
registry/factory/tune/stage.py): the table of configs tried with the Pareto front marked,
the chart's points, and the figures a release shows as the tune's prediction. Pure over
the stored JSON, so the build page, the API and the deployments app read the same."""

from __future__ import annotations


def tune_evidence(artifact) -> dict | None:
    evidence = (artifact.benchmark or {}).get("tune")
    return evidence if isinstance(evidence, dict) and evidence.get("trials") else None


def pareto(points: list[tuple[float, float]]) -> list[bool]:
    """Which (p99 ms, throughput) points no other point beats on both (lower p99 and at
    least the throughput, or higher throughput and at most the p99)."""
    flags = []
    for i, (latency, rate) in enumerate(points):
        dominated = any(
            j != i
            and other_latency <= latency
            and other_rate >= rate
            and (other_latency, other_rate) != (latency, rate)
            for j, (other_latency, other_rate) in enumerate(points)
        )
        flags.append(not dominated)
    return flags


def _knobs_text(knobs: dict) -> str:
    labels = {
        "instances": "instances",
        "intra_op_threads": "threads",
        "preferred_batch_sizes": "batch",
        "max_queue_delay_us": "delay µs",
        "trt_precision": "TensorRT",
    }
    parts = []
    for key, value in (knobs or {}).items():
        if key == "preferred_batch_sizes":
            value = "off" if value == [1] else ("/".join(str(v) for v in value) or "max")
        parts.append(f"{labels.get(key, key)} {value}")
    return ", ".join(parts)


def headline(evidence: dict, trials: list[dict], key: str) -> dict:
    """The default's or the best's figure as the table shows it: the throughput within the
    SLO, the table's rows it is the mean of (its own and, after the search, its run again),
    and why it is 0 when it is (the trial's `why_zero`)."""
    point = evidence.get(key) or {}
    number = point.get("trial")
    again = "default, again" if key == "default" else f"best (#{number}), again"
    runs = [t for t in trials if t.get("trial") == number or t.get("label") == again]
    zero = next((t.get("why_zero") or t.get("error") for t in runs if not t.get("throughput_rps")), None)
    return {
        "throughput_rps": point.get("throughput_rps"),
        "runs": [{"trial": t["trial"], "throughput_rps": t.get("throughput_rps") or 0.0} for t in runs],
        "mean_of_runs": len(runs) > 1,
        "why_zero": zero if not point.get("throughput_rps") else None,
        "p50_ms": point.get("p50_ms"),
        "p99_ms": point.get("p99_ms"),
    }


def tune_report(artifact) -> dict | None:
    """The table and chart of one artifact's tune, or None when it has none."""
    evidence = tune_evidence(artifact)
    if evidence is None:
        return None
    trials = [t for t in evidence["trials"] if isinstance(t, dict)]
    measured = [t for t in trials if "error" not in t and t.get("p99_ms") is not None]
    flags = pareto([(float(t["p99_ms"]), float(t["throughput_rps"])) for t in measured])
    front = {t["trial"] for t, flag in zip(measured, flags) if flag and t["throughput_rps"] > 0}
    best_trial = (evidence.get("best") or {}).get("trial")
    rows = [
        {
            **t,
            "config": _knobs_text(t.get("knobs")),
            "pareto": t["trial"] in front,
            "is_best": t["trial"] == best_trial,
        }
        for t in trials
    ]
    chart = {
        "slo_p99_ms": evidence.get("slo_p99_ms"),
        "points": [
            {
                "x": t["p99_ms"],
                "y": t["throughput_rps"],
                "trial": t["trial"],
                "label": t.get("label") or "",
                "config": _knobs_text(t.get("knobs")),
                "pareto": t["trial"] in front,
                "best": t["trial"] == best_trial,
            }
            for t in measured
        ],
    }
    return {
        "artifact": artifact,
        "evidence": evidence,
        "headlines": [("default", headline(evidence, trials, "default")), ("best", headline(evidence, trials, "best"))],
        "rows": rows,
        "chart": chart,
        "chart_id": f"tune-chart-{artifact.pk}",
    }


def tune_reports(artifacts) -> list[dict]:
    return [report for report in (tune_report(a) for a in artifacts) if report is not None]


def tune_prediction(artifact) -> dict | None:
    """What the tune predicted for a tuned artifact, as a release shows it beside what its
    canary measured: throughput within the SLO and p50/p99 at that rate, tuned vs default."""
    evidence = tune_evidence(artifact)
    if evidence is None:
        return None
    default, best = evidence.get("default") or {}, evidence.get("best") or {}
    trials = [t for t in evidence["trials"] if isinstance(t, dict)]
    return {
        "slo_p99_ms": evidence.get("slo_p99_ms"),
        "default_rps": default.get("throughput_rps"),
        "default_why_zero": headline(evidence, trials, "default")["why_zero"],
        "tuned_rps": best.get("throughput_rps"),
        "gain": evidence.get("gain"),
        "default_p50_ms": default.get("p50_ms"),
        "default_p99_ms": default.get("p99_ms"),
        "tuned_p50_ms": best.get("p50_ms"),
        "tuned_p99_ms": best.get("p99_ms"),
        "config": _knobs_text(best.get("knobs")),
        "load_avg": (evidence.get("machine") or {}).get("load_avg_start"),
    }


def tune_budget_default() -> float:
    """The tune's time budget when a request gives none (TUNE_BUDGET_S): what a form shows."""
    from registry.factory import conf

    return float(conf.get("TUNE_BUDGET_S"))
