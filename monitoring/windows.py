"""From stored samples to the judge's windows: one pure function for every metric source.

`arms_from_rows(rows, variants)` turns (variant, metric, time, value) rows — the shape the
metric store keeps and the Prometheus source rebuilds from PromQL — into ArmWindows:
per-tick (requests, errors) aligned by time, latency bucket counts summed and per tick
(rows with a time; the p99 guardrail counts requests over the SLO tick by tick) and
prediction-score bins. A new judge input (a histogram, TTFT/ITL for LLM endpoints) is added
here once and reaches the judge from both sources (monitoring/sources/).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from monitoring.collect import parse_bucket_metric
from monitoring.evidence import ArmWindow
from monitoring.statistics import SCORE_BINS

# What the judge reads of a variant's samples (the store's query filters on these).
TICK_METRICS = ("requests", "errors")
BUCKET_PREFIXES = ("latency_bucket:", "score_bin:")


def wanted(metric: str) -> bool:
    return metric in TICK_METRICS or metric.startswith(BUCKET_PREFIXES)


def arms_from_rows(rows: Iterable[tuple[str, str, datetime, float]], variants: list[str]) -> dict[str, ArmWindow]:
    variants = list(dict.fromkeys(variants))
    per_tick: dict[datetime, dict[str, list[float]]] = defaultdict(lambda: {v: [0.0, 0.0] for v in variants})
    buckets: dict[str, dict[float, float]] = {v: {} for v in variants}
    buckets_at: dict[str, dict[datetime, dict[float, float]]] = {v: defaultdict(dict) for v in variants}
    scores: dict[str, list[float]] = {v: [] for v in variants}
    for variant, metric, time, value in rows:
        if variant not in buckets:
            continue
        if metric in TICK_METRICS:
            per_tick[time][variant][0 if metric == "requests" else 1] += value
        elif metric.startswith("latency_bucket:"):
            _, le = parse_bucket_metric(metric)
            buckets[variant][le] = buckets[variant].get(le, 0.0) + value
            if time is not None:
                at = buckets_at[variant][time]
                at[le] = at.get(le, 0.0) + value
        elif metric.startswith("score_bin:"):
            index = int(metric.split(":", 1)[1])
            if 0 <= index < SCORE_BINS:
                if not scores[variant]:
                    scores[variant] = [0.0] * SCORE_BINS
                scores[variant][index] += value
    # a latency tick without request counts is a tick of its own (per_tick fills it with zeros)
    times = sorted(set(per_tick).union(*(buckets_at[v] for v in variants)))
    timed = any(buckets_at[v] for v in variants)
    return {
        v: ArmWindow(
            ticks=[tuple(per_tick[t][v]) for t in times],
            latency_buckets=buckets[v],
            score_bins=scores[v],
            latency_ticks=[dict(buckets_at[v].get(t, {})) for t in times] if timed else [],
        )
        for v in variants
    }
