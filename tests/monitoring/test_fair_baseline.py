"""The closed loop with a fair baseline, over the real store: the candidate is judged
against the baseline copy (the same share, so the same cold start), not against the
big stable arm; errors are judged against stable + baseline pooled; the collector maps
the copy's Triton model to the baseline variant."""

from datetime import timedelta

import pytest

from deployments.models import PoolReplica, Rollout
from deployments.rollout_machine import State
from monitoring.models import MetricSample, Verdict
from monitoring.services import canary
from registry.names import baseline_variant_name, variant_name
from tests.monitoring.canary_feed import feed, start_rollout

pytestmark = pytest.mark.django_db


@pytest.fixture
def fair_rollout(deployer, team_a, artifact_factory):
    return start_rollout(deployer, team_a, artifact_factory, [500, 10000], fair_baseline=True)


def test_a_cold_small_arm_is_compared_with_an_equally_cold_baseline(fair_rollout):
    """A/A where the two small arms (candidate and baseline, 5 % each) compute 50 % slower
    than the 90 % stable arm (as measured on shared CPUs: 35 %, and past the margin the SLO's
    headroom allows here, 30 %, more): judged against the stable that is a latency regression
    (a false rollback); against the baseline it passes."""
    assert fair_rollout.baseline_model and fair_rollout.split.baseline_bp == 500
    start = fair_rollout.traffic_started_at
    feed(fair_rollout, ticks=20, start=start, stable_rps=900, cand_rps=50, cand_slow=1.5, seed=5)
    # the baseline copy runs as cold as the candidate (feed gave it the stable's speed): rewrite its rows
    MetricSample.objects.filter(variant=baseline_variant_name(fair_rollout.baseline_artifact)).delete()
    _feed_variant(fair_rollout, baseline_variant_name(fair_rollout.baseline_artifact), start, rps=50, slow=1.5, seed=6)

    stable_control = canary.judge_tick(
        rollout_id=fair_rollout.pk,
        endpoint="ctr",
        stable_variant=variant_name(fair_rollout.baseline_artifact),
        candidate_variant=variant_name(fair_rollout.candidate_artifact),
        since=start,
        until=start + timedelta(seconds=20),
        config=canary.judge_config_for(fair_rollout.endpoint),
    )
    assert stable_control.outcome == "fail", stable_control.reason  # the share asymmetry the issue measured

    result = canary.judge_rollout(fair_rollout, now=start + timedelta(seconds=20))
    verdict = Verdict.objects.filter(rollout_id=fair_rollout.pk).latest("id")
    assert verdict.stable_variant == baseline_variant_name(fair_rollout.baseline_artifact)
    assert result["verdict"] == "pass", verdict.reason
    errors = next(c for c in verdict.checks if c["name"] == "error_rate")
    assert errors["samples"]["stable"] == pytest.approx((900 + 50) * 20)  # stable + baseline pooled
    assert (Rollout.objects.get(pk=fair_rollout.pk).state, Rollout.objects.get(pk=fair_rollout.pk).step_index) == (
        State.CANARY,
        1,
    )


def _feed_variant(rollout, variant, start, *, rps, slow, seed, ticks=20):
    import numpy as np

    from monitoring.collection.collect import bucket_metric
    from monitoring.services.store import samples_store
    from tests.monitoring.canary_feed import BUCKETS

    rng = np.random.default_rng(seed)
    for i in range(ticks):
        latencies = rng.lognormal(np.log(0.004 * slow), 0.35, size=rps)
        counts, _ = np.histogram(latencies, bins=[0.0, *BUCKETS])
        rows = [("ctr", variant, "requests", rps), ("ctr", variant, "errors", 0)]
        rows += [("ctr", variant, bucket_metric("latency_bucket", le), float(n)) for le, n in zip(BUCKETS, counts)]
        samples_store(rows=rows, at=start + timedelta(seconds=i + 1))


def test_a_slow_candidate_is_still_caught_against_the_baseline(fair_rollout):
    start = fair_rollout.traffic_started_at
    feed(fair_rollout, ticks=15, start=start, cand_slow=1.6, seed=3)
    canary.judge_rollout(fair_rollout, now=start + timedelta(seconds=15))
    rollout = Rollout.objects.get(pk=fair_rollout.pk)
    assert rollout.state == State.ROLLING_BACK and "slower than baseline +" in rollout.reason


def test_an_erroring_candidate_is_judged_against_stable_and_baseline_pooled(fair_rollout):
    start = fair_rollout.traffic_started_at
    feed(fair_rollout, ticks=12, start=start, cand_err=0.08, seed=4)
    canary.judge_rollout(fair_rollout, now=start + timedelta(seconds=12))
    rollout = Rollout.objects.get(pk=fair_rollout.pk)
    assert rollout.state == State.ROLLING_BACK and "vs stable+baseline" in rollout.reason


def test_collector_maps_the_copy_to_the_baseline_variant(fair_rollout):
    from monitoring.collection.targets import scrape_targets

    PoolReplica.objects.update(metrics_url="http://127.0.0.1:18002/metrics")
    triton = next(t for t in scrape_targets() if t.kind == "triton")
    assert triton.models[fair_rollout.baseline_model].variant == baseline_variant_name(fair_rollout.baseline_artifact)


def test_anchored_checks_pool_stable_and_baseline_so_psi_never_runs_dry(deployer, team_a, artifact_factory):
    """Steps 50 -> 100 %: at 50 % the baseline takes what the stable had (the stable gets
    nothing), at 100 % nothing runs beside the candidate. The PSI control is stable +
    baseline over the rollout, so the scores the baseline gave at 50 % still count at 100 %
    (judged against the stable's own history alone, PSI waited for scores forever)."""
    from monitoring.services.store import samples_store

    rollout = start_rollout(deployer, team_a, artifact_factory, [5000, 10000], fair_baseline=True)
    start = rollout.traffic_started_at
    baseline, candidate = baseline_variant_name(rollout.baseline_artifact), variant_name(rollout.candidate_artifact)
    feed(rollout, ticks=20, start=start, stable_rps=0, cand_rps=500, seed=8)
    for i in range(20):
        samples_store(
            rows=[("ctr", v, f"score_bin:{b}", 3.0) for v in (baseline, candidate) for b in range(10)],
            at=start + timedelta(seconds=i + 1),
        )
    canary.judge_rollout(rollout, now=start + timedelta(seconds=20))
    rollout = Rollout.objects.get(pk=rollout.pk)
    assert (rollout.state, rollout.step_index) == (State.CANARY, 1), rollout.reason
    canary.judge_rollout(rollout, now=start + timedelta(seconds=21))
    verdict = Verdict.objects.filter(rollout_id=rollout.pk, step=1).latest("id")
    psi = next(c for c in verdict.checks if c["name"] == "psi")
    assert psi["outcome"] == "pass" and psi["samples"]["stable"] == 600, verdict.reason
    assert verdict.outcome == "pass", verdict.reason
