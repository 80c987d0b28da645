"""Metric collection: pure functions from Prometheus text to per endpoint x variant samples.

No Django and no I/O here, so the tests feed them real exposition text. The flow per
tick: `*_snapshot(text)` flattens one scrape into cumulative values keyed
"kind|endpoint|variant|extra"; `*_deltas(prev, cur, ...)` turns two successive
snapshots of one target into raw interval totals per (endpoint, variant) (counts,
summed durations, histogram bucket counts, per-target rates); totals of several
targets (replicas) add up with `merge`; `derive(...)` turns the merged totals into the
stored metrics (rates, error rate, p50/p95/p99, queue share, utilization, cost). The
statistics it shares with the judge are in statistics.py.

Why this is one long module: the gateway and Triton halves fill the same Totals from the
same snapshot key format, and derive() reads both; split apart, each half would import the
other's internals.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from monitoring.exposition import samples as exposition_samples
from monitoring.statistics import SCORE_BINS, histogram_quantile

SEP = "|"
QUANTILES = (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))
ALL_VARIANTS = "all"  # series that the gateway reports per endpoint only (in-flight)
# Requests to endpoints that do not exist, stored as one bucket under this name (not a
# slug, so no endpoint can have it); the dashboard shows it as such, never as an endpoint.
UNKNOWN_ENDPOINT = "(unknown)"


@dataclass(frozen=True)
class GatewayNames:
    """Metric and label names of the gateway's /metrics (gateway/metrics.py).

    Only `prefix` usually changes; the suffixes follow the gateway's definitions.
    """

    prefix: str = "gateway_"
    requests: str = "requests_total"
    latency: str = "request_duration_seconds"
    upstream: str = "upstream_duration_seconds"
    retries: str = "retries_total"
    failovers: str = "failovers_total"
    failovers_failed: str = "failovers_failed_total"  # {endpoint, from_variant, reason}
    reason_label: str = "reason"
    timeout_reason: str = "timeout"  # gateway/failover.py FailureReason.TIMEOUT
    upstream_errors: str = "upstream_errors_total"
    shadow_dropped: str = "shadow_dropped_total"
    shadow_requests: str = "shadow_requests_total"
    shadow_latency: str = "shadow_duration_seconds"
    prediction_score: str = "prediction_score"  # gateway/scores.py: 10 equal buckets over [0, 1]
    in_flight: str = "in_flight_requests"
    # LLM endpoints (gateway/llm/, names in gateway/llm/metrics.py): counters are exposed with "_total"
    llm_requests: str = "llm_requests_total"  # {endpoint, variant, status, fault}
    llm_ttft: str = "llm_ttft_seconds"  # histogram: arrival -> first token sent
    llm_itl: str = "llm_itl_seconds"  # histogram: gap between consecutive streamed chunks
    llm_queue: str = "llm_queue_seconds"  # histogram: arrival -> upstream request sent
    llm_tokens: str = "llm_tokens_total"  # {endpoint, variant, team, key, kind: prompt|completion}
    llm_cost: str = "llm_cost_total"  # {endpoint, variant, team, key}
    llm_fallbacks: str = "llm_fallbacks_total"  # {endpoint, backend, reason}: no variant label
    llm_rescued: str = "llm_rescued_total"  # {endpoint, variant, reason}: the variant's own backends failed it
    llm_streams: str = "llm_streams_in_flight"  # gauge {endpoint}
    token_kind_label: str = "kind"
    backend_fault: str = "backend"
    endpoint_label: str = "endpoint"
    variant_label: str = "variant"
    status_label: str = "status"
    from_variant_label: str = "from_variant"
    fault_label: str = "fault"  # gateway_requests_total: none | client | backend
    client_fault: str = "client"
    unknown_endpoint: str = "(unknown)"  # endpoint label of requests to no known endpoint (gateway.metrics)
    error_status_min: int = 500  # statuses at or above count as errors (4xx is the client's)

    def name(self, suffix: str) -> str:
        return f"{self.prefix}{suffix}"


TRITON_COUNTERS = {
    "nv_inference_request_success": "success",
    "nv_inference_request_failure": "failure",
    "nv_inference_count": "inferences",
    "nv_inference_exec_count": "executions",
    "nv_inference_request_duration_us": "request_us",
    "nv_inference_queue_duration_us": "queue_us",
    "nv_inference_compute_input_duration_us": "compute_input_us",
    "nv_inference_compute_infer_duration_us": "compute_infer_us",
    "nv_inference_compute_output_duration_us": "compute_output_us",
}
TRITON_GAUGES = {"nv_inference_pending_request_count": "pending"}
# A generative recommender's own counters beside Triton's, per model and version
# (platform/triton/gr_adapter/model.py): cache lookups (hits: "hit" and "grown", which reuse
# the cached prefix), beams and beams whose semantic id no item has.
GR_COUNTERS = {"gr_cache_lookups": "gr_lookups", "gr_beams": "gr_beams", "gr_illegal_beams": "gr_illegal_beams"}
GR_HIT_RESULTS = frozenset({"hit", "grown"})
# stored per endpoint x variant and tick: interval counts (summed over a window by the judge)
GR_STORED = {
    "gr_lookups": "gr_cache_lookups",
    "gr_hits": "gr_cache_hits",
    "gr_beams": "gr_beams",
    "gr_illegal_beams": "gr_illegal_beams",
}
TRITON_FAMILIES = (*TRITON_COUNTERS, *TRITON_GAUGES, *GR_COUNTERS)


@dataclass
class TritonModelMap:
    """Which endpoint x variant a Triton model serves on one replica, and its instance count."""

    endpoint: str
    variant: str
    instances: int = 1


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


def _key(*parts) -> str:
    return SEP.join(str(p) for p in parts)


def _split(key: str) -> list[str]:
    return key.split(SEP)


def _le(value: str) -> float:
    return math.inf if value in ("+Inf", "Inf", "inf") else float(value)


def _le_text(le: float) -> str:
    return "+Inf" if math.isinf(le) else repr(float(le))


# --- gateway ----------------------------------------------------------------------------------
def gateway_families(names: GatewayNames = GatewayNames()) -> tuple[str, ...]:
    """The gateway's metric families the collector reads (prefix filter; the Prometheus
    source asks for the same)."""
    return tuple(
        names.name(n).removesuffix("_total")
        for n in (
            names.requests,
            names.latency,
            names.upstream,
            names.retries,
            names.failovers,
            names.failovers_failed,
            names.upstream_errors,
            names.shadow_dropped,
            names.in_flight,
            names.shadow_requests,
            names.shadow_latency,
            names.prediction_score,
            names.llm_requests,
            names.llm_ttft,
            names.llm_itl,
            names.llm_queue,
            names.llm_tokens,
            names.llm_cost,
            names.llm_fallbacks,
            names.llm_rescued,
            names.llm_streams,
        )
    )


def gateway_snapshot(text: str, names: GatewayNames = GatewayNames()) -> dict[str, float]:
    """Flatten one scrape of the gateway into cumulative values (JSON-serialisable)."""
    return gateway_snapshot_samples(exposition_samples(text, gateway_families(names)), names)


def gateway_snapshot_samples(samples, names: GatewayNames = GatewayNames()) -> dict[str, float]:  # noqa: C901 - one pass read top to bottom (was gateway_snapshot's)
    """The same from (sample name, labels, value) triples: a scrape's samples, or one
    instant of a gateway's series read back from Prometheus (monitoring/sources/prometheus.py)."""
    ep_l, var_l = names.endpoint_label, names.variant_label
    # A shadow variant only ever gets shadow copies: its replies are its requests and its
    # latency, so shadow series land on the same keys and the judge can compare it too.
    histograms = {
        names.name(names.latency): "lat",
        names.name(names.upstream): "up",
        names.name(names.shadow_latency): "lat",
        names.name(names.prediction_score): "score",
        names.name(names.llm_ttft): "ttft",
        names.name(names.llm_itl): "itl",
        names.name(names.llm_queue): "llmq",
    }
    shadow_requests = names.name(names.shadow_requests)
    request_counters = {names.name(names.requests), shadow_requests}
    simple = {
        names.name(names.retries): "retries",
        names.name(names.upstream_errors): "upstream_errors",
        names.name(names.shadow_dropped): "shadow_dropped",
    }
    llm = {
        names.name(names.llm_requests): "llm_req",
        names.name(names.llm_tokens): "llm_tokens",
        names.name(names.llm_cost): "llm_cost",
        names.name(names.llm_fallbacks): "llm_fallbacks",
        names.name(names.llm_rescued): "llm_rescued",
    }
    out: dict[str, float] = defaultdict(float)
    for name, labels, value in samples:
        if name in request_counters:
            status = labels.get(names.status_label, "")
            if labels.get(names.fault_label) == names.client_fault:
                # The client's doing (4xx, a deadline below the endpoint's floor, a
                # disconnect): kept apart, neither a request nor an error of the variant.
                out[_key("client_faults", labels.get(ep_l, ""), labels.get(var_l, ""))] += value
                continue
            if name == shadow_requests and (status in ("unavailable", "incompatible") or status.startswith("4")):
                # A shadow copy is a request the primary served: no ready shadow replica,
                # or the shadow's model refusing it, is the shadow's failure.
                status = "error"
            out[_key("req", labels.get(ep_l, ""), labels.get(var_l, ""), status)] += value
        elif name.endswith("_bucket") and name[: -len("_bucket")] in histograms:
            kind = histograms[name[: -len("_bucket")]]
            out[_key(kind, labels.get(ep_l, ""), labels.get(var_l, ""), _le_text(_le(labels["le"])))] += value
        elif name.endswith("_sum") and name[: -len("_sum")] in histograms:
            out[_key(histograms[name[: -len("_sum")]] + "_sum", labels.get(ep_l, ""), labels.get(var_l, ""))] += value
        elif name in simple:
            out[_key(simple[name], labels.get(ep_l, ""), labels.get(var_l, ""))] += value
        elif name in (names.name(names.failovers), names.name(names.failovers_failed)):
            kind = "failovers" if name == names.name(names.failovers) else "failovers_failed"
            timeout = labels.get(names.reason_label) == names.timeout_reason
            out[
                _key(
                    kind + ("_timeout" if timeout else ""),
                    labels.get(ep_l, ""),
                    labels.get(names.from_variant_label, ""),
                )
            ] += value
        elif name == names.name(names.in_flight):
            out[_key("in_flight", labels.get(ep_l, ""), labels.get(var_l, ALL_VARIANTS))] += value
        elif name == names.name(names.llm_streams):
            out[_key("llm_streams_in_flight", labels.get(ep_l, ""), ALL_VARIANTS)] += value
        elif name in llm:
            _llm_sample(out, llm[name], labels, value, names)
    return dict(out)


def _llm_sample(out: dict, kind: str, labels: dict, value: float, names: GatewayNames) -> None:
    """One sample of the gateway's LLM counters into the snapshot (histograms go with the others).

    Requests: a client fault (a 4xx such as a token quota's 429, a disconnect) is kept
    apart as for tensors; an error is a 5xx or any request the gateway marks as the
    backend's fault (a stream that broke after its first token is sent with 200 but
    failed all the same). Tokens and cost are summed over team and key here (the keys
    page reads those per key, live: monitoring/selectors/tenants.py)."""
    endpoint, variant = labels.get(names.endpoint_label, ""), labels.get(names.variant_label, "")
    if kind == "llm_req":
        fault = labels.get(names.fault_label, "")
        if fault == names.client_fault:
            out[_key("llm_client_faults", endpoint, variant)] += value
            return
        status = labels.get(names.status_label, "")
        if fault == names.backend_fault and not _is_error_status(status, names):
            status = "error"
        out[_key("llm_req", endpoint, variant, status)] += value
    elif kind == "llm_tokens":
        token_kind = labels.get(names.token_kind_label, "")
        if token_kind in ("prompt", "completion"):
            out[_key(f"{token_kind}_tokens", endpoint, variant)] += value
    elif kind == "llm_cost":
        out[_key("cost", endpoint, variant)] += value
    elif kind == "llm_fallbacks":
        out[_key("llm_fallbacks", endpoint, ALL_VARIANTS)] += value
    elif kind == "llm_rescued":
        # served by the endpoint's fallbacks (under variant "fallback"): for the judge one failed
        # request of the variant whose own backends could not serve it, as a tensor failover is
        out[_key("llm_req", endpoint, variant, "error")] += value


def _is_error_status(status: str, names: GatewayNames) -> bool:
    try:
        return int(status) >= names.error_status_min
    except ValueError:
        return status.lower() in {"error", "timeout"}


def _counter_delta(prev: dict, cur: dict, key: str) -> float:
    """Increase of a counter between scrapes; a drop means the process restarted."""
    now = cur.get(key, 0.0)
    before = prev.get(key)
    if before is None or now < before:
        return now
    return now - before


def _decumulate(cumulative: dict[float, float]) -> dict[float, float]:
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


GAUGES = ("in_flight", "llm_streams_in_flight")  # values as scraped, not diffed
# snapshot kind of a histogram -> the Totals field prefix ("<prefix>_buckets") and the
# values' "<prefix>_sum_s" / "<prefix>_count"
HISTOGRAM_KINDS = {
    "lat": "latency",
    "up": "upstream",
    "score": "score",
    "ttft": "ttft",
    "itl": "itl",
    "llmq": "queue",
}


def gateway_deltas(  # noqa: C901 - one pass read top to bottom; split when next changed
    prev: dict, cur: dict, *, seconds: float, names: GatewayNames = GatewayNames()
) -> dict[tuple[str, str], Totals]:
    """Interval totals per (endpoint, variant) from two successive gateway snapshots."""
    result: dict[tuple[str, str], Totals] = defaultdict(Totals)
    cumulative: dict[tuple[str, str, str], dict[float, float]] = defaultdict(dict)
    for key in cur:
        kind, endpoint, variant, *rest = _split(key)
        if endpoint == names.unknown_endpoint:
            endpoint = UNKNOWN_ENDPOINT
        if kind in GAUGES:
            result[(endpoint, variant)].values[kind] += cur[key]
            continue
        delta = _counter_delta(prev, cur, key)
        totals = result[(endpoint, variant)]
        if kind in ("req", "llm_req"):
            prefix = "" if kind == "req" else "llm_"
            totals.values[f"{prefix}requests"] += delta
            if _is_error_status(rest[0], names):
                totals.values[f"{prefix}errors"] += delta
        elif kind in HISTOGRAM_KINDS:
            cumulative[(kind, endpoint, variant)][_le(rest[0])] = delta
        elif kind.endswith("_sum") and kind[: -len("_sum")] in HISTOGRAM_KINDS:
            totals.values[HISTOGRAM_KINDS[kind[: -len("_sum")]] + "_sum_s"] += delta
        else:
            totals.values[kind] += delta
    for (kind, endpoint, variant), buckets in cumulative.items():
        target = result[(endpoint, variant)]
        per_bucket = _decumulate(buckets)
        store = getattr(target, HISTOGRAM_KINDS[kind] + "_buckets")
        for le, count in per_bucket.items():
            store[le] += count
        if kind != "score":
            target.values[HISTOGRAM_KINDS[kind] + "_count"] += sum(per_bucket.values())
    # the gateway's largest finite latency bound: where a timed-out attempt is counted from
    top = max(
        (le for (kind, _, _), b in cumulative.items() if kind == "lat" for le in b if not math.isinf(le)), default=None
    )
    for totals in result.values():
        _failovers_counted(totals, top)
        if "requests" in totals.values:
            totals.values["request_rate"] += totals.values["requests"] / seconds if seconds > 0 else 0.0
        if "llm_requests" in totals.values:
            totals.values["llm_request_rate"] += totals.values["llm_requests"] / seconds if seconds > 0 else 0.0
        if "completion_tokens" in totals.values:
            # a rate per target, so replicas (several gateways) add up like request_rate
            totals.values["tokens_per_s"] += totals.values["completion_tokens"] / seconds if seconds > 0 else 0.0
    return dict(result)


def _failovers_counted(totals: Totals, top_le: float | None) -> None:
    """A canary/arm attempt that failed over to stable is counted by the gateway under the
    stable's final status; for the judge it is a request of its own variant: an error when
    its attempt failed (or failover would hide a bad candidate's errors entirely), a latency
    observation past every finite bound (the +Inf bucket, its lower edge `top_le`) when it timed out (the candidate was slow,
    clients saw the stable's answer), and neither when the retry on the stable failed too
    (the pool failed both: `shared_failures`, monitoring/outage.py)."""
    v = totals.values
    timeouts = v.pop("failovers_timeout", 0.0)
    failed, failed_timeouts = v.pop("failovers_failed", 0.0), v.pop("failovers_failed_timeout", 0.0)
    if timeouts:
        v["failovers"] += timeouts
    if not (v.get("failovers") or failed or failed_timeouts):
        return
    slow = max(timeouts - failed_timeouts, 0.0)
    errors = max(v.get("failovers", 0.0) - timeouts - failed, 0.0)
    v["requests"] += errors + slow
    v["errors"] += errors
    if slow:
        totals.latency_buckets[math.inf] += slow
        if top_le is not None:
            totals.latency_buckets[top_le] += 0.0  # the +Inf bucket's lower edge, as _decumulate keeps it
        v["latency_count"] += slow
    if failed or failed_timeouts:
        v["shared_failures"] += failed + failed_timeouts


# --- Triton -------------------------------------------------------------------------------------
def triton_snapshot(text: str) -> dict[str, float]:
    """Flatten Triton's /metrics per (model, version): the counters the collector diffs."""
    return triton_snapshot_samples(exposition_samples(text, TRITON_FAMILIES))


def triton_snapshot_samples(samples) -> dict[str, float]:
    """The same from (sample name, labels, value) triples: a scrape's samples, or one
    instant of a replica's series read back from Prometheus (monitoring/sources/prometheus.py)."""
    out: dict[str, float] = defaultdict(float)
    for name, labels, value in samples:
        # names as written (Triton's counters have no "_total"; a re-exporter may add it)
        base = name.removesuffix("_total")
        field_name = TRITON_COUNTERS.get(base) or TRITON_GAUGES.get(name) or GR_COUNTERS.get(base)
        if field_name is None:
            continue
        out[_key(field_name, labels.get("model", ""), labels.get("version", ""))] += value
        if field_name == "gr_lookups" and labels.get("result") in GR_HIT_RESULTS:
            out[_key("gr_hits", labels.get("model", ""), labels.get("version", ""))] += value
    return dict(out)


def triton_deltas(
    prev: dict,
    cur: dict,
    *,
    seconds: float,
    models: dict[str, TritonModelMap] | None = None,
    cost_per_replica_hour: float = 0.0,
) -> dict[tuple[str, str], Totals]:
    """Interval totals per (endpoint, variant) of one Triton replica.

    `models` maps a Triton model name to the endpoint x variant it serves (unmapped
    models are skipped; with no map, the endpoint is the model name and the variant
    "v<version>"). The replica's hourly cost is shared by compute time.
    """
    per_model: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for key in cur:
        field_name, model, version = _split(key)
        if field_name in TRITON_GAUGES.values():
            per_model[(model, version)][field_name] += cur[key]
        else:
            per_model[(model, version)][field_name] += _counter_delta(prev, cur, key)
    compute = {
        mv: v["compute_input_us"] + v["compute_infer_us"] + v["compute_output_us"] for mv, v in per_model.items()
    }
    total_compute = sum(compute.values())
    result: dict[tuple[str, str], Totals] = defaultdict(Totals)
    for (model, version), values in per_model.items():
        if models is None:
            mapping = TritonModelMap(endpoint=model, variant=f"v{version}")
        elif model in models:
            mapping = models[model]
        else:
            continue
        totals = result[(mapping.endpoint, mapping.variant)]
        for name, value in values.items():
            totals.values[f"triton_{name}"] += value
        totals.values["triton_compute_us"] += compute[(model, version)]
        totals.values["triton_capacity_us"] += seconds * 1e6 * max(mapping.instances, 1)
        if seconds > 0:
            totals.values["triton_inference_rate"] += values["inferences"] / seconds
        if cost_per_replica_hour and total_compute > 0:
            totals.values["cost_per_hour"] += cost_per_replica_hour * compute[(model, version)] / total_compute
    return dict(result)


def merge(*parts: dict[tuple[str, str], Totals]) -> dict[tuple[str, str], Totals]:
    """Add the totals of several targets (replicas, gateways) of one tick."""
    out: dict[tuple[str, str], Totals] = defaultdict(Totals)
    for part in parts:
        for series, totals in part.items():
            out[series].add(totals)
    return dict(out)


# --- derived metrics ------------------------------------------------------------------------------
def bucket_metric(prefix: str, le: float) -> str:
    return f"{prefix}:{_le_text(le)}"


def parse_bucket_metric(metric: str) -> tuple[str, float]:
    prefix, _, le = metric.partition(":")
    return prefix, _le(le)


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
    and SLO guardrails read, monitoring/llm_checks.py); queue time; tokens, tokens/s
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


def derive(totals: Totals) -> dict[str, float]:  # noqa: C901 - one pass read top to bottom; split when next changed
    """The stored metrics of one endpoint x variant for one tick."""
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
    ):
        if name in v:
            out[name] = v[name]
    if "triton_success" in v or "triton_failure" in v:
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
    out.update(derive_gr(v))
    return out


def derive_gr(v: dict) -> dict[str, float]:
    """A generative recommender's counts of the tick and their rates (no lookups, no rates)."""
    out = {stored: v[f"triton_{raw}"] for raw, stored in GR_STORED.items() if f"triton_{raw}" in v}
    if out.get("gr_cache_lookups"):
        out["gr_cache_hit_rate"] = out.get("gr_cache_hits", 0.0) / out["gr_cache_lookups"]
    if out.get("gr_beams"):
        out["gr_illegal_rate"] = out.get("gr_illegal_beams", 0.0) / out["gr_beams"]
    return out
