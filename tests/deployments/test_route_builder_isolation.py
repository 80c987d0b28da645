"""The route table builder fails per endpoint, never as a whole.

One endpoint's rows that cannot be turned into the entry they ask for (a rollout whose
plan does not hold, an experiment provider that raises for it, an entry or a key that does
not match the schema, a replica whose address is not one) cost that endpoint its split
(it serves its stable alone) or its entry (left out), with the reason on the endpoint
page and in an alert naming it; every other endpoint is served as its rows ask, and the
gateway accepts the table whole."""

import pytest
from django.contrib.auth.models import Permission

from deployments import route_overlays
from deployments.models import Endpoint, InferenceKey, PoolModel, PoolModelState, PoolReplica
from deployments.route_overlays import Overlay
from deployments.routes import SERVED_NONE, SERVED_STABLE, route_build
from deployments.selectors.gateway_routes import endpoint_route_state
from deployments.services import keys as key_services
from gateway.table.routes import compile_table, validate
from harness import factories
from monitoring.models import Alert, Severity
from monitoring.services.route_refusals import route_problems_alert

pytestmark = pytest.mark.django_db


@pytest.fixture
def serving(team_a, artifact_factory):
    """Three endpoints on one ready pool, each with a candidate it could roll out."""
    pool = factories.pool(team_a, "cpu-pool", ready_replicas=1)
    stable, candidate = artifact_factory(team_a), artifact_factory(team_a)  # model "ctr" v1, v2
    for artifact in (stable, candidate):
        PoolModel.objects.create(
            pool=pool,
            artifact=artifact,
            triton_model_name=artifact.triton_model_name,
            state=PoolModelState.READY,
            replica_ready={"r0": True},
        )
    endpoints = {name: factories.endpoint(pool, stable, name=name, public=True) for name in ("bad", "good", "plain")}
    return pool, stable, candidate, endpoints


def entries(table) -> dict:
    return {e["name"]: e for e in table["endpoints"]}


def roles(entry) -> dict:
    return {v["role"]: v["weight_bp"] for v in entry["variants"]}


def accepted_whole(table) -> None:
    validate(table)
    assert compile_table(table, {}).refusals == []


@pytest.mark.parametrize(
    "plan,why",
    [
        ({"strategy": "blue-green", "shadow_seconds": 0, "steps_bp": [10000]}, "blue-green needs a shadow phase"),
        ({"steps_bp": [5000, 2500]}, "steps_bp must be strictly increasing"),
        ({"steps_bp": [2500, 12000]}, "steps_bp must be strictly increasing"),
        ({"steps_bp": [5000, 10000], "on_inconclusive": "shrug"}, "on_inconclusive is rollback, pause or promote"),
        ({"steps_bp": [5000, 10000], "step_deadline_seconds": 1, "step_min_seconds": 30}, "deadline"),
        ({"steps_bp": [5000, 10000], "strategy": "sideways"}, "'sideways' is not a valid Strategy"),
    ],
)
def test_a_rollout_whose_plan_does_not_hold_costs_only_its_own_split(serving, plan, why):
    _, stable, candidate, endpoints = serving
    bad = factories.rollout(endpoints["bad"], candidate, state="canary", **plan)
    factories.rollout(endpoints["good"], candidate, state="canary", steps_bp=[2500, 10000])
    table, problems, key_problems = route_build()
    served = entries(table)
    assert set(served) == {"bad", "good", "plain"}
    assert roles(served["bad"]) == {"stable": 10000}  # its stable alone
    assert roles(served["good"]) == {"stable": 5000, "canary": 2500, "baseline": 2500} or roles(served["good"]) == {
        "stable": 7500,
        "canary": 2500,
    }
    assert roles(served["plain"]) == {"stable": 10000}
    assert set(problems) == {"bad"} and key_problems == {}
    problem = problems["bad"]
    assert problem.code == "split_failed" and problem.served == SERVED_STABLE
    assert f"rollout #{bad.pk}" in problem.reason and why in problem.reason and "'bad'" in problem.reason
    accepted_whole(table)


def test_the_gateways_route_api_answers_with_a_bad_rollout_row(serving, api_for):
    """The whole-table freeze of the report: one invalid plan used to make the API a 500."""
    _, _, candidate, endpoints = serving
    factories.rollout(endpoints["bad"], candidate, state="shadow", strategy="blue-green", shadow_seconds=0)
    gateway = factories.user("gateway-svc")
    gateway.user_permissions.add(Permission.objects.get(codename="read_routes"))
    response = api_for(gateway).get("/api/v1/gateway/routes")
    assert response.status_code == 200, response.content
    assert {e["name"] for e in response.json()["endpoints"]} == {"bad", "good", "plain"}
    accepted_whole(response.json())


def test_an_entry_that_does_not_fit_the_schema_is_left_out_alone(serving):
    _, _, candidate, endpoints = serving
    Endpoint.objects.filter(name="bad").update(sticky_header="X User Id", timeout_ms=0)  # written around the forms
    factories.rollout(endpoints["good"], candidate, state="canary", steps_bp=[2500, 10000])
    table, problems, _ = route_build()
    assert set(entries(table)) == {"good", "plain"}
    assert "canary" in roles(entries(table)["good"])
    problem = problems["bad"]
    assert problem.code == "entry_invalid" and problem.served == SERVED_NONE
    assert "does not match the route table schema" in problem.reason and "left out" in problem.reason
    accepted_whole(table)


def test_a_bad_split_entry_falls_back_to_the_stable_entry(serving, monkeypatch):
    """A split whose entry does not match the schema (here a candidate whose signature names
    an input the schema refuses) is served as the stable alone."""
    from registry.selectors import serving as serving_signatures

    _, stable, candidate, endpoints = serving
    factories.rollout(endpoints["bad"], candidate, state="canary", steps_bp=[2500, 10000], baseline_model="")
    real = serving_signatures.artifact_serving_signature

    def signature(artifact):
        if artifact.pk == candidate.pk:
            return {"max_batch_size": 0, "inputs": [{"name": "", "datatype": "FP32", "shape": [-1]}]}
        return real(artifact)

    monkeypatch.setattr("deployments.routes.artifact_serving_signature", signature)
    monkeypatch.setattr("deployments.selectors.compatibility.artifact_serving_signature", lambda artifact: None)
    table, problems, _ = route_build()
    assert roles(entries(table)["bad"]) == {"stable": 10000}
    assert problems["bad"].code == "split_invalid" and "schema" in problems["bad"].reason
    accepted_whole(table)


def test_an_experiment_provider_that_fails_for_one_endpoint_costs_only_that_split(serving, monkeypatch):
    _, stable, candidate, endpoints = serving

    def provider(asked):
        names = {e.name for e in asked}
        if "bad" in names:
            raise KeyError("arm 3 has no artifact")
        return {
            e.pk: Overlay(name="exp-good", salt="s", arms=((stable, 5000), (candidate, 5000)))
            for e in asked
            if e.name == "good"
        }

    monkeypatch.setattr(route_overlays, "_providers", [provider])
    table, problems, _ = route_build()
    served = entries(table)
    assert roles(served["good"]) == {"stable": 5000, "arm": 5000} and served["good"]["experiment"] == "exp-good"
    assert roles(served["bad"]) == {"stable": 10000}
    assert problems["bad"].code == "split_failed" and "arm 3 has no artifact" in problems["bad"].reason
    assert set(problems) == {"bad"}
    accepted_whole(table)


def test_a_key_row_that_does_not_fit_is_left_out_and_named_by_no_entry(serving, deployer, team_a):
    Endpoint.objects.update(public=False)
    good, _ = key_services.inference_key_create(user=deployer, team=team_a, name="good")
    bad, _ = key_services.inference_key_create(user=deployer, team=team_a, name="bad")
    InferenceKey.objects.filter(pk=bad.pk).update(sha256="not-a-digest", prefix="has space")
    table, problems, key_problems = route_build()
    assert [k["id"] for k in table["keys"]] == [good.gateway_id]
    assert all(e["auth"]["keys"] == [good.gateway_id] for e in table["endpoints"])
    assert problems == {} and set(key_problems) == {bad.gateway_id}
    assert key_problems[bad.gateway_id].code == "key_invalid"
    accepted_whole(table)


def test_a_replica_whose_address_is_not_one_is_not_routed(serving):
    pool, _, _, _ = serving
    factories.replica(pool, "r1", http_url="not a url", grpc_url="also not")
    PoolReplica.objects.filter(pool=pool, name="r0").update(grpc_url="bad grpc")
    PoolModel.objects.update(replica_ready={"r0": True, "r1": True})
    table, problems, _ = route_build()
    for entry in table["endpoints"]:
        (variant,) = entry["variants"]
        assert len(variant["replicas"]) == 1 and "grpc_replicas" not in variant
    assert problems == {}
    accepted_whole(table)


def test_a_malformed_stored_signature_is_unknown_not_an_error(serving, tmp_path):
    """An artifact without readable files whose version's stored signature has another shape
    is served without a signature (the gateway checks shapes and data only)."""
    _, stable, _, _ = serving
    stable.path = str(tmp_path / "gone")
    stable.save(update_fields=["path"])
    stable.version.signature = {"inputs": [{"name": "dense", "dtype": "float32", "shape": ["batch", 13]}]}
    stable.version.save(update_fields=["signature"])
    table, problems, _ = route_build()
    assert problems == {} and len(table["endpoints"]) == 3
    assert all("signature" not in e["variants"][0] for e in table["endpoints"])


def test_the_endpoint_page_and_an_alert_name_the_endpoint(serving, team_a):
    _, _, candidate, endpoints = serving
    bad = factories.rollout(endpoints["bad"], candidate, state="canary", strategy="blue-green", shadow_seconds=0)
    Endpoint.objects.filter(name="plain").update(timeout_ms=0)
    state = endpoint_route_state(endpoint=endpoints["bad"], rollout=bad)
    assert state["degraded"]["served"] == "stable" and f"rollout #{bad.pk}" in state["degraded"]["reason"]
    assert endpoint_route_state(endpoint=endpoints["good"])["degraded"] is None
    assert route_problems_alert() == 2
    assert route_problems_alert() == 2  # raised again: counted, still one alert per endpoint
    alerts = {a.endpoint: a for a in Alert.objects.filter(kind="route_degraded")}
    assert set(alerts) == {"bad", "plain"}
    assert alerts["bad"].severity == Severity.WARNING and "serves its stable alone" in alerts["bad"].reason
    assert alerts["plain"].severity == Severity.CRITICAL and "left out" in alerts["plain"].reason
    assert alerts["bad"].team == team_a


def test_the_control_loop_rolls_back_a_rollout_whose_plan_does_not_hold_and_goes_on(serving, deployer):
    """The same row in the reconcile and the judge's ticks: oldest first, it used to stop
    both loops for every rollout behind it; now it is rolled back alone, saying why."""
    from datetime import timedelta

    from django.utils import timezone

    from deployments.models import Rollout
    from deployments.tasks import rollouts_reconcile
    from monitoring.services.canary import canary_tick

    _, _, candidate, endpoints = serving
    now = timezone.now()
    bad = factories.rollout(
        endpoints["bad"],
        candidate,
        state="canary",
        strategy="blue-green",
        shadow_seconds=0,
        steps_bp=[10000],
        state_entered_at=now - timedelta(minutes=5),
        traffic_started_at=now - timedelta(minutes=5),
    )
    good = factories.rollout(
        endpoints["good"], candidate, state="pending", steps_bp=[5000, 10000], state_entered_at=now, created_by=deployer
    )
    canary_tick()  # judges what it can, does not raise
    assert rollouts_reconcile() == 2
    bad, good = Rollout.objects.get(pk=bad.pk), Rollout.objects.get(pk=good.pk)
    assert bad.state == "rolling_back" and "blue-green needs a shadow phase" in bad.reason
    assert good.state != "pending"  # the rollout behind it went on
