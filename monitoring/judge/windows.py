"""From stored samples to the judge's windows: one pure function for every metric source.

`arms_from_rows(rows, variants)` turns (variant, metric, time, value) rows — the shape the
metric store keeps and the Prometheus source rebuilds from PromQL — into ArmWindows:
per-tick (requests, errors) aligned by time (each variant's own: a stable's answers to other
variants' failovers are theirs, not its sample), latency bucket counts summed and per tick
(rows with a time; the p99 guardrail counts requests over the SLO tick by tick) and
prediction-score bins. A new judge input (a histogram, TTFT/ITL for LLM endpoints) is added
here once and reaches the judge from both sources (monitoring/sources/).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from monitoring.judge.evidence import ArmWindow
from monitoring.judge.statistics import SCORE_BINS, parse_bucket_metric

# What the judge reads of a variant's samples (the store's query filters on these).
TICK_METRICS = ("requests", "errors")
SHARED_METRIC = "shared_failures"  # collection/failovers.py: failed on the variant and on the stable
UNREACHED_METRIC = "unreached_errors"  # the variant's errors whose attempt never reached its model (same place)
# failovers the variant (the stable) answered or failed for other variants: their requests, not its own
ARRIVAL_METRICS = ("failovers_in", "failovers_in_failed")
PER_TICK_COUNTS = (SHARED_METRIC, UNREACHED_METRIC, *ARRIVAL_METRICS)  # read per tick beside TICK_METRICS
LLM_TICK_METRICS = ("llm_requests", "llm_errors")  # LLM endpoints' requests and errors (gateway_llm_requests)
BUCKET_PREFIXES = ("latency_bucket:", "score_bin:", "ttft_bucket:", "itl_bucket:")
# counts summed over the window into ArmWindow.counts (a generative recommender's: collect.GR_STORED)
COUNT_METRICS = ("gr_cache_lookups", "gr_cache_hits", "gr_beams", "gr_illegal_beams")
# histogram metric prefix -> the ArmWindow fields it fills (window totals, per tick)
HISTOGRAMS = {
    "latency_bucket": ("latency_buckets", "latency_ticks"),
    "ttft_bucket": ("ttft_buckets", "ttft_ticks"),
    "itl_bucket": ("itl_buckets", "itl_ticks"),
}


def wanted(metric: str) -> bool:
    return (
        metric in TICK_METRICS
        or metric in PER_TICK_COUNTS
        or metric in LLM_TICK_METRICS
        or metric in COUNT_METRICS
        or metric.startswith(BUCKET_PREFIXES)
    )


def arms_from_rows(rows: Iterable[tuple[str, str, datetime, float]], variants: list[str]) -> dict[str, ArmWindow]:
    variants = list(dict.fromkeys(variants))
    per_tick: dict[datetime, dict[str, list[float]]] = defaultdict(lambda: {v: [0.0, 0.0] for v in variants})
    llm_tick: dict[datetime, dict[str, list[float]]] = defaultdict(lambda: {v: [0.0, 0.0] for v in variants})
    buckets = {h: {v: {} for v in variants} for h in HISTOGRAMS}
    buckets_at = {h: {v: defaultdict(dict) for v in variants} for h in HISTOGRAMS}
    scores: dict[str, list[float]] = {v: [] for v in variants}
    # per metric of PER_TICK_COUNTS: {time: {variant: value}}
    extra = {m: defaultdict(lambda: dict.fromkeys(variants, 0.0)) for m in PER_TICK_COUNTS}
    counts: dict[str, dict[str, float]] = {v: {} for v in variants}
    for variant, metric, time, value in rows:
        if variant not in scores:
            continue
        if metric in TICK_METRICS:
            per_tick[time][variant][0 if metric == "requests" else 1] += value
        elif metric in extra:
            extra[metric][time][variant] += value
        elif metric in LLM_TICK_METRICS:
            llm_tick[time][variant][0 if metric == "llm_requests" else 1] += value
        elif metric in COUNT_METRICS:
            counts[variant][metric] = counts[variant].get(metric, 0.0) + value
        elif metric.startswith("score_bin:"):
            index = int(metric.split(":", 1)[1])
            if 0 <= index < SCORE_BINS:
                if not scores[variant]:
                    scores[variant] = [0.0] * SCORE_BINS
                scores[variant][index] += value
        elif metric.partition(":")[0] in HISTOGRAMS:
            prefix, le = parse_bucket_metric(metric)
            total = buckets[prefix][variant]
            total[le] = total.get(le, 0.0) + value
            if time is not None:
                at = buckets_at[prefix][variant][time]
                at[le] = at.get(le, 0.0) + value
    # a histogram tick without request counts is a tick of its own (per_tick fills it with zeros)
    shared, unreached = extra[SHARED_METRIC], extra[UNREACHED_METRIC]
    times = sorted(
        set(per_tick).union(llm_tick, shared, unreached, *(buckets_at[h][v] for h in HISTOGRAMS for v in variants))
    )
    _own_requests(per_tick, *(extra[m] for m in ARRIVAL_METRICS))
    has_llm = bool(llm_tick)

    def per_time(prefix: str, variant: str) -> list[dict[float, float]]:
        timed = any(buckets_at[prefix][v] for v in variants)
        return [dict(buckets_at[prefix][variant].get(t, {})) for t in times] if timed else []

    return {
        v: ArmWindow(
            ticks=[tuple(per_tick[t][v]) for t in times],
            latency_buckets=buckets["latency_bucket"][v],
            score_bins=scores[v],
            latency_ticks=per_time("latency_bucket", v),
            llm_ticks=[tuple(llm_tick[t][v]) for t in times] if has_llm else [],
            ttft_buckets=buckets["ttft_bucket"][v],
            ttft_ticks=per_time("ttft_bucket", v),
            itl_buckets=buckets["itl_bucket"][v],
            itl_ticks=per_time("itl_bucket", v),
            shared_failures=[shared[t][v] if t in shared else 0.0 for t in times] if shared else [],
            unreached_errors=[unreached[t][v] if t in unreached else 0.0 for t in times] if unreached else [],
            counts=counts[v],
        )
        for v in variants
    }


def _own_requests(per_tick: dict, arrived: dict, arrived_failed: dict) -> None:
    """Each variant's own (requests, errors) per tick: what it answered less the failovers it
    answered or failed for other variants (collection/failovers.py), which are theirs."""
    for t, by_variant in arrived.items():
        if t not in per_tick:
            continue
        for v, moved in by_variant.items():
            requests, errors = per_tick[t][v]
            own = max(requests - moved, 0.0)
            per_tick[t][v] = [own, min(max(errors - arrived_failed.get(t, {}).get(v, 0.0), 0.0), own)]
