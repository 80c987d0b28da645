"""Online experiments through the API: lifecycle, route table arms, feedback attribution
(duplicates once, late vs attributed, unknown counted), results, ship via a rollout."""

from datetime import timedelta

import numpy as np
import pytest
from django.utils import timezone

from deployments.models import PoolModel, PoolModelState
from deployments.routes import route_table
from experiments.models import Experiment, Exposure, Feedback
from experiments.services import online as services
from experiments.store import default_store
from harness import factories


@pytest.fixture
def setup(team_a, deployer_api, artifact_factory):
    pool = factories.pool(team_a, ready_replicas=1)
    stable = artifact_factory(team_a)
    candidate = artifact_factory(team_a)
    endpoint = factories.endpoint(pool, stable, name="ctr-demo")
    return endpoint, stable, candidate


def _create(api, candidate, **extra):
    body = {
        "endpoint": "ctr-demo",
        "name": "better-ctr",
        "hypothesis": "v2 lifts CTR",
        "candidates": [candidate.pk],
        "baseline_rate": 0.2,
        "exposures_per_unit": 4,
        "mde": 0.05,
        "attribution_window_s": 600,
        **extra,
    }
    return api.post("/api/v1/experiments/", body, format="json")


def _expose(experiment, rows_per_arm, start):
    arms = {a.is_control: a for a in experiment.arms.all()}
    rows = []
    for control, (units, per_unit) in rows_per_arm.items():
        for u in range(units):
            for j in range(per_unit):
                rows.append(
                    {
                        "request_id": f"{int(control)}-{u}-{j}",
                        "experiment": experiment.pk,
                        "arm": arms[control].pk,
                        "unit_key": f"{'c' if control else 't'}{u}",
                        "time": start,
                        "score": 0.5,
                    }
                )
    default_store().write_exposures(rows)


@pytest.mark.django_db
def test_lifecycle_route_table_and_results(setup, deployer_api, bob_api):
    endpoint, stable, candidate = setup
    res = _create(deployer_api, candidate)
    assert res.status_code == 201, res.content
    body = res.json()
    exp_id = body["id"]
    assert [a["is_control"] for a in body["arms"]] == [True, False] and body["state"] == "draft"
    assert body["planned_units_per_arm"] > 0
    assert bob_api.get(f"/api/v1/experiments/{exp_id}/").status_code == 404  # another team's
    assert deployer_api.post(f"/api/v1/experiments/{exp_id}/start/").json()["state"] == "running"
    # the arm's model is loading into the pool: the stable alone until it is ready (no arm's
    # share meets a model that is not there, no harm blamed on an arm for its own loading)
    entry = next(e for e in route_table()["endpoints"] if e["name"] == "ctr-demo")
    assert [v["role"] for v in entry["variants"]] == ["stable"] and "experiment" not in entry
    loading = PoolModel.objects.get(pool=endpoint.pool, artifact=candidate)
    assert loading.state == PoolModelState.LOADING
    loading.state, loading.replica_ready = PoolModelState.READY, {"r0": True}
    loading.save()
    entry = next(e for e in route_table()["endpoints"] if e["name"] == "ctr-demo")
    assert entry["experiment"] == exp_id and entry["salt"] == body["salt"]
    assert [(v["role"], v["weight_bp"]) for v in entry["variants"]] == [("stable", 5000), ("arm", 5000)]
    # A second experiment on the same endpoint cannot run at once.
    other = _create(deployer_api, candidate, name="second").json()["id"]
    assert deployer_api.post(f"/api/v1/experiments/{other}/start/").status_code == 409
    results = deployer_api.get(f"/api/v1/experiments/{exp_id}/results/").json()
    assert results["progress"]["have"] == 0 and results["srm"]["flagged"] is False
    assert (
        deployer_api.post(f"/api/v1/experiments/{exp_id}/stop/", {"reason": "done"}, format="json").json()["state"]
        == "stopped"
    )
    entry = next(e for e in route_table()["endpoints"] if e["name"] == "ctr-demo")
    assert [v["role"] for v in entry["variants"]] == ["stable"] and "experiment" not in entry


@pytest.mark.django_db
def test_bad_create_is_a_clear_400(setup, deployer_api):
    endpoint, stable, candidate = setup
    res = _create(deployer_api, stable)
    assert res.status_code == 400 and "candidates" in res.json()["detail"]
    res = _create(deployer_api, candidate, allocation_bp=[9000, 2000])
    assert res.status_code == 400 and "allocation_bp" in res.json()["detail"]
    res = _create(deployer_api, candidate, mde=0)
    assert res.status_code == 400 and "mde" in res.json()["detail"]


@pytest.mark.django_db
def test_feedback_duplicates_late_unknown_and_errors(setup, deployer, deployer_api, api_for):
    endpoint, stable, candidate = setup
    exp = Experiment.objects.get(pk=int(_create(deployer_api, candidate).json()["id"][4:]))
    services.experiment_start(user=deployer, experiment=exp)
    t0 = timezone.now() - timedelta(hours=1)
    _expose(exp, {True: (3, 1), False: (3, 1)}, t0)
    inside = (t0 + timedelta(seconds=599)).isoformat()
    outside = (t0 + timedelta(seconds=601)).isoformat()
    batch = {
        "endpoint": "ctr-demo",
        "events": [
            {"event_id": "e1", "type": "click", "request_id": "1-0-0", "time": inside},  # late but inside the window
            {"event_id": "e2", "type": "click", "request_id": "0-1-0", "time": outside},  # outside: late
            {"event_id": "e3", "type": "conversion", "unit_key": "t2", "time": inside},
            {"event_id": "e4", "type": "click", "request_id": "nope", "time": inside},  # unknown request id
            {"event_id": "e5", "type": "value", "value": 12.5, "request_id": "0-0-0", "time": inside},
        ],
    }
    first = deployer_api.post("/api/v1/feedback/", batch, format="json")
    assert first.status_code == 202, first.content
    assert first.json() == {"received": 5, "duplicates": 0, "attributed": 3, "late": 1, "unknown": 1, "refused": 0}
    again = deployer_api.post("/api/v1/feedback/", batch, format="json").json()
    assert again == {"received": 5, "duplicates": 5, "attributed": 0, "late": 0, "unknown": 0, "refused": 0}
    assert Feedback.objects.count() == 5
    results = deployer_api.get(f"/api/v1/experiments/{exp.public_id}/results/").json()
    assert results["feedback"] == {"attributed": 3, "late": 1, "unknown": 1, "refused": 0}
    control, cand = (
        results["arms"][exp.arms.get(is_control=True).name],
        results["arms"][exp.arms.get(is_control=False).name],
    )
    assert (control["clicks"], control["exposures"]) == (1, 3)
    assert cand["conversions"] == 1 and cand["value"] == 12.5 and cand["clicks"] == 0

    def bad(events, needle):
        res = deployer_api.post("/api/v1/feedback/", {"endpoint": "ctr-demo", "events": events}, format="json")
        assert res.status_code == 400 and needle in res.json()["detail"], res.content

    bad([{"event_id": "x", "type": "like", "request_id": "r"}], "events[0].type")
    bad([{"event_id": "x", "type": "click"}], "exactly one of request_id, unit_key or exposure_token")
    bad([{"event_id": "x", "type": "value", "request_id": "r"}], "events[0].value")
    bad(
        [{"event_id": "ok", "type": "click", "request_id": "r"}, {"event_id": "", "type": "click", "request_id": "r"}],
        "events[1].event_id",
    )
    bad([], "events")
    assert Feedback.objects.count() == 5  # nothing of a rejected batch was written
    # No key, not public: 401; a stranger's session: 404.
    anon = api_for(factories.user("nobody"))
    anon.credentials()
    assert anon.post("/api/v1/feedback/", batch, format="json").status_code == 401
    assert api_for(factories.user("stranger")).post("/api/v1/feedback/", batch, format="json").status_code == 404


@pytest.mark.django_db
def test_inference_key_authenticates_feedback(setup, deployer, api_for):
    from deployments.services.keys import inference_key_create

    endpoint, stable, candidate = setup
    _, secret = inference_key_create(user=deployer, team=endpoint.team, name="app")
    client = api_for(factories.user("someone"))
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    res = client.post(
        "/api/v1/feedback/",
        {"endpoint": "ctr-demo", "events": [{"event_id": "k1", "type": "click", "unit_key": "u1"}]},
        format="json",
    )
    assert res.status_code == 202 and res.json()["unknown"] == 1
    client.credentials(HTTP_AUTHORIZATION="Bearer mpk_wrong")
    assert (
        client.post(
            "/api/v1/feedback/",
            {"endpoint": "ctr-demo", "events": [{"event_id": "k2", "type": "click", "unit_key": "u1"}]},
            format="json",
        ).status_code
        == 401
    )


@pytest.mark.django_db
def test_analysis_decides_and_ship_starts_a_rollout(setup, deployer, deployer_api):
    endpoint, stable, candidate = setup
    exp = Experiment.objects.get(pk=int(_create(deployer_api, candidate).json()["id"][4:]))
    services.experiment_start(user=deployer, experiment=exp)
    rng = np.random.default_rng(0)
    t0 = timezone.now()
    _expose(exp, {True: (400, 5), False: (400, 5)}, t0)
    events = []
    for e in Exposure.objects.filter(experiment=exp):
        rate = 0.1 if e.request_id.startswith("1-") else 0.3  # the candidate is far better
        if rng.random() < rate:
            events.append({"event_id": f"c-{e.request_id}", "type": "click", "request_id": e.request_id, "time": t0})
    default_store().write_feedback(team=endpoint.team, endpoint_name=endpoint.name, experiments=[exp], events=events)
    result = services.experiment_analyze(experiment_id=exp.pk)
    exp.refresh_from_db()
    cand = result["candidates"][exp.arms.get(is_control=False).name]
    assert cand["decision"] == "ship" and cand["lower"] > 0
    assert exp.state == "decided" and exp.decision == "ship" and not exp.winner.is_control
    assert len(exp.history) == 1
    shipped = deployer_api.post(f"/api/v1/experiments/{exp.public_id}/ship/").json()
    assert shipped.get("state") == "shipping" and shipped["rollout_id"], shipped  # shipped once the rollout succeeds
    from deployments.selectors.rollouts import rollout_get

    rollout = rollout_get(user=deployer, rollout_id=shipped["rollout_id"])
    assert rollout.candidate_artifact_id == candidate.pk and rollout.steps_bp == [10000]


@pytest.mark.django_db
def test_experiment_page_shows_arms_progress_srm_chart_and_decision(setup, deployer, deployer_api, bob):
    from django.test import Client

    endpoint, stable, candidate = setup
    exp = Experiment.objects.get(pk=int(_create(deployer_api, candidate).json()["id"][4:]))
    services.experiment_start(user=deployer, experiment=exp)
    _expose(exp, {True: (300, 1), False: (100, 1)}, timezone.now())  # a 3:1 split against a 1:1 plan
    services.experiment_analyze(experiment_id=exp.pk)
    services.experiment_analyze(experiment_id=exp.pk)
    client = Client()
    client.force_login(deployer)
    listing = client.get("/experiments/").content.decode()
    assert "better-ctr" in listing and "ctr-demo" in listing
    page = client.get(f"/experiments/{exp.pk}/").content.decode()
    control = exp.arms.get(is_control=True).name
    assert control in page and 'id="lift-chart"' in page and "lift-chart-data" in page
    assert f"100 of {exp.planned_units_per_arm} units per arm" in page
    assert "sample ratio mismatch" in page  # 300 vs 100 units is flagged
    assert "blocked" in page and "status_changed" in page
    other = Client()
    other.force_login(bob)
    assert other.get(f"/experiments/{exp.pk}/").status_code == 404


@pytest.mark.django_db
def test_decision_is_logged_as_an_mlflow_run_linked_to_both_versions(setup, deployer, deployer_api):
    from kernel import mlflow as mlflow_config

    endpoint, stable, candidate = setup
    exp = Experiment.objects.get(pk=int(_create(deployer_api, candidate).json()["id"][4:]))
    services.experiment_start(user=deployer, experiment=exp)
    t0 = timezone.now()
    _expose(exp, {True: (300, 4), False: (300, 4)}, t0)
    events = [
        {"event_id": f"c-{e.request_id}", "type": "click", "request_id": e.request_id, "time": t0}
        for i, e in enumerate(Exposure.objects.filter(experiment=exp).order_by("request_id"))
        if (e.request_id.startswith("0-") and i % 2 == 0) or (e.request_id.startswith("1-") and i % 10 == 0)
    ]
    default_store().write_feedback(team=endpoint.team, endpoint_name=endpoint.name, experiments=[exp], events=events)
    services.experiment_analyze(experiment_id=exp.pk)
    exp.refresh_from_db()
    assert exp.state == "decided" and exp.mlflow_run_id
    run = mlflow_config.client().get_run(exp.mlflow_run_id)
    cand, control = exp.arms.get(is_control=False), exp.arms.get(is_control=True)
    assert run.data.tags[f"modelplane.outcome.{cand.name}"] == "won"
    assert run.data.tags[f"modelplane.outcome.{control.name}"] == "lost"
    assert run.data.tags[f"modelplane.candidate.{cand.name}"] == f"ctr/{candidate.version.version}"
    assert run.data.tags["modelplane.team"] == "team-a" and run.data.metrics[f"{cand.name}.lower"] > 0


@pytest.mark.django_db
def test_a_rollout_cannot_start_while_an_experiment_runs(setup, deployer, deployer_api):
    endpoint, stable, candidate = setup
    exp = Experiment.objects.get(pk=int(_create(deployer_api, candidate).json()["id"][4:]))
    services.experiment_start(user=deployer, experiment=exp)
    res = deployer_api.post("/api/v1/endpoints/ctr-demo/rollouts/", {"candidate_artifact": candidate.pk}, format="json")
    assert res.status_code == 409 and res.json()["code"] == "experiment_running"
