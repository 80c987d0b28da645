"""Endpoints and rollouts through their services and API. The pool side is driven the
way the pool's own load/unload tasks report it (rows READY/UNLOADED); the real-process
path (tritonserver, gateway, worker) is in test_rollout_integration.py."""

import threading
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.utils import timezone

from deployments.models import Endpoint, PoolModel, PoolModelState, PoolReplica, Rollout
from deployments.rollout_machine import State
from deployments.routes import route_table
from deployments.services import endpoints as endpoint_services
from deployments.services import rollouts as services
from harness import factories
from kernel.errors import Conflict, InvalidInput
from registry.models import ArtifactStatus, Event
from registry.names import variant_name

pytestmark = pytest.mark.django_db


@pytest.fixture
def pool(team_a):
    pool = factories.pool(team_a, "cpu-pool", ready_replicas=1)
    return pool


def pool_reports_ready(pool, artifact):
    """What the pool's load task writes once Triton says READY on every replica."""
    PoolModel.objects.filter(pool=pool, artifact=artifact).update(
        state=PoolModelState.READY, replica_ready={"r0": True}
    )


@pytest.fixture
def endpoint(deployer, pool, artifact_factory, team_a):
    stable = artifact_factory(team_a)
    ep = endpoint_services.endpoint_create(
        user=deployer, name="ctr", pool=pool, stable_artifact=stable, slo_p99_ms=80, slo_error_rate=0.02
    )
    pool_reports_ready(pool, stable)
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
        "fair_baseline": False,
        **plan,
    }  # the baseline copy: test_fair_baseline.py
    return services.rollout_start(user=deployer, endpoint=endpoint, candidate=candidate, **plan)


def weights(name="ctr"):
    endpoint = next(e for e in route_table()["endpoints"] if e["name"] == name)
    return {v["name"]: (v["role"], v["weight_bp"]) for v in endpoint["variants"]}


def test_candidate_gets_traffic_only_when_ready_everywhere(deployer, endpoint, candidate, pool):
    rollout = start(deployer, endpoint, candidate)
    assert rollout.state == State.LOADING
    assert PoolModel.objects.get(pool=pool, artifact=candidate).state == PoolModelState.LOADING
    stable_name, cand_name = variant_name(endpoint.stable_artifact), variant_name(candidate)
    assert weights() == {stable_name: ("stable", 10000)}
    services.rollout_reconcile(rollout_id=rollout.pk)
    assert Rollout.objects.get(pk=rollout.pk).state == State.LOADING  # not READY yet: no traffic
    pool_reports_ready(pool, candidate)
    rollout = services.rollout_reconcile(rollout_id=rollout.pk)
    assert (rollout.state, rollout.step_index) == (State.CANARY, 0) and rollout.traffic_started_at
    assert weights() == {stable_name: ("stable", 9500), cand_name: ("canary", 500)}
    replicas = route_table()["endpoints"][0]["variants"][1]["replicas"]
    assert replicas == ["http://127.0.0.1:18000"]


def test_steps_advance_on_pass_after_min_time_and_sample_then_promotion(deployer, endpoint, candidate, pool):
    rollout = start(deployer, endpoint, candidate)
    pool_reports_ready(pool, candidate)
    rollout = services.rollout_reconcile(rollout_id=rollout.pk)
    t0 = rollout.step_started_at
    r, decision = services.rollout_apply_verdict(
        rollout_id=rollout.pk, outcome="pass", reason="ok", step_requests=500, now=t0 + timedelta(seconds=5)
    )
    assert decision.to_state is None and r.step_index == 0  # too early
    r, decision = services.rollout_apply_verdict(
        rollout_id=rollout.pk, outcome="pass", reason="ok", step_requests=10, now=t0 + timedelta(seconds=11)
    )
    assert decision.to_state is None  # too few requests
    r, _ = services.rollout_apply_verdict(
        rollout_id=rollout.pk, outcome="pass", reason="ok", step_requests=60, now=t0 + timedelta(seconds=11)
    )
    assert (r.state, r.step_index) == (State.CANARY, 1)
    assert weights()[variant_name(candidate)] == ("canary", 5000)
    t1 = r.step_started_at
    r, _ = services.rollout_apply_verdict(
        rollout_id=rollout.pk, outcome="pass", reason="ok", step_requests=60, now=t1 + timedelta(seconds=11)
    )
    r, _ = services.rollout_apply_verdict(
        rollout_id=rollout.pk,
        outcome="pass",
        reason="ok",
        step_requests=60,
        now=r.step_started_at + timedelta(seconds=11),
    )
    assert r.state == State.PROMOTING
    assert weights()[variant_name(candidate)] == ("canary", 10000)
    old_stable = endpoint.stable_artifact
    promoted_at = r.state_entered_at
    assert (
        services.rollout_reconcile(rollout_id=rollout.pk, now=promoted_at + timedelta(seconds=4)).state
        == State.PROMOTING
    )  # grace
    done = services.rollout_reconcile(rollout_id=rollout.pk, now=promoted_at + timedelta(seconds=6))
    assert done.state == State.SUCCEEDED
    assert Endpoint.objects.get(pk=endpoint.pk).stable_artifact_id == candidate.pk
    assert weights() == {variant_name(candidate): ("stable", 10000)}
    assert (
        PoolModel.objects.get(pool=pool, artifact=old_stable).state == PoolModelState.DRAINING
    )  # unload with drain asked
    trail = list(
        Event.objects.filter(object_type="deployments.rollout", action="status_changed")
        .order_by("id")
        .values_list("from_state", "to_state")
    )
    assert trail == [
        ("pending", "loading"),
        ("loading", "canary[0]"),
        ("canary[0]", "canary[1]"),
        ("canary[1]", "canary[2]"),
        ("canary[2]", "promoting"),
        ("promoting", "succeeded"),
    ]


def test_fail_sets_weight_to_zero_then_drains_and_unloads(deployer, endpoint, candidate, pool):
    rollout = start(deployer, endpoint, candidate)
    pool_reports_ready(pool, candidate)
    services.rollout_reconcile(rollout_id=rollout.pk)
    r, decision = services.rollout_apply_verdict(
        rollout_id=rollout.pk, outcome="fail", reason="error rate 6% > SLO 2%", step_requests=3
    )
    assert r.state == State.ROLLING_BACK and "error rate" in r.reason and r.traffic_stopped_at
    assert weights() == {variant_name(endpoint.stable_artifact): ("stable", 10000)}  # weight 0 first
    r = services.rollout_reconcile(rollout_id=rollout.pk)
    assert r.state == State.ROLLING_BACK
    assert PoolModel.objects.get(pool=pool, artifact=candidate).state == PoolModelState.DRAINING
    PoolModel.objects.filter(pool=pool, artifact=candidate).update(
        state=PoolModelState.UNLOADED
    )  # the unload task's report
    assert services.rollout_reconcile(rollout_id=rollout.pk).state == State.ROLLED_BACK


def test_inconclusive_until_deadline_then_policy(deployer, endpoint, candidate, pool):
    rollout = start(deployer, endpoint, candidate, on_inconclusive="pause")
    pool_reports_ready(pool, candidate)
    r = services.rollout_reconcile(rollout_id=rollout.pk)
    later = r.step_started_at + timedelta(seconds=61)
    r, _ = services.rollout_apply_verdict(
        rollout_id=rollout.pk, outcome="inconclusive", reason="not enough data", step_requests=5, now=later
    )
    assert r.state == State.PAUSED and r.paused_from == State.CANARY
    assert weights()[variant_name(candidate)] == ("canary", 500)  # a pause holds the split


def test_pause_and_resume_keep_the_step_timer(deployer, endpoint, candidate, pool):
    rollout = start(deployer, endpoint, candidate)
    pool_reports_ready(pool, candidate)
    r = services.rollout_reconcile(rollout_id=rollout.pk)
    Rollout.objects.filter(pk=r.pk).update(step_started_at=timezone.now() - timedelta(seconds=7))
    paused = services.rollout_pause(user=deployer, rollout=r)
    assert paused.state == State.PAUSED and paused.paused_step_elapsed_s == pytest.approx(7, abs=1)
    resumed = services.rollout_resume(user=deployer, rollout=paused)
    assert resumed.state == State.CANARY and resumed.step_index == 0
    assert (timezone.now() - resumed.step_started_at).total_seconds() == pytest.approx(7, abs=1)


def test_bad_requests_change_nothing(deployer, endpoint, candidate, pool, artifact_factory, team_a, team_b):
    with pytest.raises(InvalidInput):
        services.rollout_start(user=deployer, endpoint=endpoint, candidate=endpoint.stable_artifact)
    rejected = artifact_factory(team_a, status=ArtifactStatus.REJECTED)
    with pytest.raises(InvalidInput) as exc:
        services.rollout_start(user=deployer, endpoint=endpoint, candidate=rejected)
    assert exc.value.code == "artifact_not_servable"
    with pytest.raises(InvalidInput):
        start(deployer, endpoint, candidate, steps_bp=[5000, 500])
    assert not Rollout.objects.exists()
    start(deployer, endpoint, candidate)
    with pytest.raises(Conflict) as exc:
        start(deployer, endpoint, artifact_factory(team_a))
    assert exc.value.code == "rollout_in_progress"
    assert Rollout.objects.count() == 1


def test_stale_generation_and_illegal_manual_transitions_are_409(deployer, endpoint, candidate, pool):
    rollout = start(deployer, endpoint, candidate)
    with pytest.raises(Conflict) as exc:
        services.rollout_promote(user=deployer, rollout=rollout, expected_generation=rollout.generation - 1)
    assert exc.value.code == "stale_generation"
    rolled = services.rollout_rollback(user=deployer, rollout=rollout)
    with pytest.raises(Conflict) as exc:
        services.rollout_promote(user=deployer, rollout=rolled)
    assert exc.value.code == "illegal_transition"


@pytest.mark.django_db(transaction=True)
def test_concurrent_promote_and_rollback_end_in_one_consistent_state(deployer, endpoint, candidate, pool):
    if connection.vendor != "postgresql":
        pytest.skip("row locks need PostgreSQL (SQLite serializes writers anyway)")
    rollout = start(deployer, endpoint, candidate)
    pool_reports_ready(pool, candidate)
    services.rollout_reconcile(rollout_id=rollout.pk)
    barrier, errors = threading.Barrier(2), []

    def act(service):
        try:
            barrier.wait()
            service(user=deployer, rollout=Rollout.objects.get(pk=rollout.pk))
        except Conflict as exc:
            errors.append(exc.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=act, args=(s,)) for s in (services.rollout_promote, services.rollout_rollback)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = Rollout.objects.get(pk=rollout.pk)
    assert final.state in (State.PROMOTING, State.ROLLING_BACK)
    trail = list(Event.objects.filter(object_type="deployments.rollout", action="status_changed").order_by("id"))
    for before, after in zip(trail, trail[1:]):
        assert after.from_state == before.to_state  # one serial history, no lost update
    assert trail[-1].to_state == final.state and final.generation == len(trail) + 1


def test_gateway_routes_need_the_permission_and_honour_etags(deployer_api, deployer, endpoint, api_for):
    assert deployer_api.get("/api/v1/gateway/routes").status_code == 403
    # the table holds provider secrets: a superuser's implied permissions are not a grant
    root = factories.user("root-admin")
    root.is_superuser = root.is_staff = True
    root.save()
    refused = api_for(root).get("/api/v1/gateway/routes")
    assert refused.status_code == 403 and "superuser" in refused.json()["detail"]
    by_group = factories.user("gateway-by-group")
    group = Group.objects.create(name="gateways")
    group.permissions.add(Permission.objects.get(codename="read_routes"))
    by_group.groups.add(group)
    assert api_for(by_group).get("/api/v1/gateway/routes").status_code == 200
    gateway = factories.user("gateway-svc")
    gateway.user_permissions.add(Permission.objects.get(codename="read_routes"))
    client = api_for(gateway)
    first = client.get("/api/v1/gateway/routes")
    assert first.status_code == 200 and first.json()["endpoints"][0]["name"] == "ctr"
    etag = first["ETag"]
    assert client.get("/api/v1/gateway/routes", HTTP_IF_NONE_MATCH=etag).status_code == 304
    endpoint_services.endpoint_update(user=deployer, endpoint=endpoint, timeout_ms=250)
    changed = client.get("/api/v1/gateway/routes", HTTP_IF_NONE_MATCH=etag)
    assert (
        changed.status_code == 200 and changed["ETag"] != etag and changed.json()["endpoints"][0]["timeout_ms"] == 250
    )


def test_route_table_matches_the_gateway_schema(deployer, endpoint, candidate, pool):
    import json
    from pathlib import Path

    import jsonschema

    start(deployer, endpoint, candidate, shadow_seconds=30)
    pool_reports_ready(pool, candidate)
    services.rollout_reconcile(rollout_id=Rollout.objects.get().pk)
    schema = json.loads(
        (Path(__file__).resolve().parents[2] / "gateway" / "contracts" / "route_table.schema.json").read_text()
    )
    table = route_table()
    jsonschema.validate(table, schema)
    entry = table["endpoints"][0]
    assert entry["shadow_sample_rate"] == 1.0 and [v["role"] for v in entry["variants"]] == ["stable", "shadow"]
    # what the gateway checks requests against: the served artifact's config.pbtxt, batch dimension first
    import math

    from gateway.table.routes import compile_table
    from harness.onnx import N_DENSE, N_SPARSE

    for v in entry["variants"]:
        signature = v["signature"]
        assert signature["max_batch_size"] > 0
        assert {i["name"]: (i["datatype"], i["shape"]) for i in signature["inputs"]} == {
            "dense": ("FP32", [-1, N_DENSE]),
            "sparse": ("INT64", [-1, N_SPARSE]),
        }
    assert entry["auth"] == {"public": False, "keys": []}  # a new endpoint is closed; its team has no keys yet
    assert entry["min_timeout_ms"] == min(endpoint.timeout_ms, math.ceil(endpoint.slo_p99_ms))  # its p99 SLO
    compiled = compile_table(table, {}).endpoints["ctr"]
    assert compiled.stable.signature is not None and not compiled.auth.public
    # each replica's gRPC port beside its HTTP URL, in the same order (the gateway's gRPC service forwards there)
    assert [(v["replicas"], v["grpc_replicas"]) for v in entry["variants"]] == [
        (["http://127.0.0.1:18000"], ["127.0.0.1:19000"])
    ] * 2
    assert compiled.stable.replicas[0][3] == "127.0.0.1:19000"


def test_route_table_leaves_out_grpc_when_a_replica_has_no_grpc_port(endpoint, pool):
    from gateway.table.routes import compile_table

    PoolReplica.objects.filter(pool=pool).update(grpc_url="")
    entry = route_table()["endpoints"][0]
    assert entry["variants"][0]["replicas"] and "grpc_replicas" not in entry["variants"][0]
    assert compile_table(route_table(), {}).endpoints[entry["name"]].stable.replicas[0][3] == ""


def test_rollout_api_and_scoping(deployer_api, bob_api, endpoint, candidate, pool):
    response = deployer_api.post(
        "/api/v1/endpoints/ctr/rollouts/", {"candidate_artifact": candidate.pk, "step_min_seconds": 5}, format="json"
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["state"] == "loading" and body["traffic"] == {
        "stable_bp": 10000,
        "candidate_bp": 0,
        "baseline_bp": 0,
        "candidate_role": "",
    }
    again = deployer_api.post("/api/v1/endpoints/ctr/rollouts/", {"candidate_artifact": candidate.pk}, format="json")
    assert again.status_code in (400, 409)
    assert deployer_api.get("/api/v1/endpoints/ctr/rollouts/").json()["count"] == 1
    assert bob_api.get("/api/v1/endpoints/ctr/").status_code == 404
    assert bob_api.get(f"/api/v1/rollouts/{body['id']}/").status_code == 404
    assert bob_api.post(f"/api/v1/rollouts/{body['id']}/rollback/", {}, format="json").status_code == 404
    stale = deployer_api.post(
        f"/api/v1/rollouts/{body['id']}/promote/", {"generation": body["generation"] - 1}, format="json"
    )
    assert stale.status_code == 409 and stale.json()["code"] == "stale_generation"
    rolled = deployer_api.post(f"/api/v1/rollouts/{body['id']}/rollback/", {"reason": "manual test"}, format="json")
    assert (
        rolled.status_code == 200
        and rolled.json()["state"] == "rolling_back"
        and rolled.json()["reason"] == "manual test"
    )
    bad = deployer_api.post("/api/v1/endpoints/", {"name": "x", "pool": "nope"}, format="json")
    assert bad.status_code == 400 and bad.json()["detail"].startswith("pool:")
