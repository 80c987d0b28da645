"""The fair baseline (Kayenta's method) on the control-plane side: a rollout loads a fresh
copy of the stable artifact under its own Triton name, gives it the candidate's share,
and unloads it when it ends; the route table carries it as a `baseline` variant that the
gateway compiles like a canary. The pool side is driven the way the pool's load/unload
tasks report it (rows READY/UNLOADED); the real-process path is
tests/deployments/test_rollout_integration.py and bench/rollback.py."""

import json
from datetime import timedelta

import pytest

from deployments.models import Endpoint, PoolModel, PoolModelState, Rollout
from deployments.rollout_machine import FULL_BP, Plan, State, baseline_share, split_for
from deployments.routes import route_table
from deployments.services import endpoints as endpoint_services
from deployments.services import rollouts as services
from deployments.services.reconcile import model_dir_for
from gateway.table.routes import compile_table
from harness import factories
from registry.models import Event
from registry.names import baseline_triton_name, baseline_variant_name, triton_name, variant_name

pytestmark = pytest.mark.django_db


@pytest.fixture
def pool(team_a):
    return factories.pool(team_a, "cpu-pool", ready_replicas=1)


def ready(pool, artifact, name=None):
    """What the pool's load task writes once Triton says READY on every replica."""
    rows = PoolModel.objects.filter(pool=pool, artifact=artifact)
    if name:
        rows = rows.filter(triton_model_name=name)
    rows.update(state=PoolModelState.READY, replica_ready={"r0": True})


@pytest.fixture
def endpoint(deployer, pool, artifact_factory, team_a):
    stable = artifact_factory(team_a)
    ep = endpoint_services.endpoint_create(user=deployer, name="ctr", pool=pool, stable_artifact=stable)
    ready(pool, stable, triton_name(stable))
    return ep


@pytest.fixture
def candidate(artifact_factory, team_a):
    return artifact_factory(team_a)


def start(deployer, endpoint, candidate, **plan):
    plan = {
        "steps_bp": [500, 5000, 10000],
        "step_min_seconds": 10,
        "step_min_requests": 50,
        "step_deadline_seconds": 60,
        "promote_grace_seconds": 5,
        **plan,
    }
    return services.rollout_start(user=deployer, endpoint=endpoint, candidate=candidate, **plan)


def weights():
    endpoint = next(e for e in route_table()["endpoints"] if e["name"] == "ctr")
    return {v["name"]: (v["role"], v["weight_bp"], v["triton_model"]) for v in endpoint["variants"]}


def test_split_gives_the_baseline_the_candidates_share():
    plan = Plan(steps_bp=(500, 2500, 5000, 7500, FULL_BP), baseline=True)
    shares = [split_for(State.CANARY, i, plan) for i in range(5)]
    assert [(s.stable_bp, s.baseline_bp, s.candidate_bp) for s in shares] == [
        (9000, 500, 500),
        (5000, 2500, 2500),
        (0, 5000, 5000),
        (0, 2500, 7500),
        (0, 0, 10000),
    ]
    assert all(s.stable_bp + s.baseline_bp + s.candidate_bp == FULL_BP for s in shares)
    assert split_for(State.CANARY, 0, Plan(steps_bp=(500, FULL_BP))).baseline_bp == 0  # without: as before
    assert split_for(State.PROMOTING, 0, plan).baseline_bp == 0 and baseline_share(FULL_BP) == 0


def test_baseline_copy_is_loaded_waited_for_and_routed_beside_the_candidate(deployer, endpoint, candidate, pool):
    stable = endpoint.stable_artifact
    rollout = start(deployer, endpoint, candidate)
    alias = baseline_triton_name(stable)
    assert rollout.baseline_model == alias
    copy = PoolModel.objects.get(pool=pool, triton_model_name=alias)
    assert copy.artifact_id == stable.pk and copy.state == PoolModelState.LOADING
    ready(pool, candidate)
    assert services.rollout_reconcile(rollout_id=rollout.pk).state == State.LOADING  # the copy is not READY yet
    ready(pool, stable, alias)
    rollout = services.rollout_reconcile(rollout_id=rollout.pk)
    assert rollout.state == State.CANARY and "baseline" in rollout.reason
    assert weights() == {
        variant_name(stable): ("stable", 9000, triton_name(stable)),
        variant_name(candidate): ("canary", 500, triton_name(candidate)),
        baseline_variant_name(stable): ("baseline", 500, alias),
    }
    # the gateway compiles it like a canary: half the deadline per attempt, failover to stable
    compiled = compile_table(route_table(), {}).endpoints["ctr"]
    baseline = next(v for v in compiled.variants if v.role == "baseline")
    assert baseline.attempt_timeout_s == compiled.timeout_s / 2 and compiled.stable.name == variant_name(stable)
    assert compiled.stable_score_rate == pytest.approx(500 / 9000)  # stable scores sampled as often as the candidate's
    # the step at 50 %: the stable keeps none, baseline and candidate half each
    rollout, _ = services.rollout_apply_verdict(
        rollout_id=rollout.pk,
        outcome="pass",
        reason="ok",
        step_requests=60,
        now=rollout.step_started_at + timedelta(seconds=11),
    )
    assert {name: w[:2] for name, w in weights().items()} == {
        variant_name(stable): ("stable", 0),
        variant_name(candidate): ("canary", 5000),
        baseline_variant_name(stable): ("baseline", 5000),
    }


def test_the_copy_loads_under_its_own_name_from_the_stables_directory(endpoint, pool):
    stable = endpoint.stable_artifact
    own, copy = model_dir_for(pool, stable), model_dir_for(pool, stable, baseline_triton_name(stable))
    assert copy.path == own.path and copy.name == baseline_triton_name(stable)
    assert json.loads(copy.config_json)["name"] == copy.name  # Triton serves it as a model of its own


def test_rollback_unloads_the_copy_with_the_candidate(deployer, endpoint, candidate, pool):
    rollout = start(deployer, endpoint, candidate)
    ready(pool, candidate)
    ready(pool, endpoint.stable_artifact)
    services.rollout_reconcile(rollout_id=rollout.pk)
    services.rollout_apply_verdict(rollout_id=rollout.pk, outcome="fail", reason="worse", step_requests=3)
    assert set(weights()) == {variant_name(endpoint.stable_artifact)}  # weight 0 for both at once
    services.rollout_reconcile(rollout_id=rollout.pk)
    states = dict(PoolModel.objects.filter(pool=pool).values_list("triton_model_name", "state"))
    assert (
        states[rollout.baseline_model] == PoolModelState.DRAINING
        and states[triton_name(candidate)] == PoolModelState.DRAINING
    )
    assert states[triton_name(endpoint.stable_artifact)] == PoolModelState.READY  # the stable itself keeps serving


def test_promotion_unloads_the_copy_and_the_old_stable(deployer, endpoint, candidate, pool):
    old = endpoint.stable_artifact
    rollout = start(deployer, endpoint, candidate, steps_bp=[5000, 10000])
    ready(pool, candidate)
    ready(pool, old)
    rollout = services.rollout_reconcile(rollout_id=rollout.pk)
    for _ in range(2):
        rollout, _ = services.rollout_apply_verdict(
            rollout_id=rollout.pk,
            outcome="pass",
            reason="ok",
            step_requests=60,
            now=rollout.step_started_at + timedelta(seconds=11),
        )
    assert rollout.state == State.PROMOTING and weights()[variant_name(candidate)][:2] == ("canary", 10000)
    assert baseline_variant_name(old) not in weights()  # nothing beside a candidate at 100 %
    done = services.rollout_reconcile(rollout_id=rollout.pk, now=rollout.state_entered_at + timedelta(seconds=6))
    assert done.state == State.SUCCEEDED and Endpoint.objects.get(pk=endpoint.pk).stable_artifact_id == candidate.pk
    states = dict(PoolModel.objects.filter(pool=pool).values_list("triton_model_name", "state"))
    assert (
        states[baseline_triton_name(old)] == PoolModelState.DRAINING
        and states[triton_name(old)] == PoolModelState.DRAINING
    )


def test_a_copy_that_cannot_load_leaves_the_rollout_judged_against_the_stable(deployer, endpoint, candidate, pool):
    rollout = start(deployer, endpoint, candidate)
    ready(pool, candidate)
    PoolModel.objects.filter(triton_model_name=rollout.baseline_model).update(
        state=PoolModelState.FAILED, error="out of memory"
    )
    rollout = services.rollout_reconcile(rollout_id=rollout.pk)
    assert rollout.state == State.CANARY and rollout.baseline_model == ""
    assert {name: w[:2] for name, w in weights().items()} == {
        variant_name(endpoint.stable_artifact): ("stable", 9500),
        variant_name(candidate): ("canary", 500),
    }
    event = Event.objects.get(action="baseline_unavailable")
    assert "out of memory" in event.reason and "judging against the stable" in event.reason


def test_a_copy_still_draining_from_the_last_rollout_is_asked_for_again(deployer, endpoint, candidate, pool):
    alias = baseline_triton_name(endpoint.stable_artifact)
    PoolModel.objects.create(
        pool=pool, artifact=endpoint.stable_artifact, triton_model_name=alias, state=PoolModelState.DRAINING
    )
    rollout = start(deployer, endpoint, candidate)  # no 409: the copy is asked for once the drain is over
    ready(pool, candidate)
    assert services.rollout_reconcile(rollout_id=rollout.pk).state == State.LOADING
    PoolModel.objects.filter(triton_model_name=alias).update(state=PoolModelState.UNLOADED)
    services.rollout_reconcile(rollout_id=rollout.pk)
    assert PoolModel.objects.get(triton_model_name=alias).state == PoolModelState.LOADING
    ready(pool, endpoint.stable_artifact, alias)
    assert services.rollout_reconcile(rollout_id=rollout.pk).state == State.CANARY


def test_without_a_fair_baseline_or_for_blue_green_no_copy_is_loaded(
    deployer, endpoint, candidate, pool, artifact_factory, team_a
):
    rollout = start(deployer, endpoint, candidate, fair_baseline=False)
    assert (
        rollout.baseline_model == "" and not PoolModel.objects.filter(triton_model_name__endswith="__baseline").exists()
    )
    services.rollout_rollback(user=deployer, rollout=rollout)
    Rollout.objects.filter(pk=rollout.pk).update(state=State.ROLLED_BACK)
    green = start(deployer, endpoint, artifact_factory(team_a), strategy="blue-green", shadow_seconds=5)
    assert green.baseline_model == ""


def test_api_shows_the_baseline_and_its_share(deployer_api, endpoint, candidate, pool):
    response = deployer_api.post(
        "/api/v1/endpoints/ctr/rollouts/",
        {"candidate_artifact": candidate.pk, "steps_bp": [1000, 10000]},
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["fair_baseline"] == {
        "variant": baseline_variant_name(endpoint.stable_artifact),
        "triton_model": baseline_triton_name(endpoint.stable_artifact),
    }
    ready(pool, candidate)
    ready(pool, endpoint.stable_artifact)
    services.rollout_reconcile(rollout_id=body["id"])
    traffic = deployer_api.get(f"/api/v1/rollouts/{body['id']}/").json()["traffic"]
    assert traffic == {"stable_bp": 8000, "candidate_bp": 1000, "baseline_bp": 1000, "candidate_role": "canary"}
    off = deployer_api.post(f"/api/v1/rollouts/{body['id']}/rollback/", {}, format="json")
    assert off.status_code == 200
    Rollout.objects.filter(pk=body["id"]).update(state=State.ROLLED_BACK)
    plain = deployer_api.post(
        "/api/v1/endpoints/ctr/rollouts/", {"candidate_artifact": candidate.pk, "fair_baseline": False}, format="json"
    ).json()
    assert plain["fair_baseline"] is None
