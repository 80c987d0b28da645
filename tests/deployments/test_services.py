"""Pool services without processes: failure states, idempotence, teardown."""

import pytest

from deployments.models import PoolModel, PoolModelState, PoolStatus, ServingPool
from deployments.services import pools, reconcile
from registry.models import Event

pytestmark = pytest.mark.django_db


def test_binary_gone_after_create_puts_the_pool_in_a_failed_state(deployer, team_a, monkeypatch, tmp_path, pools_dir):
    pool = pools.pool_create(user=deployer, name="nobin", team=team_a, replicas=1)
    monkeypatch.setenv("TRITONSERVER_BIN", str(tmp_path / "gone" / "tritonserver"))
    pool = reconcile.pool_reconcile(pool_id=pool.pk)
    assert pool.status == PoolStatus.FAILED
    assert "TRITONSERVER_BIN" in pool.status_reason and "not an executable" in pool.status_reason
    assert not pool.replica_set.exists()
    event = Event.objects.get(object_id=str(pool.pk), action="status_changed")
    assert (event.from_state, event.to_state) == (PoolStatus.PENDING, PoolStatus.FAILED)
    # a second reconcile with the same failure records nothing new
    reconcile.pool_reconcile(pool_id=pool.pk)
    assert Event.objects.filter(object_id=str(pool.pk), action="status_changed").count() == 1


def test_load_on_a_pool_without_a_ready_replica_waits_for_one(deployer, team_a, artifact_factory):
    """A pool still starting (an endpoint created with its pool): the load neither fails
    nor is forgotten; it waits, saying so, and pool_reconcile loads it once a replica is
    ready (tests/deployments/test_pool_lifecycle.py sees that with a real tritonserver)."""
    pool = pools.pool_create(user=deployer, name="empty", team=team_a, replicas=1)
    pool_model = pools.pool_load_request(user=deployer, pool=pool, artifact=artifact_factory(team_a))
    result = reconcile.pool_model_load(pool_model_id=pool_model.pk)  # no replica was ever started
    assert (result.state, result.error) == (PoolModelState.LOADING, "waiting for a ready replica")
    assert not Event.objects.filter(object_id=str(pool.pk), action="model_load_failed").exists()
    # the task running twice changes nothing
    again = reconcile.pool_model_load(pool_model_id=pool_model.pk)
    assert (again.state, again.error) == (PoolModelState.LOADING, "waiting for a ready replica")


def test_scale_to_zero_refuses_loads(deployer, team_a, artifact_factory):
    pool = pools.pool_create(user=deployer, name="zero", team=team_a, replicas=1)
    pools.pool_scale(user=deployer, pool=pool, replicas=0)
    from kernel.errors import Conflict

    with pytest.raises(Conflict) as refused:
        pools.pool_load_request(user=deployer, pool=pool, artifact=artifact_factory(team_a))
    assert refused.value.code == "no_replicas"
    assert not PoolModel.objects.exists()


def test_artifact_without_files_is_refused(deployer, team_a, artifact_factory):
    from kernel.errors import InvalidInput

    pool = pools.pool_create(user=deployer, name="nofiles", team=team_a, replicas=1)
    artifact = artifact_factory(team_a)
    artifact.path = "dirs/00/missing"
    artifact.save()
    with pytest.raises(InvalidInput) as refused:
        pools.pool_load_request(user=deployer, pool=pool, artifact=artifact)
    assert refused.value.code == "artifact_missing_files"


def test_teardown_removes_the_pool_and_its_directory(deployer, team_a, pools_dir):
    pool = pools.pool_create(user=deployer, name="gone", team=team_a, replicas=0)
    reconcile.pool_reconcile(pool_id=pool.pk)
    assert (pools_dir / "gone" / "models").is_dir()
    pools.pool_delete(user=deployer, pool=pool)
    reconcile.pool_teardown(pool_id=pool.pk)
    assert not ServingPool.objects.filter(name="gone").exists()
    assert not (pools_dir / "gone").exists()
    assert Event.objects.filter(object_id=str(pool.pk), action="deleted").exists()
