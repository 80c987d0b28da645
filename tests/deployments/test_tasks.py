"""The deployments tasks are thin: each loads its row by id and calls its service; the
names are a contract (beat's schedule and queued messages name them). Run in-process
with Celery's `apply` on local pools whose replicas never start (no processes)."""

import pytest
from django.utils import timezone

from config.celery import app
from deployments import tasks
from deployments.models import PoolModel, PoolModelState, PoolStatus, ServingPool
from deployments.rollout_machine import State
from deployments.services import pools
from harness import factories
from registry.models import Event

pytestmark = pytest.mark.django_db


def test_the_task_names_are_registered():
    app.loader.import_default_modules()
    assert {
        "deployments.pool_reconcile",
        "deployments.pool_model_load",
        "deployments.pool_model_unload",
        "deployments.pool_teardown",
        "deployments.rollouts_reconcile",
    } <= set(app.tasks)
    assert [
        t.name
        for t in (
            tasks.pool_reconcile_task,
            tasks.pool_model_load_task,
            tasks.pool_model_unload_task,
            tasks.pool_teardown_task,
            tasks.rollouts_reconcile,
        )
    ] == [
        "deployments.pool_reconcile",
        "deployments.pool_model_load",
        "deployments.pool_model_unload",
        "deployments.pool_teardown",
        "deployments.rollouts_reconcile",
    ]


def test_pool_reconcile_task_records_what_the_driver_says(deployer, team_a, monkeypatch, tmp_path):
    pool = pools.pool_create(user=deployer, name="nobin", team=team_a, replicas=1)
    monkeypatch.setenv("TRITONSERVER_BIN", str(tmp_path / "gone" / "tritonserver"))
    tasks.pool_reconcile_task.apply(args=(pool.pk,)).get()
    pool.refresh_from_db()
    assert pool.status == PoolStatus.FAILED and "TRITONSERVER_BIN" in pool.status_reason
    tasks.pool_reconcile_task.apply(args=(pool.pk,)).get()  # twice: nothing new recorded
    assert Event.objects.filter(object_id=str(pool.pk), action="status_changed").count() == 1


def test_pool_reconcile_task_for_a_pool_that_is_gone_does_nothing():
    assert tasks.pool_reconcile_task.apply(args=(987654,)).successful()


def test_model_load_and_unload_tasks_move_the_model_through_its_states(deployer, team_a, artifact_factory):
    pool = pools.pool_create(user=deployer, name="empty", team=team_a, replicas=1)
    pool_model = pools.pool_load_request(user=deployer, pool=pool, artifact=artifact_factory(team_a))
    tasks.pool_model_load_task.apply(args=(pool_model.pk,)).get()
    pool_model.refresh_from_db()
    assert (
        pool_model.state == PoolModelState.LOADING and pool_model.error == "waiting for a ready replica"
    )  # the pool has no replica yet

    PoolModel.objects.filter(pk=pool_model.pk).update(state=PoolModelState.DRAINING)
    tasks.pool_model_unload_task.apply(args=(pool_model.pk,), kwargs={"drain_timeout_s": 5.0, "force": True}).get()
    pool_model.refresh_from_db()
    assert pool_model.state == PoolModelState.UNLOADED  # no replica serves it: drained at once
    assert Event.objects.filter(object_id=str(pool.pk), action="model_unloaded").exists()


def test_teardown_task_removes_a_deleting_pool_and_runs_twice_safely(deployer, team_a):
    pool = pools.pool_create(user=deployer, name="gone", team=team_a, replicas=0)
    pools.pool_delete(user=deployer, pool=pool)
    tasks.pool_teardown_task.apply(args=(pool.pk,)).get()
    assert not ServingPool.objects.filter(pk=pool.pk).exists()
    assert tasks.pool_teardown_task.apply(args=(pool.pk,)).successful()


def test_rollouts_reconcile_task_moves_a_loaded_candidate_to_traffic(team_a, artifact_factory):
    pool = factories.pool(team_a, "cpu-pool", ready_replicas=1)
    endpoint = factories.endpoint(pool, artifact_factory(team_a), name="ctr")
    candidate = artifact_factory(team_a)
    rollout = factories.rollout(
        endpoint, candidate, state=State.LOADING, steps_bp=[500, 10_000], state_entered_at=timezone.now()
    )
    PoolModel.objects.create(
        pool=pool,
        artifact=candidate,
        triton_model_name=candidate.triton_model_name,
        state=PoolModelState.READY,
        replica_ready={"r0": True},
    )
    assert tasks.rollouts_reconcile.apply().get() == 1
    rollout.refresh_from_db()
    assert rollout.state == State.CANARY and rollout.split.candidate_bp == 500
    assert tasks.rollouts_reconcile.apply().get() == 1  # still active: looked at again, stays in its step
    rollout.refresh_from_db()
    assert (rollout.state, rollout.step_index) == (State.CANARY, 0)
