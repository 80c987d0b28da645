"""The gateway's half of collection: which of its /metrics families are read, one scrape as
cumulative values (`gateway_snapshot`), and two successive scrapes as interval totals per
endpoint x variant (`gateway_deltas`), tensor and LLM endpoints alike. Pure; the shared
snapshot keys, Totals and derive() are in collect.py."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from monitoring.collection.collect import (
    ALL_VARIANTS,
    UNKNOWN_ENDPOINT,
    Totals,
    counter_delta,
    decumulate,
    le_text,
    snapshot_key,
    split_key,
)
from monitoring.collection.exposition import samples as exposition_samples
from monitoring.collection.failovers import arrivals_attributed, failovers_counted
from monitoring.judge.statistics import bucket_le


@dataclass(frozen=True)
class GatewayNames:
    """Metric and label names of the gateway's /metrics (gateway/telemetry/metrics.py).

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
    timeout_reason: str = "timeout"  # gateway/v2/failover.py FailureReason.TIMEOUT
    upstream_errors: str = "upstream_errors_total"
    shadow_dropped: str = "shadow_dropped_total"
    shadow_requests: str = "shadow_requests_total"
    shadow_latency: str = "shadow_duration_seconds"
    prediction_score: str = "prediction_score"  # gateway/telemetry/scores.py: 10 equal buckets over [0, 1]
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
    to_variant_label: str = "to_variant"
    # failover reasons whose attempt never reached the variant's model (gateway/v2/failover.py
    # FailureReason CONNECT, NOT_LOADED, UNAVAILABLE: its replica down, loading it, or ejected)
    unreached_reasons: tuple[str, ...] = ("connect", "not_loaded", "unavailable")
    fault_label: str = "fault"  # gateway_requests_total: none | client | backend
    client_fault: str = "client"
    unknown_endpoint: str = "(unknown)"  # endpoint label of requests to no known endpoint (gateway.telemetry.metrics)
    error_status_min: int = 500  # statuses at or above count as errors (4xx is the client's)

    def name(self, suffix: str) -> str:
        return f"{self.prefix}{suffix}"


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


def gateway_snapshot_samples(samples, names: GatewayNames = GatewayNames()) -> dict[str, float]:
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
                out[snapshot_key("client_faults", labels.get(ep_l, ""), labels.get(var_l, ""))] += value
                continue
            if name == shadow_requests and (status in ("unavailable", "incompatible") or status.startswith("4")):
                # A shadow copy is a request the primary served: no ready shadow replica,
                # or the shadow's model refusing it, is the shadow's failure.
                status = "error"
            out[snapshot_key("req", labels.get(ep_l, ""), labels.get(var_l, ""), status)] += value
        elif name.endswith("_bucket") and name[: -len("_bucket")] in histograms:
            kind = histograms[name[: -len("_bucket")]]
            out[snapshot_key(kind, labels.get(ep_l, ""), labels.get(var_l, ""), le_text(bucket_le(labels["le"])))] += (
                value
            )
        elif name.endswith("_sum") and name[: -len("_sum")] in histograms:
            out[
                snapshot_key(histograms[name[: -len("_sum")]] + "_sum", labels.get(ep_l, ""), labels.get(var_l, ""))
            ] += value
        elif name in simple:
            out[snapshot_key(simple[name], labels.get(ep_l, ""), labels.get(var_l, ""))] += value
        elif name in (names.name(names.failovers), names.name(names.failovers_failed)):
            kind = "failovers" if name == names.name(names.failovers) else "failovers_failed"
            reason = labels.get(names.reason_label)
            endpoint, source = labels.get(ep_l, ""), labels.get(names.from_variant_label, "")
            out[snapshot_key(kind + ("_timeout" if reason == names.timeout_reason else ""), endpoint, source)] += value
            if reason in names.unreached_reasons:
                out[snapshot_key(kind + "_unreached", endpoint, source)] += value
            if kind == "failovers":  # where it went: the stable counts it under its own variant
                out[snapshot_key("failovers_route", endpoint, source, labels.get(names.to_variant_label, ""))] += value
        elif name == names.name(names.in_flight):
            out[snapshot_key("in_flight", labels.get(ep_l, ""), labels.get(var_l, ALL_VARIANTS))] += value
        elif name == names.name(names.llm_streams):
            out[snapshot_key("llm_streams_in_flight", labels.get(ep_l, ""), ALL_VARIANTS)] += value
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
            out[snapshot_key("llm_client_faults", endpoint, variant)] += value
            return
        status = labels.get(names.status_label, "")
        if fault == names.backend_fault and not _is_error_status(status, names):
            status = "error"
        out[snapshot_key("llm_req", endpoint, variant, status)] += value
    elif kind == "llm_tokens":
        token_kind = labels.get(names.token_kind_label, "")
        if token_kind in ("prompt", "completion"):
            out[snapshot_key(f"{token_kind}_tokens", endpoint, variant)] += value
    elif kind == "llm_cost":
        out[snapshot_key("cost", endpoint, variant)] += value
    elif kind == "llm_fallbacks":
        out[snapshot_key("llm_fallbacks", endpoint, ALL_VARIANTS)] += value
    elif kind == "llm_rescued":
        # served by the endpoint's fallbacks (under variant "fallback"): for the judge one failed
        # request of the variant whose own backends could not serve it, as a tensor failover is
        out[snapshot_key("llm_req", endpoint, variant, "error")] += value


def _is_error_status(status: str, names: GatewayNames) -> bool:
    try:
        return int(status) >= names.error_status_min
    except ValueError:
        return status.lower() in {"error", "timeout"}


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


def gateway_deltas(
    prev: dict, cur: dict, *, seconds: float, names: GatewayNames = GatewayNames()
) -> dict[tuple[str, str], Totals]:
    """Interval totals per (endpoint, variant) from two successive gateway snapshots."""
    result: dict[tuple[str, str], Totals] = defaultdict(Totals)
    cumulative: dict[tuple[str, str, str], dict[float, float]] = defaultdict(dict)
    routes: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for key in cur:
        kind, endpoint, variant, *rest = split_key(key)
        if endpoint == names.unknown_endpoint:
            endpoint = UNKNOWN_ENDPOINT
        if kind in GAUGES:
            result[(endpoint, variant)].values[kind] += cur[key]
            continue
        delta = counter_delta(prev, cur, key)
        if kind == "failovers_route":
            routes[(endpoint, variant)][rest[0]] += delta
            continue
        totals = result[(endpoint, variant)]
        if kind in ("req", "llm_req"):
            prefix = "" if kind == "req" else "llm_"
            totals.values[f"{prefix}requests"] += delta
            if _is_error_status(rest[0], names):
                totals.values[f"{prefix}errors"] += delta
        elif kind in HISTOGRAM_KINDS:
            cumulative[(kind, endpoint, variant)][bucket_le(rest[0])] = delta
        elif kind.endswith("_sum") and kind[: -len("_sum")] in HISTOGRAM_KINDS:
            totals.values[HISTOGRAM_KINDS[kind[: -len("_sum")]] + "_sum_s"] += delta
        else:
            totals.values[kind] += delta
    for (kind, endpoint, variant), buckets in cumulative.items():
        target = result[(endpoint, variant)]
        per_bucket = decumulate(buckets)
        store = getattr(target, HISTOGRAM_KINDS[kind] + "_buckets")
        for le, count in per_bucket.items():
            store[le] += count
        if kind != "score":
            target.values[HISTOGRAM_KINDS[kind] + "_count"] += sum(per_bucket.values())
    # the gateway's largest finite latency bound: where a timed-out attempt is counted from
    top = max(
        (le for (kind, _, _), b in cumulative.items() if kind == "lat" for le in b if not math.isinf(le)), default=None
    )
    arrivals_attributed(result, routes)
    for totals in result.values():
        failovers_counted(totals, top)
        _rates(totals, seconds)
    return dict(result)


def _rates(totals: Totals, seconds: float) -> None:
    """Per-target rates of the interval (replicas, several gateways, add up)."""
    v = totals.values
    for count, rate in (
        ("requests", "request_rate"),
        ("llm_requests", "llm_request_rate"),
        ("completion_tokens", "tokens_per_s"),
    ):
        if count in v:
            v[rate] += v[count] / seconds if seconds > 0 else 0.0
