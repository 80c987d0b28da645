"""Periodic work scaled to what is being watched (config/schedules.py): the reconcile and the
judge tick every second only while a rollout is active (or ended within ten minutes: the
judge still alerts on it), the collector every 2 s only while a rollout or an experiment is
watched; otherwise each still runs at its slow idle rate, and a watch that cannot be asked
means the full rate. Beat looks again within a second, so a rollout started while idle is
picked up at once. The pool supervisor (run_pools --steady-interval, 2 s under make run) ticks
slower only while every local pool is steady."""

import pickle
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from config.celery import app
from config.schedules import watched
from deployments.rollout_machine import State
from deployments.selectors.releases import releases_watched
from deployments.selectors.rollouts import rollouts_watched
from harness import factories

pytestmark = pytest.mark.django_db

WATCHING: list[bool] = [False]


def _watch() -> bool:
    return WATCHING[0]


def _broken() -> bool:
    raise RuntimeError("database away")


def test_the_rate_follows_the_watch():
    schedule = watched(1.0, 15.0, f"{__name__}:_watch", ask_every_s=0.0)
    ran = datetime.now(UTC) - timedelta(seconds=5)
    WATCHING[0] = False
    due, next_check = schedule.is_due(ran)
    assert not due and next_check <= 1.0  # idle: not yet (15 s), but looked at again within a second
    WATCHING[0] = True
    assert schedule.is_due(ran)[0]  # a rollout appeared: due at the full rate
    assert schedule.is_due(ran - timedelta(seconds=20))[0]


def test_a_watch_that_fails_means_the_full_rate():
    schedule = watched(1.0, 15.0, f"{__name__}:_broken", ask_every_s=0.0)
    assert schedule.is_due(datetime.now(UTC) - timedelta(seconds=2))[0]


def test_the_schedules_beat_stores_survive_pickling():
    entries = {name: e["schedule"] for name, e in app.conf.beat_schedule.items() if isinstance(e["schedule"], watched)}
    assert set(entries) == {
        "monitoring-collect",
        "deployments-rollouts-reconcile",
        "deployments-releases-reconcile",
        "monitoring-canary-tick",
    }
    for schedule in entries.values():
        copy = pickle.loads(pickle.dumps(schedule))
        assert (copy.every_s, copy.idle_s, copy.watch) == (schedule.every_s, schedule.idle_s, schedule.watch)


def test_what_the_rollout_loop_watches(team_a, artifact_factory):
    assert not rollouts_watched() and not releases_watched()
    endpoint = factories.endpoint(factories.pool(team_a, "p"), artifact_factory(team_a), name="e")
    rollout = factories.rollout(endpoint, artifact_factory(team_a), state=State.CANARY)
    assert rollouts_watched()
    rollout.state, rollout.state_entered_at = State.FAILED, timezone.now()
    rollout.save()
    assert rollouts_watched()  # the judge still alerts on a recent failure
    rollout.state_entered_at = timezone.now() - timedelta(minutes=11)
    rollout.save()
    assert not rollouts_watched()


def test_the_pool_supervisor_ticks_slower_only_while_every_pool_is_steady(team_a, artifact_factory):
    from deployments.models import PoolModel, PoolModelState
    from deployments.selectors.pools import local_pools_steady

    pool = factories.pool(team_a, "p", ready_replicas=1)
    assert local_pools_steady()
    model = PoolModel.objects.create(
        pool=pool, artifact=artifact_factory(team_a), triton_model_name="m", state=PoolModelState.LOADING
    )
    assert not local_pools_steady()  # a model loading
    model.state = PoolModelState.READY
    model.save()
    assert local_pools_steady()
    factories.replica(pool, "r1", status="down")
    assert not local_pools_steady()  # a replica down: the next tick restarts it at the full rate
