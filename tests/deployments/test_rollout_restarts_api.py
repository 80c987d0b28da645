"""POST /rollouts/{id}/retry/ and /endpoints/{name}/undo/ refuse clearly: a developer gets
403, another team 404, a bad plan 400 naming the field, a running rollout 409; the status
view of another team's rollout is a 404 like any other."""

import pytest

from deployments.models import PoolModel, PoolModelState
from deployments.services import rollouts as rollout_services
from harness import factories
from registry.names import triton_name

pytestmark = pytest.mark.django_db


@pytest.fixture
def endpoint(team_a, artifact_factory):
    pool = factories.pool(team_a, ready_replicas=1)
    stable, candidate = artifact_factory(team_a), artifact_factory(team_a)
    return factories.endpoint(pool, stable, name="ctr"), stable, candidate


def test_retry_and_undo_refuse_with_clear_answers(endpoint, deployer, deployer_api, alice_api, bob_api):
    ep, stable, candidate = endpoint
    rollout = rollout_services.rollout_start(user=deployer, endpoint=ep, candidate=candidate, steps_bp=[5000, 10000])
    running = deployer_api.post(f"/api/v1/rollouts/{rollout.pk}/retry/", {}, format="json")
    assert running.status_code == 409 and running.json()["code"] == "not_retryable"
    assert alice_api.post(f"/api/v1/rollouts/{rollout.pk}/retry/", {}, format="json").status_code == 403
    assert bob_api.post(f"/api/v1/rollouts/{rollout.pk}/retry/", {}, format="json").status_code == 404
    assert bob_api.get(f"/api/v1/rollouts/{rollout.pk}/status/").status_code == 404
    etag = deployer_api.get(f"/api/v1/rollouts/{rollout.pk}/status/")["ETag"]
    for offered in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        assert deployer_api.get(f"/api/v1/rollouts/{rollout.pk}/status/", HTTP_IF_NONE_MATCH=offered).status_code == 304
    assert deployer_api.get(f"/api/v1/rollouts/{rollout.pk}/status/", HTTP_IF_NONE_MATCH='"other"').status_code == 200

    rollout_services.rollout_rollback(user=deployer, rollout=rollout)
    PoolModel.objects.filter(artifact=candidate).update(state=PoolModelState.UNLOADED)
    assert rollout_services.rollout_reconcile(rollout_id=rollout.pk).state == "rolled_back"
    status = deployer_api.get(f"/api/v1/rollouts/{rollout.pk}/status/").json()
    assert status["rolled_back_by"]["kind"] == "person" and status["rolled_back_by"]["actor"] == deployer.username
    retried = deployer_api.post(f"/api/v1/rollouts/{rollout.pk}/retry/", {"reason": "x" * 2001}, format="json")
    assert retried.status_code == 400 and "reason" in retried.json()["detail"]

    bad = deployer_api.post("/api/v1/endpoints/ctr/undo/", {"steps_bp": [0]}, format="json")
    assert bad.status_code == 400 and bad.json()["detail"].startswith("steps_bp")
    none = deployer_api.post("/api/v1/endpoints/ctr/undo/", {}, format="json")
    assert none.status_code == 409 and none.json()["code"] == "no_previous_stable"
    assert alice_api.post("/api/v1/endpoints/ctr/undo/", {}, format="json").status_code == 403


def test_an_undo_right_after_a_promotion_waits_for_the_replaced_stable_to_drain(endpoint, deployer, deployer_api):
    """The promotion drains the stable it replaced; an undo asked for meanwhile is a rollout that
    says it waits for the drain (not a 409), asks for the model again once it is unloaded, and
    goes on when the pool has it."""
    ep, stable, candidate = endpoint
    rollout = rollout_services.rollout_start(
        user=deployer, endpoint=ep, candidate=candidate, steps_bp=[10000], promote_grace_seconds=0
    )
    PoolModel.objects.filter(artifact=candidate).update(state=PoolModelState.READY, replica_ready={"r0": True})
    rollout_services.rollout_reconcile(rollout_id=rollout.pk)
    rollout_services.rollout_promote(user=deployer, rollout=rollout)
    assert rollout_services.rollout_reconcile(rollout_id=rollout.pk).state == "succeeded"
    replaced, _ = PoolModel.objects.update_or_create(  # what the promotion's unload marks until the drain ends
        pool=ep.pool, triton_model_name=triton_name(stable), defaults={"artifact": stable, "state": "draining"}
    )

    undo = deployer_api.post("/api/v1/endpoints/ctr/undo/", {"reason": "back"}, format="json")
    assert undo.status_code == 201, undo.json()
    undone = rollout_services.Rollout.objects.get(pk=undo.json()["id"])
    assert undone.state == "loading" and "finish draining" in undone.reason, undone.reason
    assert rollout_services.rollout_reconcile(rollout_id=undone.pk).state == "loading"  # still draining
    assert PoolModel.objects.get(pk=replaced.pk).state == PoolModelState.DRAINING

    PoolModel.objects.filter(pk=replaced.pk).update(state=PoolModelState.UNLOADED, replica_ready={})
    rollout_services.rollout_reconcile(rollout_id=undone.pk)
    assert PoolModel.objects.get(pk=replaced.pk).state == PoolModelState.LOADING  # asked for again
    PoolModel.objects.filter(pk=replaced.pk).update(state=PoolModelState.READY, replica_ready={"r0": True})
    assert rollout_services.rollout_reconcile(rollout_id=undone.pk).state == "canary"
