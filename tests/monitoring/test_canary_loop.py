"""The closed loop over the real time-series store: samples in MetricSample (as the
collector writes them) → monitoring's canary tick judges → deployments' services act →
an alert says why. Synthetic samples stand in for traffic; the collection itself is
tested against real processes in tests/monitoring/."""

from datetime import timedelta

import numpy as np
import pytest
from django.utils import timezone
from scipy import stats

from deployments.models import PoolReplica, Rollout
from deployments.rollout_machine import State
from monitoring.judge.verdict import judge
from monitoring.models import Alert, Verdict
from monitoring.selectors import metrics as metric_selectors
from monitoring.services import canary
from registry.names import variant_name
from tests.monitoring.canary_feed import feed, start_rollout

pytestmark = pytest.mark.django_db


def reconstruct(buckets: dict) -> np.ndarray:
    """Samples spread evenly inside each bucket (what the pooled rank test read)."""
    parts, lower = [], 0.0
    for le in sorted(buckets):
        n = int(buckets[le])
        top = lower if np.isinf(le) else le
        parts.append(lower + (top - lower) * (np.arange(n) + 0.5) / max(n, 1))
        lower = top
    return np.concatenate(parts)


@pytest.fixture
def live_rollout(deployer, team_a, artifact_factory):
    return start_rollout(deployer, team_a, artifact_factory, [500, 10000])


def test_error_regression_is_rolled_back_with_an_alert_that_says_why(live_rollout):
    start = live_rollout.traffic_started_at
    feed(live_rollout, ticks=12, start=start, cand_err=0.08)
    result = canary.judge_rollout(live_rollout, now=start + timedelta(seconds=12))
    rollout = Rollout.objects.get(pk=live_rollout.pk)
    assert result["verdict"] == "fail" and rollout.state == State.ROLLING_BACK
    verdict = Verdict.objects.get(rollout_id=rollout.pk)
    assert verdict.outcome == "fail" and verdict.checks
    alert = Alert.objects.get(rollout_id=rollout.pk)
    assert alert.kind == "rollout_rolled_back" and alert.severity == "critical"
    assert "rolled back" in alert.reason and alert.evidence["verdict_id"] == verdict.pk
    assert "rollout" in alert.links


def test_latency_regression_is_rolled_back(live_rollout):
    """+60 %: past the margin the SLO's headroom allows (30 % at most: a candidate far inside
    a 200 ms SLO is not failed for being 20 % slower), in every one of 15 windows."""
    start = live_rollout.traffic_started_at
    feed(live_rollout, ticks=15, start=start, cand_slow=1.6, seed=3)
    canary.judge_rollout(live_rollout, now=start + timedelta(seconds=15))
    assert Rollout.objects.get(pk=live_rollout.pk).state == State.ROLLING_BACK


def test_healthy_candidate_moves_to_the_next_step(live_rollout):
    start = live_rollout.traffic_started_at
    feed(live_rollout, ticks=20, start=start, seed=5)
    result = canary.judge_rollout(live_rollout, now=start + timedelta(seconds=20))
    rollout = Rollout.objects.get(pk=live_rollout.pk)
    assert result["verdict"] == "pass", Verdict.objects.get(rollout_id=rollout.pk).reason
    assert (rollout.state, rollout.step_index) == (State.CANARY, 1)
    assert not Alert.objects.exists()


def test_latency_is_compared_within_the_step_and_not_at_all_without_a_stable_beside(deployer, team_a, artifact_factory):
    """An A/A pair whose latency rises 50 % for both arms at the 50 % step (as on the
    bench machine): pooled over the rollout, the stable's samples are mostly early and the
    candidate's mostly late, which a pooled rank test read as a regression; compared window
    by window (both arms at the same moments) it is not, over the step or the rollout."""
    rollout = start_rollout(deployer, team_a, artifact_factory, [500, 5000, 10000])
    start = rollout.traffic_started_at
    feed(rollout, ticks=20, start=start, seed=5)
    canary.judge_rollout(rollout, now=start + timedelta(seconds=20))
    rollout = Rollout.objects.get(pk=rollout.pk)
    assert (rollout.state, rollout.step_index) == (State.CANARY, 1)

    step_start = rollout.step_started_at
    feed(rollout, ticks=15, start=step_start, stable_rps=500, cand_rps=500, stable_slow=1.5, cand_slow=1.5, seed=6)
    now = step_start + timedelta(seconds=15)
    anchored = metric_selectors.judge_window(
        endpoint="ctr",
        stable_variant=variant_name(rollout.baseline_artifact),
        candidate_variant=variant_name(rollout.candidate_artifact),
        since=start,
        until=now,
    )
    pooled_ranks = stats.mannwhitneyu(
        *(reconstruct(arm.latency_buckets) for arm in (anchored[1], anchored[0])), alternative="greater"
    )
    assert pooled_ranks.pvalue < 1e-6  # the trap is real for a pooled comparison
    assert judge(*anchored, canary.judge_config_for(rollout.endpoint)).outcome != "fail"

    result = canary.judge_rollout(rollout, now=now)
    verdict = Verdict.objects.filter(rollout_id=rollout.pk).latest("id")
    latency = next(c for c in verdict.checks if c["name"] == "latency")
    assert latency["window"] == "step" and latency["outcome"] == "pass", verdict.reason
    assert result["verdict"] == "pass"
    rollout = Rollout.objects.get(pk=rollout.pk)
    assert (rollout.state, rollout.step_index) == (State.CANARY, 2)

    # At 100 % nothing runs beside the candidate: its latency against the stable's history
    # (2x here, well within the SLO) is no comparison; only the p99 SLO guardrail applies.
    feed(rollout, ticks=10, start=rollout.step_started_at, stable_rps=0, cand_rps=1000, cand_slow=2.0, seed=7)
    result = canary.judge_rollout(rollout, now=rollout.step_started_at + timedelta(seconds=10))
    verdict = Verdict.objects.filter(rollout_id=rollout.pk).latest("id")
    assert {c["name"]: c["outcome"] for c in verdict.checks if c["name"].startswith("latency")} == {
        "latency": "skipped",
        "latency_tail": "skipped",
    }
    assert result["verdict"] == "pass", verdict.reason
    assert Rollout.objects.get(pk=rollout.pk).state != State.ROLLING_BACK


def test_no_data_is_inconclusive_and_waits(live_rollout):
    result = canary.judge_rollout(live_rollout, now=timezone.now())
    assert result["verdict"] == "inconclusive"
    assert Rollout.objects.get(pk=live_rollout.pk).state == State.CANARY


def test_collector_targets_follow_endpoints_and_rollouts(live_rollout, settings):
    from monitoring.collection.targets import scrape_targets

    PoolReplica.objects.update(metrics_url="http://127.0.0.1:18002/metrics")
    targets = {t.kind: t for t in scrape_targets()}
    assert targets["gateway"].url.endswith(f":{settings.GATEWAY_CONTROL_PORT}/metrics")  # the control port
    models = targets["triton"].models
    stable, candidate = live_rollout.baseline_artifact, live_rollout.candidate_artifact
    assert {m.variant for m in models.values()} == {variant_name(stable), variant_name(candidate)}
    assert all(m.endpoint == "ctr" for m in models.values())
    assert {m.variant: m.instances for m in models.values()} == {variant_name(stable): 1, variant_name(candidate): 1}


def test_collector_counts_instances_from_the_artifacts_config(live_rollout):
    from monitoring.selectors import targets as deployment_targets
    from registry.storage import artifact_model_dir

    PoolReplica.objects.update(metrics_url="http://127.0.0.1:18002/metrics")
    config = artifact_model_dir(live_rollout.candidate_artifact) / "config.pbtxt"
    config.write_text(config.read_text().replace("count: 1", "count: 3"))  # as if built with 3 CPU instances
    deployment_targets._instances.cache_clear()
    triton = next(t for t in deployment_targets.from_deployments() if t.kind == "triton")
    by_variant = {m.variant: m.instances for m in triton.models.values()}
    assert by_variant[variant_name(live_rollout.candidate_artifact)] == 3
    assert by_variant[variant_name(live_rollout.baseline_artifact)] == 1


def test_failed_over_canary_attempts_count_as_candidate_errors():
    """The gateway retries a failed canary attempt on stable and labels the reply stable;
    the judge must still see that attempt as a failed candidate request."""
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    from monitoring.collection import collect, gateway_samples

    registry = CollectorRegistry()
    requests = Counter("gateway_requests", "r", ["endpoint", "variant", "status"], registry=registry)
    failovers = Counter(
        "gateway_failovers", "f", ["endpoint", "from_variant", "to_variant", "reason"], registry=registry
    )
    before = gateway_samples.gateway_snapshot(generate_latest(registry).decode())
    requests.labels("ctr", "v1", "200").inc(100)
    requests.labels("ctr", "v2", "200").inc(45)
    failovers.labels("ctr", "v2", "v1", "5xx").inc(5)
    totals = gateway_samples.gateway_deltas(
        before, gateway_samples.gateway_snapshot(generate_latest(registry).decode()), seconds=1.0
    )
    canary = collect.derive(totals[("ctr", "v2")])
    assert (canary["requests"], canary["errors"]) == (50, 5) and canary["error_rate"] == pytest.approx(0.1)
    assert collect.derive(totals[("ctr", "v1")])["errors"] == 0


def test_shadow_replies_are_the_shadow_variants_requests_and_latency():
    """In a shadow phase the candidate only gets copies; the judge needs them as its series."""
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    from monitoring.collection import collect, gateway_samples

    registry = CollectorRegistry()
    shadow = Counter("gateway_shadow_requests", "s", ["endpoint", "variant", "status"], registry=registry)
    latency = Histogram(
        "gateway_shadow_duration_seconds", "l", ["endpoint", "variant"], buckets=[0.001, 0.01, 0.1], registry=registry
    )
    before = gateway_samples.gateway_snapshot(generate_latest(registry).decode())
    shadow.labels("ctr", "v2", "200").inc(40)
    shadow.labels("ctr", "v2", "500").inc(6)
    shadow.labels("ctr", "v2", "unavailable").inc(4)
    for _ in range(40):
        latency.labels("ctr", "v2").observe(0.004)
    totals = gateway_samples.gateway_deltas(
        before, gateway_samples.gateway_snapshot(generate_latest(registry).decode()), seconds=1.0
    )
    derived = collect.derive(totals[("ctr", "v2")])
    assert (derived["requests"], derived["errors"]) == (50, 10)
    assert 1.0 < derived["latency_p50_ms"] <= 10.0
