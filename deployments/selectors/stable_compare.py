"""A build's variants beside the stable artifacts of the endpoints that serve its model: the
factory's batch-1 latency of each (registry/factory/stages.py, benchmark stage), so a
version several times slower than what it would replace says so on its build page before
anyone starts a rollout. Each figure is from its own build's benchmark (its machine and load
at that time), which the page says."""

from __future__ import annotations

from deployments.selectors.rollouts import endpoint_list
from registry.names import variant_name

BATCH = "1"  # what one request of one row costs: the size an online endpoint mostly serves
SLOWER = 1.5  # from this ratio on a variant is called out as slower than the stable


def _batch_one(artifact) -> dict | None:
    figures = ((artifact.benchmark or {}).get("batches") or {}).get(BATCH)
    return figures if isinstance(figures, dict) and isinstance(figures.get("p50_ms"), (int, float)) else None


def build_vs_stable(*, user, build, artifacts) -> list[dict]:
    """One row per (built variant, endpoint serving the build's model with another stable):
    both batch-1 p50/p99 and the p50 ratio. Empty when no endpoint serves the model or no
    figure exists on either side."""
    endpoints = [
        e
        for e in endpoint_list(user=user).filter(stable_artifact__version__model_id=build.version.model_id)
        if e.stable_artifact is not None
    ]
    rows = []
    for artifact in artifacts:
        mine = _batch_one(artifact)
        if mine is None:
            continue
        for endpoint in endpoints:
            stable = endpoint.stable_artifact
            theirs = _batch_one(stable)
            if stable.pk == artifact.pk or theirs is None or theirs["p50_ms"] <= 0:
                continue
            ratio = mine["p50_ms"] / theirs["p50_ms"]
            rows.append(
                {
                    "variant": variant_name(artifact),
                    "endpoint": endpoint.name,
                    "stable": variant_name(stable),
                    "stable_build": stable.build_id,
                    "p50_ms": mine["p50_ms"],
                    "p99_ms": mine.get("p99_ms"),
                    "stable_p50_ms": theirs["p50_ms"],
                    "stable_p99_ms": theirs.get("p99_ms"),
                    "ratio": ratio,
                    "slower": ratio >= SLOWER,
                    "slo_p99_ms": endpoint.slo_p99_ms,
                }
            )
    return rows
