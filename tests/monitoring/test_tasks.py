"""The monitoring tasks are thin: each calls its service (loading rows by id where it
takes one); the names are a contract (beat's schedule, queued notifications). Run
in-process with Celery's `apply` against the real store and a real local HTTP server."""

from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from config.celery import app
from deployments.rollout_machine import State
from harness import factories
from monitoring import tasks
from monitoring.models import Alert, MetricRollup, MetricSample, NotificationDelivery, Verdict
from monitoring.services.alerts import alert_raise
from monitoring.services.store import samples_store

pytestmark = pytest.mark.django_db


def test_the_task_names_are_registered():
    app.loader.import_default_modules()
    names = [
        t.name for t in (tasks.collect, tasks.rollup, tasks.retention, tasks.deliver_notification, tasks.canary_tick)
    ]
    assert names == [
        "monitoring.collect",
        "monitoring.rollup",
        "monitoring.retention",
        "monitoring.deliver_notification",
        "monitoring.canary_tick",
    ]
    assert set(names) <= set(app.tasks)


def test_collect_task_scrapes_the_configured_targets_into_the_store(gateway_server, settings):
    settings.MONITORING_TARGET_SOURCES = ["monitoring.collection.targets.targets_from_settings"]
    settings.MONITORING_TARGETS = [{"kind": "gateway", "url": gateway_server.url}]
    assert tasks.collect.apply().get()["scraped"] == 1  # the first scrape only records counters
    gateway_server.metrics.serve("ctr", "v1", [0.004] * 20, [200] * 19 + [500])
    summary = tasks.collect.apply().get()
    assert summary["scraped"] == 1 and summary["samples"] > 0
    errors = MetricSample.objects.get(endpoint="ctr", variant="v1", metric="errors")
    assert errors.value == 1.0


def test_rollup_and_retention_tasks_keep_the_store_in_shape(team_a, settings):
    settings.MONITORING_RAW_RETENTION_HOURS = 1
    old = timezone.now() - timedelta(hours=2)
    samples_store(rows=[("ctr", "v1", "request_rate", 5.0)], at=old, team_ids={"ctr": team_a.pk})
    samples_store(
        rows=[("ctr", "v1", "request_rate", 7.0)], at=timezone.now() - timedelta(minutes=2), team_ids={"ctr": team_a.pk}
    )
    assert tasks.rollup.apply().get() >= 1
    assert MetricRollup.objects.filter(endpoint="ctr", metric="request_rate").exists()
    assert tasks.retention.apply().get()["samples"] == 1
    assert list(MetricSample.objects.values_list("value", flat=True)) == [7.0]


def test_deliver_notification_task_delivers_one_round_once(team_a, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    alert, _ = alert_raise(
        kind="rollout_rolled_back", reason="ctr: candidate rolled back", team=team_a, endpoint="ctr", rollout_id=1
    )
    args = (alert.pk, "email", "oncall@example.test", alert.notify_round)
    assert tasks.deliver_notification.apply(args=args).get() == "delivered"
    assert tasks.deliver_notification.apply(args=args).get() == "skipped"  # delivered already: not twice
    assert len(mail.outbox) == 1 and NotificationDelivery.objects.filter(alert=alert).count() == 1


def test_canary_tick_task_judges_each_rollout_with_traffic(team_a, artifact_factory):
    pool = factories.pool(team_a, "cpu-pool", ready_replicas=1)
    endpoint = factories.endpoint(pool, artifact_factory(team_a), name="ctr")
    now = timezone.now()
    rollout = factories.rollout(
        endpoint,
        artifact_factory(team_a),
        state=State.CANARY,
        steps_bp=[500, 10_000],
        state_entered_at=now,
        step_started_at=now,
        traffic_started_at=now,
    )
    assert tasks.canary_tick.apply().get() == 1
    verdict = Verdict.objects.get(rollout_id=rollout.pk)
    assert verdict.outcome == "inconclusive"  # no samples yet: the judge waits
    rollout.refresh_from_db()
    assert rollout.state == State.CANARY and not Alert.objects.exists()
