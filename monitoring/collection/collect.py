"""Metric collection: pure functions from Prometheus text to per endpoint x variant samples.

No Django and no I/O here, so the tests feed them real exposition text. The flow per
tick: `*_snapshot(text)` (gateway_samples.py, triton_samples.py) flattens one scrape into cumulative values keyed
"kind|endpoint|variant|extra"; `*_deltas(prev, cur, ...)` turns two successive
snapshots of one target into raw interval totals per (endpoint, variant) (counts,
summed durations, histogram bucket counts, per-target rates); totals of several
targets (replicas) add up with `merge`; `derive(...)` turns the merged totals into the
stored metrics (rates, error rate, p50/p95/p99, queue share, utilization, cost). The
statistics it shares with the judge are in statistics.py.

The gateway's half is gateway_samples.py, Triton's triton_samples.py; both fill the Totals
and use the snapshot keys defined here, and derive() reads what they filled.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from monitoring.judge.statistics import SCORE_BINS, histogram_quantile

SEP = "|"
QUANTILES = (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))
ALL_VARIANTS = "all"  # series that the gateway reports per endpoint only (in-flight)
# Requests to endpoints that do not exist, stored as one bucket under this name (not a
# slug, so no endpoint can have it); the dashboard shows it as such, never as an endpoint.
UNKNOWN_ENDPOINT = "(unknown)"


# stored per endpoint x variant and tick: interval counts (summed over a window by the judge)
GR_STORED = {
    "gr_lookups": "gr_cache_lookups",
    "gr_hits": "gr_cache_hits",
    "gr_beams": "gr_beams",
    "gr_illegal_beams": "gr_illegal_beams",
}


@dataclass
class Totals:
    """Raw interval totals of one endpoint x variant; adding replicas is adding fields."""

    values: dict = field(default_factory=lambda: defaultdict(float))
    latency_buckets: dict = field(default_factory=lambda: defaultdict(float))  # le -> count (non-cumulative)
    upstream_buckets: dict = field(default_factory=lambda: defaultdict(float))
    score_buckets: dict = field(default_factory=lambda: defaultdict(float))  # le -> count of sampled scores
    # LLM endpoints: time to first token, inter-token latency, queue time (le -> count, non-cumulative)
    ttft_buckets: dict = field(default_factory=lambda: defaultdict(float))
    itl_buckets: dict = field(default_factory=lambda: defaultdict(float))
    queue_buckets: dict = field(default_factory=lambda: defaultdict(float))

    def add(self, other: Totals) -> None:
        for target, source in (
            (self.values, other.values),
            (self.latency_buckets, other.latency_buckets),
            (self.upstream_buckets, other.upstream_buckets),
            (self.score_buckets, other.score_buckets),
            (self.ttft_buckets, other.ttft_buckets),
            (self.itl_buckets, other.itl_buckets),
            (self.queue_buckets, other.queue_buckets),
        ):
            for key, value in source.items():
                target[key] += value


def snapshot_key(*parts) -> str:
    return SEP.join(str(p) for p in parts)


def split_key(key: str) -> list[str]:
    return key.split(SEP)


def le_text(le: float) -> str:
    return "+Inf" if math.isinf(le) else repr(float(le))


def counter_delta(prev: dict, cur: dict, key: str) -> float:
    """Increase of a counter between scrapes; a drop means the process restarted."""
    now = cur.get(key, 0.0)
    before = prev.get(key)
    if before is None or now < before:
        return now
    return now - before


def decumulate(cumulative: dict[float, float]) -> dict[float, float]:
    """Per-bucket counts {le: count}. Empty buckets are left out, except the one just
    below a bucket with counts: its bound is that bucket's lower edge, without which
    quantiles and the judge's rebuilt samples would spread the bucket's counts down to 0
    (all of a candidate's requests in (2, 3] ms read as a p50 of 1.5 ms)."""
    bounds = sorted(cumulative)
    counts, below = [], 0.0
    for le in bounds:
        counts.append(max(cumulative[le] - below, 0.0))
        below = max(below, cumulative[le])
    return {
        le: count
        for i, (le, count) in enumerate(zip(bounds, counts))
        if count or (i + 1 < len(counts) and counts[i + 1])
    }


def merge(*parts: dict[tuple[str, str], Totals]) -> dict[tuple[str, str], Totals]:
    """Add the totals of several targets (replicas, gateways) of one tick."""
    out: dict[tuple[str, str], Totals] = defaultdict(Totals)
    for part in parts:
        for series, totals in part.items():
            out[series].add(totals)
    return dict(out)


# --- derived metrics ------------------------------------------------------------------------------
def bucket_metric(prefix: str, le: float) -> str:
    return f"{prefix}:{le_text(le)}"


LLM_COUNTS = (
    "prompt_tokens",
    "completion_tokens",
    "tokens_per_s",
    "cost",
    "llm_fallbacks",
    "llm_client_faults",
    "llm_streams_in_flight",
)


def derive_llm(totals: Totals) -> dict[str, float]:
    """The LLM metrics of one endpoint x variant for one tick (from gateway/llm/metrics.py's families;
    stored: llm_requests, llm_errors, llm_error_rate, llm_request_rate; ttft_/itl_ p50 and p99 with their
    per-bucket counts (`ttft_bucket:<le>`, `itl_bucket:<le>`: what the judge's rank tests
    and SLO guardrails read, monitoring/judge/llm_checks.py); queue time; tokens, tokens/s
    (completion tokens over the interval) and cost in the interval."""
    v, out = totals.values, {}
    if "llm_requests" in v:
        out["llm_requests"] = v["llm_requests"]
        out["llm_errors"] = v.get("llm_errors", 0.0)
        out["llm_request_rate"] = v.get("llm_request_rate", 0.0)
        if v["llm_requests"] > 0:
            out["llm_error_rate"] = out["llm_errors"] / v["llm_requests"]
    for prefix, buckets in (("ttft", totals.ttft_buckets), ("itl", totals.itl_buckets)):
        if not buckets:
            continue
        for label, q in (("p50", 0.50), ("p99", 0.99)):
            value = histogram_quantile(q, buckets)
            if value is not None:
                out[f"{prefix}_{label}_ms"] = value * 1000
        for le, count in buckets.items():
            out[bucket_metric(f"{prefix}_bucket", le)] = count
    if v.get("queue_count"):
        out["llm_queue_mean_ms"] = v["queue_sum_s"] / v["queue_count"] * 1000
        p99 = histogram_quantile(0.99, totals.queue_buckets)
        if p99 is not None:
            out["llm_queue_p99_ms"] = p99 * 1000
    for name in LLM_COUNTS:
        if name in v:
            out[name] = v[name]
    return out


def derive(totals: Totals) -> dict[str, float]:
    """The stored metrics of one endpoint x variant for one tick: the gateway's, the LLM
    path's (derive_llm), Triton's (derive_triton) and a generative recommender's (derive_gr)."""
    v, out = totals.values, {}
    if "requests" in v:
        out["requests"] = v["requests"]
        out["errors"] = v.get("errors", 0.0)
        out["request_rate"] = v.get("request_rate", 0.0)
        if v["requests"] > 0:
            out["error_rate"] = v.get("errors", 0.0) / v["requests"]
    if totals.latency_buckets:
        for label, q in QUANTILES:
            value = histogram_quantile(q, totals.latency_buckets)
            if value is not None:
                out[f"latency_{label}_ms"] = value * 1000
        for le, count in totals.latency_buckets.items():
            out[bucket_metric("latency_bucket", le)] = count
    for le, count in totals.score_buckets.items():
        # The gateway's score histogram has the judge's bins as buckets: le = (i + 1) / SCORE_BINS.
        index = round(le * SCORE_BINS) - 1
        if count and 0 <= index < SCORE_BINS:
            out[f"score_bin:{index}"] = out.get(f"score_bin:{index}", 0.0) + count
    out.update(derive_llm(totals))
    if v.get("latency_count"):
        out["latency_mean_ms"] = v["latency_sum_s"] / v["latency_count"] * 1000
    if v.get("upstream_count"):
        out["upstream_mean_ms"] = v["upstream_sum_s"] / v["upstream_count"] * 1000
        p99 = histogram_quantile(0.99, totals.upstream_buckets)
        if p99 is not None:
            out["upstream_p99_ms"] = p99 * 1000
    for name in (
        "retries",
        "failovers",
        "upstream_errors",
        "shadow_dropped",
        "in_flight",
        "client_faults",
        "shared_failures",
        "unreached_errors",
        "failovers_in",
        "failovers_in_failed",
    ):
        if name in v:
            out[name] = v[name]
    out.update(derive_triton(v))
    out.update(derive_gr(v))
    return out


def derive_triton(v: dict) -> dict[str, float]:
    """Triton's side of one endpoint x variant for one tick: requests, failures, rates, where
    the time went (queue, compute), utilization, batch size and cost ({} without its counters)."""
    if "triton_success" not in v and "triton_failure" not in v:
        return {}
    out = {}
    success, failure = v.get("triton_success", 0.0), v.get("triton_failure", 0.0)
    inferences = v.get("triton_inferences", 0.0)
    out["triton_requests"] = success + failure
    out["triton_failures"] = failure
    out["triton_inference_rate"] = v.get("triton_inference_rate", 0.0)
    out["triton_in_flight"] = v.get("triton_pending", 0.0)
    if success + failure > 0:
        out["triton_error_rate"] = failure / (success + failure)
    if success > 0:
        # Triton's duration counters cover successful requests only.
        out["queue_ms"] = v.get("triton_queue_us", 0.0) / success / 1000
        out["compute_ms"] = v.get("triton_compute_us", 0.0) / success / 1000
        out["compute_infer_ms"] = v.get("triton_compute_infer_us", 0.0) / success / 1000
        out["server_ms"] = v.get("triton_request_us", 0.0) / success / 1000
    if v.get("triton_request_us", 0.0) > 0:
        out["queue_share"] = v.get("triton_queue_us", 0.0) / v["triton_request_us"]
    if v.get("triton_capacity_us", 0.0) > 0:
        out["utilization"] = min(v.get("triton_compute_us", 0.0) / v["triton_capacity_us"], 1.0)
    if v.get("triton_executions", 0.0) > 0:
        out["batch_size"] = inferences / v["triton_executions"]
    if v.get("cost_per_hour", 0.0) > 0 and out["triton_inference_rate"] > 0:
        out["cost_per_1k_inferences"] = v["cost_per_hour"] / (out["triton_inference_rate"] * 3600) * 1000
    return out


def derive_gr(v: dict) -> dict[str, float]:
    """A generative recommender's counts of the tick and their rates (no lookups, no rates)."""
    out = {stored: v[f"triton_{raw}"] for raw, stored in GR_STORED.items() if f"triton_{raw}" in v}
    if out.get("gr_cache_lookups"):
        out["gr_cache_hit_rate"] = out.get("gr_cache_hits", 0.0) / out["gr_cache_lookups"]
    if out.get("gr_beams"):
        out["gr_illegal_rate"] = out.get("gr_illegal_beams", 0.0) / out["gr_beams"]
    return out
