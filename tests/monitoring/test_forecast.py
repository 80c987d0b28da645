"""Expected time to a verdict before a rollout starts, and step shares
that fit the traffic: the pure forecast, the API over the store's observed traffic, the
endpoint page."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from deployments.services import endpoints as endpoint_services
from harness import factories
from monitoring.judge.evidence import JudgeConfig
from monitoring.judge.forecast import DETECT_RPS, forecast, suggest_steps
from monitoring.services.store import samples_store

CONFIG = JudgeConfig()


def test_steps_follow_the_traffic():
    assert suggest_steps(200, CONFIG) == [
        1000,
        2500,
        5000,
        10000,
    ]  # 5 % would give the candidate 10 req/s: too slow to detect
    assert 200 * 1000 / 10000 >= DETECT_RPS > 200 * 500 / 10000
    assert suggest_steps(2000, CONFIG) == [500, 1000, 2500, 5000, 10000]
    assert suggest_steps(20, CONFIG) == [
        5000,
        10000,
    ]  # a low-traffic endpoint: a large first step, not a verdict that never comes
    assert suggest_steps(None, CONFIG) == [2500, 5000, 10000]


def test_eta_per_step_comes_from_each_checks_need_and_the_share():
    plan = forecast(
        200, [1000, 2500, 10000], CONFIG, step_min_seconds=5, step_min_requests=50, step_deadline_seconds=600
    )
    first = plan["steps"][0]
    assert first["candidate_rps"] == pytest.approx(20) and first["baseline_bp"] == 1000 and first["stable_bp"] == 8000
    assert first["checks"]["error_rate"]["eta_seconds"] == pytest.approx(CONFIG.min_requests / 20)
    assert first["checks"]["latency"]["eta_seconds"] == pytest.approx(CONFIG.min_latency_samples / 20)
    assert first["eta_seconds"] == pytest.approx(CONFIG.min_requests / 20) and first["fits_deadline"]
    second = plan["steps"][1]  # the anchored error sample is complete; the step's own latency sample is not
    assert second["checks"]["error_rate"]["eta_seconds"] == 0.0
    assert second["eta_seconds"] == pytest.approx(max(CONFIG.min_latency_samples / 50, 5))  # or the step's minimum
    assert "latency" not in plan["steps"][2]["checks"]  # nothing beside the candidate at 100 %
    assert plan["total_seconds"] == pytest.approx(sum(s["eta_seconds"] for s in plan["steps"]))
    assert plan["warnings"] == []


def test_a_step_that_cannot_conclude_before_its_deadline_is_a_warning():
    """The issue's case: 20 req/s, a 5 % first step: the error test needs 500 candidate
    requests, ~500 s at 1 req/s; with a 300 s deadline the step cannot conclude."""
    plan = forecast(20, [500, 10000], CONFIG, step_deadline_seconds=300)
    assert not plan["steps"][0]["fits_deadline"] and plan["total_seconds"] is None
    assert "step 1 (5 %)" in plan["warnings"][0] and "beyond the 300 s deadline" in plan["warnings"][0]
    assert forecast(0, [500], CONFIG)["warnings"][0].startswith("no traffic observed")


@pytest.mark.django_db
def test_api_uses_the_observed_traffic_and_scopes_by_team(deployer_api, bob_api, deployer, team_a, artifact_factory):
    pool = factories.pool(team_a, "cpu-pool", ready_replicas=1)
    endpoint_services.endpoint_create(user=deployer, name="ctr", pool=pool, stable_artifact=artifact_factory(team_a))
    now = timezone.now()
    for i in range(30):  # 30 scrapes, 2 s apart, 400 requests each: 200 req/s
        samples_store(
            rows=[("ctr", "v1-onnx-fp32", "requests", 380), ("ctr", "v2-onnx-fp32", "requests", 20)],
            at=now - timedelta(seconds=2 * i),
        )
    body = deployer_api.get("/api/v1/rollout-forecast/", {"endpoint": "ctr"}).json()
    assert body["observed_rate_rps"] == pytest.approx(200, rel=0.05)
    assert body["suggested_steps_bp"] == [1000, 2500, 5000, 10000] and body["steps_bp"] == body["suggested_steps_bp"]
    assert body["steps"][0]["eta_seconds"] > 0 and body["warnings"] == []
    slow = deployer_api.get(
        "/api/v1/rollout-forecast/",
        {"endpoint": "ctr", "rate_rps": 2, "steps_bp": "500,10000", "step_deadline_seconds": 300},
    ).json()
    assert slow["rate_rps"] == 2 and slow["warnings"]
    bad = deployer_api.get("/api/v1/rollout-forecast/", {"endpoint": "ctr", "steps_bp": "50,25"})
    assert bad.status_code == 400 and "steps_bp" in str(bad.json())
    assert bob_api.get("/api/v1/rollout-forecast/", {"endpoint": "ctr"}).status_code == 404  # another team's endpoint


@pytest.mark.django_db
def test_endpoint_page_shows_the_forecast_and_offers_the_fitting_steps(client, deployer, team_a, artifact_factory):
    pool = factories.pool(team_a, "cpu-pool", ready_replicas=1)
    endpoint_services.endpoint_create(user=deployer, name="ctr", pool=pool, stable_artifact=artifact_factory(team_a))
    artifact_factory(team_a)  # a candidate, so the start form shows
    now = timezone.now()
    for i in range(30):  # 20 req/s
        samples_store(rows=[("ctr", "v1-onnx-fp32", "requests", 40)], at=now - timedelta(seconds=2 * i))
    client.force_login(deployer)
    page = client.get(reverse("deployments:endpoint-detail", args=["ctr"])).content.decode()
    assert 'id="rollout-forecast"' in page and "At 20.0 req/s" in page
    assert 'name="steps_pct" value="50,100"' in page
