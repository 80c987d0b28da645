"""Scrape targets from deployments: the gateway, and every ready replica of every pool
that serves an endpoint, with the map from Triton model name to endpoint x variant
(so Triton's queue/compute time and cost land on the same series as the gateway's).
Read through deployments' selectors; the artifact's files through the registry's storage."""

from __future__ import annotations

from functools import lru_cache

from django.conf import settings

from deployments.selectors.pools import ready_replicas
from deployments.selectors.rollouts import active_rollouts, serving_endpoints
from monitoring import conf
from monitoring.collection.targets import ScrapeTarget
from monitoring.collection.triton_samples import TritonModelMap
from registry import storage, triton_config
from registry.names import baseline_variant_name, triton_name, variant_name


@lru_cache(maxsize=1024)
def _instances(artifact) -> int:
    """CPU/GPU instances the artifact's config.pbtxt asks for (utilization = busy / capacity);
    artifacts are immutable, so the answer is cached (by artifact id)."""
    try:
        config = triton_config.parse((storage.artifact_model_dir(artifact) / "config.pbtxt").read_text())
    except Exception:  # unreadable or missing: count one instance rather than stop collecting
        return 1
    return max(1, sum(group.count or 1 for group in config.instance_group) or 1)


def _model_map(endpoint_name: str, artifact, variant: str = "") -> TritonModelMap:
    return TritonModelMap(
        endpoint=endpoint_name, variant=variant or variant_name(artifact), instances=_instances(artifact)
    )


def gateway_metrics_url() -> str:
    """GATEWAY_METRICS_URL, else the gateway's control port (answered off its event loop, so a
    scrape is not lost while the data path is saturated: gateway/process/control.py), else its data port."""
    port = getattr(settings, "GATEWAY_CONTROL_PORT", 0) or settings.GATEWAY_PORT
    return conf.get("GATEWAY_METRICS_URL") or f"http://127.0.0.1:{port}/metrics"


def from_deployments() -> list[ScrapeTarget]:
    endpoints = serving_endpoints()
    if not endpoints:
        return []
    teams = {e.name: e.team_id for e in endpoints}
    models_by_pool: dict[int, dict[str, TritonModelMap]] = {}
    for endpoint in endpoints:
        models_by_pool.setdefault(endpoint.pool_id, {})[triton_name(endpoint.stable_artifact)] = _model_map(
            endpoint.name, endpoint.stable_artifact
        )
    by_id = {e.pk: e for e in endpoints}
    for endpoint_id, rollout in active_rollouts(endpoints=endpoints).items():
        endpoint = by_id[endpoint_id]
        models_by_pool.setdefault(endpoint.pool_id, {})[triton_name(rollout.candidate_artifact)] = _model_map(
            endpoint.name, rollout.candidate_artifact
        )
        if rollout.baseline_model:  # the fair baseline's copy of the stable, under its own name
            models_by_pool[endpoint.pool_id][rollout.baseline_model] = _model_map(
                endpoint.name, rollout.baseline_artifact, baseline_variant_name(rollout.baseline_artifact)
            )
    targets = [ScrapeTarget(kind="gateway", url=gateway_metrics_url(), endpoint_teams=teams)]
    for replica in ready_replicas(pool_ids=models_by_pool):
        if not replica.metrics_url:
            continue
        targets.append(
            ScrapeTarget(
                kind="triton",
                url=replica.metrics_url,
                models=models_by_pool[replica.pool_id],
                cost_per_replica_hour=float(replica.pool.cost_per_replica_hour),
                endpoint_teams=teams,
            )
        )
    return targets
