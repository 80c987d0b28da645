"""The closed loop on an LLM endpoint over the real store: the gateway's LLM families (as
prometheus_client exposes them) -> the collector's parse, deltas and derived metrics ->
MetricSample -> the canary tick judges on TTFT/ITL -> deployments' services act -> an
alert says why. Synthetic streams stand in for traffic (the gateway and a real LLM
backend: tests/e2e/test_llm_canary.py)."""

from datetime import timedelta

import numpy as np
import pytest
from django.utils import timezone

from deployments.models import Endpoint, Rollout
from deployments.rollout_machine import State
from monitoring.collection import collect, gateway_samples
from monitoring.models import Alert, Verdict
from monitoring.selectors import metrics as metric_selectors
from monitoring.services import canary
from monitoring.services.store import samples_store
from registry.names import variant_name
from tests.monitoring.canary_feed import start_rollout
from tests.monitoring.conftest import LLMGatewayMetrics

pytestmark = pytest.mark.django_db


@pytest.fixture
def llm_rollout(deployer, team_a, artifact_factory):
    rollout = start_rollout(deployer, team_a, artifact_factory, [2000, 10000])
    # the LLM settings belong to llm-control's endpoint API; the judge reads these fields
    Endpoint.objects.filter(pk=rollout.endpoint_id).update(kind="llm", ttft_slo_ms=1000, itl_slo_ms=50)
    return Rollout.objects.select_related("endpoint").get(pk=rollout.pk)


def feed_streams(rollout, *, ticks, start, stable_rps=80, cand_rps=20, cand_ttft_ms=40.0, cand_err=0.0, seed=0):
    """`ticks` 1-second scrapes of one gateway serving both variants, collected as the
    collector does (snapshot, deltas against the previous scrape, derive, store)."""
    rng = np.random.default_rng(seed)
    stable, cand = variant_name(rollout.baseline_artifact), variant_name(rollout.candidate_artifact)
    metrics = LLMGatewayMetrics()
    previous = gateway_samples.gateway_snapshot(metrics.text())
    for i in range(ticks):
        for variant, rps, ttft_ms, err in ((stable, stable_rps, 40.0, 0.0), (cand, cand_rps, cand_ttft_ms, cand_err)):
            for ttft in rng.lognormal(np.log(ttft_ms / 1000), 0.25, rps):
                failed = rng.random() < err
                metrics.stream(
                    "ctr",
                    variant,
                    ttft_s=float(ttft),
                    itl_s=rng.lognormal(np.log(0.004), 0.25, 5),
                    status=502 if failed else 200,
                    fault="backend" if failed else "none",
                    prompt=12,
                    completion=6,
                )
        current = gateway_samples.gateway_snapshot(metrics.text())
        totals = gateway_samples.gateway_deltas(previous, current, seconds=1.0)
        previous = current
        rows = [(ep, var, m, v) for (ep, var), t in totals.items() for m, v in collect.derive(t).items()]
        samples_store(rows=rows, at=start + timedelta(seconds=i + 1), team_ids={"ctr": rollout.endpoint.team_id})


def test_slower_llm_canary_is_rolled_back_on_ttft_with_an_alert_that_says_why(llm_rollout):
    start = llm_rollout.traffic_started_at
    feed_streams(llm_rollout, ticks=10, start=start, cand_ttft_ms=400.0)
    result = canary.judge_rollout(llm_rollout, now=start + timedelta(seconds=10))
    rollout = Rollout.objects.get(pk=llm_rollout.pk)
    verdict = Verdict.objects.get(rollout_id=rollout.pk)
    assert result["verdict"] == "fail" and rollout.state == State.ROLLING_BACK, verdict.reason
    checks = {c["name"]: c["outcome"] for c in verdict.checks}
    assert checks["ttft"] == "fail" and checks["itl"] != "fail" and "latency" not in checks
    alert = Alert.objects.get(rollout_id=rollout.pk)
    assert alert.kind == "rollout_rolled_back" and "TTFT slower than stable" in alert.reason
    assert "p50" in alert.reason and " ms vs " in alert.reason and "windows" in alert.reason


def test_healthy_llm_canary_is_promoted(llm_rollout):
    start = llm_rollout.traffic_started_at
    feed_streams(llm_rollout, ticks=25, start=start, seed=5)
    result = canary.judge_rollout(llm_rollout, now=start + timedelta(seconds=25))
    rollout = Rollout.objects.get(pk=llm_rollout.pk)
    assert result["verdict"] == "pass", Verdict.objects.filter(rollout_id=rollout.pk).latest("id").reason
    assert (rollout.state, rollout.step_index) == (State.CANARY, 1)
    # at 100 % only the candidate serves: the SLO guardrails hold it, the comparisons are skipped
    step = rollout.step_started_at
    feed_streams(rollout, ticks=10, start=step, stable_rps=0, cand_rps=60, seed=6)
    result = canary.judge_rollout(rollout, now=step + timedelta(seconds=10))
    verdict = Verdict.objects.filter(rollout_id=rollout.pk).latest("id")
    checks = {c["name"]: c["outcome"] for c in verdict.checks}
    assert checks["ttft"] == "skipped" and checks["ttft_slo"] == "pass" and checks["itl_slo"] == "pass"
    assert result["verdict"] == "pass", verdict.reason
    assert Rollout.objects.get(pk=rollout.pk).state in (State.PROMOTING, State.SUCCEEDED)
    assert not Alert.objects.exists()


def test_an_llm_canary_erring_is_rolled_back(llm_rollout):
    start = llm_rollout.traffic_started_at
    feed_streams(llm_rollout, ticks=10, start=start, cand_err=0.2, seed=2)
    canary.judge_rollout(llm_rollout, now=start + timedelta(seconds=10))
    assert Rollout.objects.get(pk=llm_rollout.pk).state == State.ROLLING_BACK
    assert "error rate" in Alert.objects.get(rollout_id=llm_rollout.pk).reason


def test_the_store_holds_the_llm_metrics_per_variant(llm_rollout, deployer):
    start = llm_rollout.traffic_started_at
    feed_streams(llm_rollout, ticks=3, start=start)
    cand = variant_name(llm_rollout.candidate_artifact)
    names = {
        s["metric"] for s in metric_selectors.metric_series(user=deployer, endpoint="ctr", variant=cand, since=start)
    }
    assert {
        "llm_requests",
        "llm_errors",
        "llm_error_rate",
        "ttft_p50_ms",
        "ttft_p99_ms",
        "itl_p50_ms",
        "itl_p99_ms",
        "prompt_tokens",
        "completion_tokens",
        "tokens_per_s",
        "llm_queue_mean_ms",
    } <= names
    assert any(n.startswith("ttft_bucket:") for n in names) and any(n.startswith("itl_bucket:") for n in names)
    assert metric_selectors.endpoint_request_rate(endpoint="ctr", window_s=60, now=start + timedelta(seconds=3)) > 0


def test_the_monitoring_page_shows_an_llm_endpoint_with_its_own_panels(llm_rollout, deployer):
    """An LLM endpoint is listed (by its LLM request rate), with a TTFT/ITL/tokens summary
    row per variant and its kind's panels, its TTFT and ITL SLOs drawn as lines."""
    import json
    import re

    from django.test import Client

    start = timezone.now() - timedelta(seconds=30)
    feed_streams(llm_rollout, ticks=3, start=start)
    client = Client()
    client.force_login(deployer)
    html = client.get("/monitoring/?range=15m").content.decode()
    config = json.loads(re.search(r'<script id="chart-config" type="application/json">(.*?)</script>', html).group(1))
    assert config["slos"]["ctr"] == {"llm_error_rate": 5.0, "ttft_p99_ms": 1000.0, "itl_p99_ms": 50.0}
    card = html[html.index('data-endpoint="ctr"') :]
    assert 'data-metric="ttft_p99_ms"' in card and 'data-metric="latency_p99_ms"' not in card
    summary = html[html.index('class="card llm-summary"') :]
    summary = summary[: summary.index("</table>")]
    cand = variant_name(llm_rollout.candidate_artifact)
    assert "TTFT p99" in summary and cand in summary and "tokens/s" in summary and " ms<" in summary
