"""Triton's half of collection (and a generative recommender's counters beside it): which
families are read, one scrape as cumulative values (`triton_snapshot`), and two successive
scrapes as interval totals per endpoint x variant through the model map (`triton_deltas`).
Pure; the shared snapshot keys, Totals and derive() are in collect.py."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from monitoring.collection.collect import (
    Totals,
    counter_delta,
    snapshot_key,
    split_key,
)
from monitoring.collection.exposition import samples as exposition_samples

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
TRITON_FAMILIES = (*TRITON_COUNTERS, *TRITON_GAUGES, *GR_COUNTERS)


@dataclass
class TritonModelMap:
    """Which endpoint x variant a Triton model serves on one replica, and its instance count."""

    endpoint: str
    variant: str
    instances: int = 1


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
        out[snapshot_key(field_name, labels.get("model", ""), labels.get("version", ""))] += value
        if field_name == "gr_lookups" and labels.get("result") in GR_HIT_RESULTS:
            out[snapshot_key("gr_hits", labels.get("model", ""), labels.get("version", ""))] += value
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
        field_name, model, version = split_key(key)
        if field_name in TRITON_GAUGES.values():
            per_model[(model, version)][field_name] += cur[key]
        else:
            per_model[(model, version)][field_name] += counter_delta(prev, cur, key)
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
