"""A rollout started through the services and metric ticks fed into the store, for the canary-loop tests."""

from datetime import timedelta

import numpy as np

from deployments.models import PoolModel, PoolModelState
from deployments.rollout_machine import State
from deployments.services import endpoints as endpoint_services
from deployments.services import rollouts as services
from harness import factories
from monitoring.collection.collect import bucket_metric
from monitoring.services.store import samples_store
from registry.names import baseline_variant_name, variant_name

BUCKETS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, float("inf")]


def _ready(pool, artifact):
    PoolModel.objects.filter(pool=pool, artifact=artifact).update(
        state=PoolModelState.READY, replica_ready={"r0": True}
    )


def start_rollout(deployer, team, artifact_factory, steps_bp, fair_baseline=False):
    """A rollout in canary. Without a fair baseline by default: these tests judge against
    the stable (what a rollout does when its baseline copy cannot load); the baseline's
    own loop is tests/monitoring/test_fair_baseline.py."""
    pool = factories.pool(team, "cpu-pool", ready_replicas=1)
    stable, candidate = artifact_factory(team), artifact_factory(team)
    endpoint = endpoint_services.endpoint_create(
        user=deployer, name="ctr", pool=pool, stable_artifact=stable, slo_p99_ms=200, slo_error_rate=0.05
    )
    _ready(pool, stable)
    rollout = services.rollout_start(
        user=deployer,
        endpoint=endpoint,
        candidate=candidate,
        steps_bp=steps_bp,
        step_min_seconds=5,
        step_min_requests=200,
        step_deadline_seconds=600,
        fair_baseline=fair_baseline,
    )
    _ready(pool, candidate)
    _ready(pool, stable)  # and the baseline copy of the stable, when the rollout has one
    rollout = services.rollout_reconcile(rollout_id=rollout.pk)
    assert rollout.state == State.CANARY
    return rollout


def feed(
    rollout,
    *,
    ticks,
    start,
    stable_rps=950,
    cand_rps=50,
    stable_err=0.001,
    cand_err=0.001,
    cand_slow=1.0,
    stable_slow=1.0,
    seed=0,
):
    """Write `ticks` 1-second scrapes for both variants (and the baseline copy, with the
    candidate's traffic and the stable's behaviour, when the rollout has one), like the
    collector does."""
    rng = np.random.default_rng(seed)
    stable, cand = variant_name(rollout.baseline_artifact), variant_name(rollout.candidate_artifact)
    arms = [(stable, stable_rps, stable_err, stable_slow), (cand, cand_rps, cand_err, cand_slow)]
    if rollout.baseline_model:
        arms.append((baseline_variant_name(rollout.baseline_artifact), cand_rps, stable_err, stable_slow))
    for i in range(ticks):
        at = start + timedelta(seconds=i + 1)
        rows = []
        for variant, rps, err, slow in arms:
            latencies = rng.lognormal(np.log(0.004 * slow), 0.35, size=rps)
            counts, _ = np.histogram(latencies, bins=[0.0, *BUCKETS])
            rows += [("ctr", variant, "requests", rps), ("ctr", variant, "errors", rng.binomial(rps, err))]
            rows += [("ctr", variant, bucket_metric("latency_bucket", le), float(n)) for le, n in zip(BUCKETS, counts)]
        samples_store(rows=rows, at=at)
