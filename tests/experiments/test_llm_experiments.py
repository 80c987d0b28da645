"""Online experiments on an LLM endpoint (Endpoint.kind "llm"): the arms are LLM versions,
feedback (a thumbs up is a `click`) comes through the same feedback API, the analysis
decides on it, and each arm's machine guardrails are the LLM judge's (TTFT, ITL, the LLM
error rate) over the collector's LLM metrics."""

from datetime import timedelta

import numpy as np
import pytest
from django.utils import timezone

from deployments.models import PoolModel, PoolModelState
from deployments.routes import route_table
from experiments.models import Experiment, Exposure
from experiments.services import online as services
from experiments.store import default_store
from harness import factories
from monitoring.collection.collect import bucket_metric
from monitoring.services.store import samples_store

pytestmark = pytest.mark.django_db

TTFT_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, float("inf")]


@pytest.fixture
def llm_endpoint(team_a):
    """An LLM endpoint `chat` whose stable and candidate are versions of one LLM (Triton
    generate models of uploaded model directories)."""
    stable = factories.llm_artifact(team_a, model_name="chat-llm")
    candidate = factories.llm_artifact(team_a, model_name="chat-llm")
    pool = factories.pool(team_a, ready_replicas=1)
    endpoint = factories.endpoint(pool, stable, name="chat", kind="llm", ttft_slo_ms=1000, itl_slo_ms=100)
    factories.pool_model_ready(pool, stable)
    return endpoint, stable, candidate


def _create(api, candidate):
    return api.post(
        "/api/v1/experiments/",
        {
            "endpoint": "chat",
            "name": "friendlier",
            "hypothesis": "v2's answers get more thumbs up",
            "candidates": [candidate.pk],
            "primary_metric": "ctr",
            "baseline_rate": 0.3,
            "exposures_per_unit": 3,
            "mde": 0.1,
            "attribution_window_s": 600,
        },
        format="json",
    )


def _expose(experiment, units: int, per_unit: int, at) -> None:
    """Exposures as the gateway logs them for completions (one per request, the arm that answered)."""
    rows = [
        {
            "request_id": f"{a.name}-{u}-{j}",
            "experiment": experiment.pk,
            "arm": a.pk,
            "unit_key": f"{a.name}-user{u}",
            "time": at,
            "score": None,
        }
        for a in experiment.arms.all()
        for u in range(units)
        for j in range(per_unit)
    ]
    default_store().write_exposures(rows)


def test_experiment_on_an_llm_endpoint_takes_thumbs_up_through_the_feedback_api_and_decides(
    llm_endpoint, deployer, deployer_api
):
    endpoint, stable, candidate = llm_endpoint
    res = _create(deployer_api, candidate)
    assert res.status_code == 201, res.content
    exp = Experiment.objects.get(pk=int(res.json()["id"][4:]))
    assert [a["is_control"] for a in res.json()["arms"]] == [True, False]
    assert deployer_api.post(f"/api/v1/experiments/{exp.public_id}/start/").json()["state"] == "running"
    control, arm = exp.arms.get(is_control=True), exp.arms.get(is_control=False)
    PoolModel.objects.filter(pool=endpoint.pool).update(state=PoolModelState.READY, replica_ready={"r0": True})
    entry = next(e for e in route_table()["llm_endpoints"] if e["name"] == "chat")  # the gateway splits the arms
    assert entry["experiment"] == exp.public_id
    assert {(v["name"], v["role"]) for v in entry["variants"]} == {(control.name, "stable"), (arm.name, "arm")}

    t0 = timezone.now() - timedelta(minutes=5)
    _expose(exp, 3, 1, t0)
    thumbs = {
        "endpoint": "chat",
        "events": [
            {"event_id": "t1", "type": "click", "request_id": f"{arm.name}-0-0"},
            {"event_id": "t2", "type": "click", "unit_key": f"{control.name}-user1"},
            {"event_id": "t3", "type": "click", "request_id": "never-served"},
        ],
    }
    first = deployer_api.post("/api/v1/feedback/", thumbs, format="json")
    assert first.status_code == 202, first.content
    assert first.json() == {"received": 3, "duplicates": 0, "attributed": 2, "late": 0, "unknown": 1, "refused": 0}
    results = deployer_api.get(f"/api/v1/experiments/{exp.public_id}/results/").json()
    assert results["arms"][arm.name]["clicks"] == 1 and results["arms"][control.name]["clicks"] == 1

    # Many more chats: the candidate's answers get a thumbs up 40 % of the time, the control's 20 %.
    rng = np.random.default_rng(0)
    _expose(exp, 500, 3, t0)
    events = [
        {"event_id": f"up-{e.request_id}", "type": "click", "request_id": e.request_id, "time": t0}
        for e in Exposure.objects.filter(experiment=exp)
        if rng.random() < (0.4 if e.request_id.startswith(arm.name) else 0.2)
    ]
    default_store().write_feedback(team=endpoint.team, endpoint_name="chat", experiments=[exp], events=events)
    result = services.experiment_analyze(experiment_id=exp.pk)
    exp.refresh_from_db()
    assert result["candidates"][arm.name]["decision"] == "ship" and result["candidates"][arm.name]["lower"] > 0
    assert exp.state == "decided" and exp.winner_id == arm.pk


def _feed_llm_metrics(exp, *, ticks: int, start, cand_ttft_s: float, rps: int = 40, seed: int = 0) -> None:
    """The collector's LLM samples per arm (llm_requests/llm_errors, TTFT and ITL buckets)."""
    rng = np.random.default_rng(seed)
    for i in range(ticks):
        rows = []
        for a in exp.arms.all():
            ttft = rng.lognormal(np.log(0.04 if a.is_control else cand_ttft_s), 0.25, rps)
            counts, _ = np.histogram(ttft, bins=[0.0, *TTFT_BUCKETS])
            gaps, _ = np.histogram(rng.lognormal(np.log(0.004), 0.25, rps * 5), bins=[0.0, 0.002, 0.005, 0.01, 1.0])
            rows += [("chat", a.name, "llm_requests", rps), ("chat", a.name, "llm_errors", 0.0)]
            rows += [
                ("chat", a.name, bucket_metric("ttft_bucket", le), float(n)) for le, n in zip(TTFT_BUCKETS, counts)
            ]
            rows += [
                ("chat", a.name, bucket_metric("itl_bucket", le), float(n))
                for le, n in zip([0.002, 0.005, 0.01, 1.0], gaps)
            ]
        samples_store(rows=rows, at=start + timedelta(seconds=i + 1))


def test_an_llm_arm_with_a_slow_first_token_stops_the_experiment_for_harm(llm_endpoint, deployer, deployer_api):
    endpoint, stable, candidate = llm_endpoint
    exp = Experiment.objects.get(pk=int(_create(deployer_api, candidate).json()["id"][4:]))
    exp = services.experiment_start(user=deployer, experiment=exp)
    arm = exp.arms.get(is_control=False)
    _feed_llm_metrics(exp, ticks=12, start=exp.started_at, cand_ttft_s=0.4)
    result = services.experiment_analyze(experiment_id=exp.pk, now=exp.started_at + timedelta(seconds=13))
    guard = result["guardrails"][arm.name]
    outcomes = {c["name"]: c["outcome"] for c in guard["checks"]}
    assert guard["status"] == "fail" and outcomes["ttft"] == "fail", guard["reason"]
    assert "latency" not in outcomes and "TTFT slower than control" in guard["reason"]
    exp.refresh_from_db()
    assert (exp.state, exp.decision) == ("decided", "stop")


def test_healthy_llm_arms_pass_their_guardrails(llm_endpoint, deployer, deployer_api):
    endpoint, stable, candidate = llm_endpoint
    exp = Experiment.objects.get(pk=int(_create(deployer_api, candidate).json()["id"][4:]))
    exp = services.experiment_start(user=deployer, experiment=exp)
    _feed_llm_metrics(exp, ticks=20, start=exp.started_at, cand_ttft_s=0.04, seed=4)
    result = services.experiment_analyze(experiment_id=exp.pk, now=exp.started_at + timedelta(seconds=21))
    guard = result["guardrails"][exp.arms.get(is_control=False).name]
    assert guard["status"] == "pass", guard["reason"]
    assert {c["name"] for c in guard["checks"]} >= {"ttft", "itl", "ttft_slo", "itl_slo", "error_rate", "error_slo"}
