"""Scrape targets from deployments: the gateway, and every ready replica of every pool
that serves an endpoint, with the map from Triton model name to endpoint x variant
(so Triton's queue/compute time and cost land on the same series as the gateway's)."""

from __future__ import annotations

import os
from functools import lru_cache

from django.conf import settings

from deployments.models import Endpoint, PoolReplica, ReplicaStatus, Rollout
from deployments.rollout_machine import ACTIVE
from deployments.routes import triton_name, variant_name
from monitoring.collect import TritonModelMap
from monitoring.targets import ScrapeTarget


@lru_cache(maxsize=1024)
def _instances(artifact_id: int) -> int:
    """CPU/GPU instances the artifact's config.pbtxt asks for (utilization = busy / capacity);
    artifacts are immutable, so the answer is cached."""
    from deployments import triton_config
    from deployments.services.reconcile import artifact_model_dir
    from registry.models import Artifact

    try:
        artifact = Artifact.objects.select_related("version__model").get(pk=artifact_id)
        config = triton_config.parse((artifact_model_dir(artifact) / "config.pbtxt").read_text())
    except Exception:  # unreadable or missing: count one instance rather than stop collecting
        return 1
    return max(1, sum(group.count or 1 for group in config.instance_group) or 1)


def _model_map(endpoint_name: str, artifact) -> TritonModelMap:
    return TritonModelMap(endpoint=endpoint_name, variant=variant_name(artifact), instances=_instances(artifact.pk))


def gateway_metrics_url() -> str:
    return os.environ.get("GATEWAY_METRICS_URL", f"http://127.0.0.1:{settings.GATEWAY_PORT}/metrics")


def from_deployments() -> list[ScrapeTarget]:
    endpoints = list(Endpoint.objects.filter(stable_artifact__isnull=False).select_related(
        "pool", "stable_artifact__version__model"))
    if not endpoints:
        return []
    teams = {e.name: e.team_id for e in endpoints}
    models_by_pool: dict[int, dict[str, TritonModelMap]] = {}
    for endpoint in endpoints:
        models_by_pool.setdefault(endpoint.pool_id, {})[triton_name(endpoint.stable_artifact)] = _model_map(
            endpoint.name, endpoint.stable_artifact)
    for rollout in Rollout.objects.filter(endpoint__in=endpoints, state__in=[s.value for s in ACTIVE]).select_related(
            "endpoint", "candidate_artifact__version__model"):
        models_by_pool.setdefault(rollout.endpoint.pool_id, {})[triton_name(rollout.candidate_artifact)] = _model_map(
            rollout.endpoint.name, rollout.candidate_artifact)
    targets = [ScrapeTarget(kind="gateway", url=gateway_metrics_url(), endpoint_teams=teams)]
    for replica in PoolReplica.objects.filter(pool_id__in=models_by_pool, status=ReplicaStatus.READY).exclude(metrics_url="").select_related("pool"):
        targets.append(ScrapeTarget(
            kind="triton", url=replica.metrics_url, models=models_by_pool[replica.pool_id],
            cost_per_replica_hour=float(replica.pool.cost_per_replica_hour), endpoint_teams=teams,
        ))
    return targets
