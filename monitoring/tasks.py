"""Celery tasks of monitoring; thin: call a service. Their beat schedule is in
config/celery.py. Each task imports its service when it runs, so that the alert service
can import `deliver_notification` to send it after commit."""

import logging

from celery import shared_task

log = logging.getLogger(__name__)


@shared_task(name="monitoring.collect", ignore_result=True, acks_late=True, soft_time_limit=10, time_limit=15)
def collect() -> dict:
    """One collector tick (bounded batch of targets); a second concurrent tick skips
    the targets this one holds."""
    from monitoring.services.collector import metrics_collect
    from monitoring.services.route_refusals import route_problems_alert

    summary = metrics_collect()
    if summary.get("outages"):  # down for long enough to alert on: something is wrong
        log.warning("metrics scrape failed for %s", {url: summary["errors"].get(url) for url in summary["outages"]})
    elif summary["failed"]:  # a target starting or restarting (make run's gateway, a replica): not news yet
        log.debug("metrics scrape failed for %s", summary["errors"])
    summary["route_degraded"] = route_problems_alert()  # the builder's own side: entries it could not build
    return summary


@shared_task(name="monitoring.rollup", ignore_result=True, acks_late=True, soft_time_limit=60, time_limit=90)
def rollup() -> int:
    from monitoring.services.store import rollups_refresh

    return rollups_refresh()


@shared_task(name="monitoring.retention", ignore_result=True, acks_late=True, soft_time_limit=120, time_limit=180)
def retention() -> dict:
    from monitoring.services.store import retention_sweep

    return retention_sweep()


@shared_task(
    name="monitoring.deliver_notification",
    bind=True,
    ignore_result=True,
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=None,
    soft_time_limit=30,
    time_limit=40,
)
def deliver_notification(self, alert_id: int, kind: str, target: str, notify_round: int) -> str:
    """Deliver one alert round to one channel; a failed attempt is recorded and retried
    with exponential backoff until MONITORING_NOTIFY_MAX_ATTEMPTS (the rows decide)."""
    from monitoring.services.notifications import notification_deliver

    outcome, wait_s = notification_deliver(alert_id=alert_id, kind=kind, target=target, notify_round=notify_round)
    if outcome == "retry":
        raise self.retry(countdown=wait_s)
    return outcome


@shared_task(name="monitoring.canary_tick", ignore_result=True, expires=10, soft_time_limit=20, time_limit=30)
def canary_tick(limit: int = 50) -> int:
    """Every ~1 s (beat): judge every rollout whose candidate has traffic, act on the verdict."""
    from monitoring.services.canary import canary_tick as tick

    return len(tick(limit=limit))
