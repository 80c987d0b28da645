"""Alerts: raised once per rollout (or endpoint) and kind, counted when raised again,
acknowledged and resolved by people, or by the platform when what raised them is gone
(alerts_clear: a route entry built again, a gateway that accepts it); each new or reopened alert is notified on every
channel after commit (notifications.py delivers), unless a silence matches it
(services/silences.py) or an earlier alert of its group carries it.

Grouping: the group key is (team, endpoint, kind); the window is
MONITORING_ALERT_GROUP_WINDOW_S (300 s). The first alert of a group goes out at once;
alerts of the group raised within the window after it go out together as one
notification at the end of that window (the first of them carries the others, listed in
its payload); after a quiet window the next alert goes out at once again."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from kernel.errors import Conflict, Forbidden, InvalidInput
from monitoring import conf, lock_objects
from monitoring.models import Alert, AlertStatus, Severity
from monitoring.selectors import alerts as alert_selectors
from monitoring.selectors.silences import silence_matching
from monitoring.tasks import deliver_notification
from registry.models import EventAction, Role
from registry.services.events import event_record
from registry.services.teams import require_role

log = logging.getLogger(__name__)


def alert_dedupe_key(*, kind: str, rollout_id: int | None, endpoint: str) -> str:
    scope = f"rollout:{rollout_id}" if rollout_id is not None else f"endpoint:{endpoint or '-'}"
    return f"{scope}:{kind}"[:200]


def alert_raise(
    *,
    kind: str,
    reason: str,
    severity: str = Severity.WARNING,
    endpoint: str = "",
    rollout_id: int | None = None,
    team=None,
    evidence: dict | None = None,
    links: dict | None = None,
    user=None,
) -> tuple[Alert, bool]:
    """Raise an alert, deduplicated per rollout (or endpoint) and kind.

    A new alert, or a resolved one raised again, opens and is notified (returns True);
    an alert still open or acknowledged only counts the occurrence (returns False).
    Notifications are queued after the transaction commits."""
    if severity not in Severity.values:
        raise InvalidInput(f"severity must be one of {', '.join(Severity.values)}.", field="severity")
    if not kind or not reason:
        raise InvalidInput("kind and reason are required.", field="kind" if not kind else "reason")
    key = alert_dedupe_key(kind=kind, rollout_id=rollout_id, endpoint=endpoint)
    now = timezone.now()
    with transaction.atomic():
        alert = lock_objects.alert_by_key_for_update(key)
        if alert is None:
            try:
                with transaction.atomic():
                    alert = Alert.objects.create(
                        team=team,
                        severity=severity,
                        kind=kind,
                        endpoint=endpoint,
                        rollout_id=rollout_id,
                        reason=reason,
                        evidence=evidence or {},
                        links=links or {},
                        dedupe_key=key,
                        last_seen=now,
                    )
            except IntegrityError:  # a concurrent raise created it first: count the occurrence instead
                alert = lock_objects.alert_by_key_for_update(key)
                if alert is None:
                    raise
            else:
                alert.links = {**_default_links(alert), **alert.links}
                alert.save(update_fields=["links"])
                event_record(
                    actor=user,
                    obj=alert,
                    team=team,
                    action=EventAction.ALERT_RAISED,
                    to_state=AlertStatus.OPEN,
                    reason=reason,
                    data={"kind": kind, "severity": severity, "rollout_id": rollout_id},
                )
                _notify(alert, now)
                return alert, True
        alert.occurrences += 1
        alert.last_seen = now
        alert.evidence = evidence or alert.evidence
        notify = alert.status == AlertStatus.RESOLVED
        if notify:
            from_state = alert.status
            alert.status, alert.reason, alert.severity = AlertStatus.OPEN, reason, severity
            alert.notify_round += 1
            alert.acknowledged_by = alert.acknowledged_at = alert.resolved_at = None
            event_record(
                actor=user,
                obj=alert,
                team=alert.team,
                action=EventAction.ALERT_REOPENED,
                from_state=from_state,
                to_state=AlertStatus.OPEN,
                reason=reason,
            )
        alert.save()
        if notify:
            _notify(alert, now)
    return alert, notify


CLEAR_BATCH = 200  # alerts resolved per call at most (a tick's bounded batch)


def alerts_clear(*, kind: str, keep: set[str], reason: str) -> int:
    """Resolve the open and acknowledged alerts of `kind` whose endpoint is not in `keep`:
    their cause is gone (the caller just looked, the same tick that raises them). The
    platform resolves each with an audit event saying why; raised again later, it reopens
    (alert_raise). Returns how many it resolved."""
    stale = list(
        Alert.objects.filter(kind=kind)
        .exclude(status=AlertStatus.RESOLVED)
        .exclude(endpoint__in=keep)
        .values_list("pk", flat=True)[:CLEAR_BATCH]
    )
    resolved = 0
    for pk in stale:
        with transaction.atomic():
            alert = lock_objects.alert_for_update(pk)
            if alert.status == AlertStatus.RESOLVED:
                continue
            from_state = alert.status
            alert.status, alert.resolved_at = AlertStatus.RESOLVED, timezone.now()
            alert.save(update_fields=["status", "resolved_at"])
            event_record(
                actor=None,
                obj=alert,
                team=alert.team,
                action=EventAction.ALERT_RESOLVED,
                from_state=from_state,
                to_state=AlertStatus.RESOLVED,
                reason=reason,
            )
            resolved += 1
    return resolved


def _default_links(alert: Alert) -> dict:
    base = conf.public_url()
    return {"alert": f"{base}{reverse('monitoring:alert-detail', args=[alert.pk])}"}


def notification_plan(*, alert: Alert, carrier: Alert | None, now: datetime, window_s: float) -> tuple[str, datetime]:
    """Pure: how a new round of `alert` is notified, given the latest alert of its group
    that carries its own notification. ("now"|"later", when) or ("carried", when the carrier goes)."""
    if window_s <= 0 or carrier is None or carrier.notified_at is None:
        return "now", now
    if carrier.notified_at > now:  # the group's next notification is still to go: ride along
        if Severity.rank(alert.severity) > Severity.rank(carrier.severity):
            return "later", carrier.notified_at  # a graver alert reaches its own channels (min_severity)
        return "carried", carrier.notified_at
    if carrier.notified_at <= now - timedelta(seconds=window_s):
        return "now", now
    return "later", carrier.notified_at + timedelta(seconds=window_s)


def _notify(alert: Alert, now: datetime) -> str:
    """Decide and queue the notification of an alert's new round (inside the raise's
    transaction): "silenced", "carried" (by an earlier alert of its group), or "queued"."""
    silence = silence_matching(alert, now)
    if silence is not None:
        alert.silenced_by, alert.notified_at, alert.notified_with = silence, None, None
        alert.save(update_fields=["silenced_by", "notified_at", "notified_with"])
        return "silenced"
    carrier = lock_objects.group_carrier_for_update(alert)
    how, when = notification_plan(
        alert=alert, carrier=carrier, now=now, window_s=float(conf.get("MONITORING_ALERT_GROUP_WINDOW_S"))
    )
    alert.silenced_by = None
    alert.notified_with = carrier if how == "carried" else None
    alert.notified_at = None if how == "carried" else when
    alert.save(update_fields=["silenced_by", "notified_at", "notified_with"])
    if how == "carried":
        return "carried"
    delay = max(0.0, (when - now).total_seconds())
    for kind, target in alert_selectors.channels_for_alert(alert):
        args = (alert.pk, kind, target, alert.notify_round)
        transaction.on_commit(lambda args=args: _dispatch_delivery(args, delay))
    return "queued"


def _dispatch_delivery(args: tuple, countdown: float = 0.0) -> None:
    """Queue one delivery; a broker outage must not fail the change that raised the alert
    (the alert is committed and on the dashboard either way)."""
    try:
        deliver_notification.apply_async(args=args, queue="control", countdown=countdown or None)
    except Exception:  # kombu raises transport-specific errors
        log.exception("could not queue the notification of alert %s to %s:%s", args[0], args[1], args[2])


def _require_alert_role(*, user, alert: Alert) -> None:
    if alert.team is None:
        if not (user.is_staff or user.is_superuser):
            raise Forbidden("Only staff handle platform-wide alerts.", code="role_required")
        return
    require_role(user=user, team=alert.team, role=Role.DEVELOPER)


def alert_acknowledge(*, user, alert: Alert, note: str = "") -> Alert:
    """Mark an open alert acknowledged (someone is on it); the banner stops showing it."""
    _require_alert_role(user=user, alert=alert)
    with transaction.atomic():
        alert = lock_objects.alert_for_update(alert.pk)
        if alert.status != AlertStatus.OPEN:
            raise Conflict(f"The alert is {alert.status}; only open alerts can be acknowledged.", code="alert_not_open")
        alert.status, alert.acknowledged_by, alert.acknowledged_at = AlertStatus.ACKNOWLEDGED, user, timezone.now()
        alert.save(update_fields=["status", "acknowledged_by", "acknowledged_at"])
        event_record(
            actor=user,
            obj=alert,
            team=alert.team,
            action=EventAction.ALERT_ACKNOWLEDGED,
            from_state=AlertStatus.OPEN,
            to_state=AlertStatus.ACKNOWLEDGED,
            reason=note,
        )
    return alert


def alert_resolve(*, user, alert: Alert, note: str = "") -> Alert:
    _require_alert_role(user=user, alert=alert)
    with transaction.atomic():
        alert = lock_objects.alert_for_update(alert.pk)
        if alert.status == AlertStatus.RESOLVED:
            raise Conflict("The alert is already resolved.", code="alert_resolved")
        from_state = alert.status
        alert.status, alert.resolved_at = AlertStatus.RESOLVED, timezone.now()
        alert.save(update_fields=["status", "resolved_at"])
        event_record(
            actor=user,
            obj=alert,
            team=alert.team,
            action=EventAction.ALERT_RESOLVED,
            from_state=from_state,
            to_state=AlertStatus.RESOLVED,
            reason=note,
        )
    return alert


def shared_outage_alert(*, endpoint, reason: str, rollout_id: int | None = None, evidence: dict | None = None) -> bool:
    """A warning naming the pool that served both arms while it failed them both: the
    candidate is not judged on those moments (monitoring/judge/outage.py), someone should look at
    the pool. Deduplicated per rollout (or endpoint) while open; returns whether it was
    notified."""
    pool = endpoint.pool.name
    _, notified = alert_raise(
        kind="shared_outage",
        severity=Severity.WARNING,
        reason=f"{endpoint.name}: pool {pool} failed both arms — {reason}",
        endpoint=endpoint.name,
        rollout_id=rollout_id,
        team=endpoint.team,
        evidence={"pool": pool, **(evidence or {})},
    )
    return notified
