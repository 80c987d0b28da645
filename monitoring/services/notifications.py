"""Notifications: one delivery attempt of one alert round to one channel (webhook with a
Slack-style `text`, or e-mail) per row, retried with backoff by the task; and the teams'
notification channels."""

from __future__ import annotations

import http.client
import json
import time as _time

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction

from kernel.errors import Conflict, Forbidden, InvalidInput
from kernel.outbound import OutboundRefused, Unresolvable, post_json, vet_url
from monitoring import conf
from monitoring.models import Alert, ChannelKind, DeliveryStatus, NotificationDelivery, Severity
from monitoring.selectors.silences import silence_matching
from registry.models import EventAction, Role
from registry.services.events import event_record
from registry.services.teams import require_role


def alert_payload(alert: Alert) -> dict:
    """The webhook body: Slack-compatible `text` plus the alert as structured data; the
    alerts of its group it carries (raised within the group window) are listed in `grouped`."""
    where = alert.endpoint or "platform"
    rollout = f" (rollout {alert.rollout_id})" if alert.rollout_id is not None else ""
    link = alert.links.get("alert", "")
    carried = list(alert.carried.order_by("first_seen", "id")[:50])
    text = f"[{alert.severity.upper()}] {where}{rollout}: {alert.reason}" + (f" <{link}|details>" if link else "")
    if carried:
        window = conf.get("MONITORING_ALERT_GROUP_WINDOW_S")
        text += f" (+{len(carried)} more {alert.kind} on {where} within {window / 60:g} min)"
    return {
        "text": text,
        "group": {"key": alert.group_key, "window_s": conf.get("MONITORING_ALERT_GROUP_WINDOW_S")},
        "grouped": [
            {
                "id": other.pk,
                "severity": other.severity,
                "rollout_id": other.rollout_id,
                "reason": other.reason,
                "link": other.links.get("alert", ""),
            }
            for other in carried
        ],
        "alert": {
            "id": alert.pk,
            "severity": alert.severity,
            "kind": alert.kind,
            "endpoint": alert.endpoint,
            "rollout_id": alert.rollout_id,
            "reason": alert.reason,
            "status": alert.status,
            "evidence": alert.evidence,
            "links": alert.links,
            "occurrences": alert.occurrences,
            "first_seen": alert.first_seen.isoformat(),
            "last_seen": alert.last_seen.isoformat(),
        },
    }


def _send_webhook(url: str, payload: dict) -> int:
    """POST through kernel.outbound: the URL is vetted again (it may resolve elsewhere
    now), the vetted address is the one connected to, no redirect is followed and the
    response body is never read nor kept (a delivery row is no port scanner)."""
    body = json.dumps(payload, default=str).encode()
    try:
        code = post_json(url, body, timeout=conf.get("MONITORING_NOTIFY_TIMEOUT_S"))
    except Unresolvable as exc:
        raise DeliveryFailed(str(exc)) from None
    except OutboundRefused as exc:
        raise DeliveryFailed(f"refused: {exc}", final=True) from None
    except (OSError, http.client.HTTPException) as exc:
        raise DeliveryFailed(f"{type(exc).__name__}: {exc}") from None
    if 300 <= code < 400:
        raise DeliveryFailed(f"HTTP {code}: redirects are not followed", code)
    if code >= 400:
        raise DeliveryFailed(f"HTTP {code}", code)
    return code


def _send_email(address: str, alert: Alert, payload: dict) -> int:
    subject = f"[modelplane {alert.severity}] {alert.endpoint or 'platform'}: {alert.kind}"
    lines = [
        payload["text"],
        "",
        f"Reason: {alert.reason}",
        "",
        "Evidence:",
        json.dumps(alert.evidence, indent=2, default=str),
    ]
    lines += ["", *[f"{k}: {v}" for k, v in alert.links.items()]]
    try:
        send_mail(subject, "\n".join(lines), settings.DEFAULT_FROM_EMAIL, [address], fail_silently=False)
    except Exception as exc:  # every backend raises its own errors (SMTP, socket, …)
        raise DeliveryFailed(f"{type(exc).__name__}: {exc}") from None
    return 250


class DeliveryFailed(Exception):
    def __init__(self, message: str, code: int | None = None, *, final: bool = False):
        super().__init__(message)
        self.code = code
        self.final = final  # retrying cannot help (the target is refused)


def notify_backoff(attempt: int) -> float:
    """Seconds before attempt `attempt + 1`: base, 2x base, 4x base, …"""
    return conf.get("MONITORING_NOTIFY_BACKOFF_S") * (2 ** max(attempt - 1, 0))


def notification_deliver(*, alert_id: int, kind: str, target: str, notify_round: int) -> tuple[str, float]:
    """One delivery attempt of one alert round to one channel target, recorded as a row.

    Returns ("delivered"|"skipped"|"gave_up", 0) or ("retry", seconds to wait). Safe to
    run twice: a round already delivered, or out of attempts, is skipped."""
    if kind not in ChannelKind.values:
        raise InvalidInput(f"unknown channel kind {kind!r}.", field="kind")
    alert = Alert.objects.filter(pk=alert_id).first()
    if alert is None or alert.notify_round != notify_round or alert.notified_with_id is not None:
        return "skipped", 0.0  # gone, a later round, or carried by another alert's notification
    if (silence := silence_matching(alert)) is not None:  # silenced after it was queued (e.g. during its group window)
        Alert.objects.filter(pk=alert.pk).update(silenced_by=silence)
        return "skipped", 0.0
    done = NotificationDelivery.objects.filter(alert=alert, notify_round=notify_round, kind=kind, target=target)
    if done.filter(status=DeliveryStatus.DELIVERED).exists() or done.filter(status=DeliveryStatus.GAVE_UP).exists():
        return "skipped", 0.0
    attempt = done.count() + 1
    max_attempts = conf.get("MONITORING_NOTIFY_MAX_ATTEMPTS")
    if attempt > max_attempts:
        return "skipped", 0.0
    payload = alert_payload(alert)
    started = _time.monotonic()
    code, error = None, ""
    try:
        code = _send_webhook(target, payload) if kind == ChannelKind.WEBHOOK else _send_email(target, alert, payload)
        status = DeliveryStatus.DELIVERED
    except DeliveryFailed as exc:
        code, error = exc.code, str(exc)[:2000]
        status = DeliveryStatus.GAVE_UP if attempt >= max_attempts or exc.final else DeliveryStatus.FAILED
    NotificationDelivery.objects.create(
        alert=alert,
        notify_round=notify_round,
        kind=kind,
        target=target,
        attempt=attempt,
        status=status,
        response_code=code,
        error=error,
        duration_ms=(_time.monotonic() - started) * 1000,
    )
    if status == DeliveryStatus.FAILED:
        return "retry", notify_backoff(attempt)
    return ("delivered" if status == DeliveryStatus.DELIVERED else "gave_up"), 0.0


# --- channels -------------------------------------------------------------------------------------
def channel_create(*, user, team, kind: str, target: str, min_severity: str = Severity.WARNING, enabled: bool = True):
    """Add a team's webhook (http/https URL) or e-mail channel (team admins only)."""
    from django.core.exceptions import ValidationError
    from django.core.validators import EmailValidator, URLValidator

    from monitoring.models import NotificationChannel

    require_role(user=user, team=team, role=Role.ADMIN)
    target = (target or "").strip()
    try:
        if kind == ChannelKind.WEBHOOK:
            URLValidator(schemes=["http", "https"])(target)
        elif kind == ChannelKind.EMAIL:
            EmailValidator()(target)
        else:
            raise InvalidInput(f"kind must be one of {', '.join(ChannelKind.values)}.", field="kind")
    except ValidationError:
        raise InvalidInput(f"target: {target!r} is not a valid {kind} target.", field="target") from None
    if kind == ChannelKind.WEBHOOK:
        try:
            vet_url(target)
        except Unresolvable:
            pass  # nothing to judge yet; every delivery vets it again
        except OutboundRefused as exc:
            raise InvalidInput(f"target: {exc}", field="target", code="target_refused") from None
    with transaction.atomic():
        if NotificationChannel.objects.filter(team=team, kind=kind, target=target).exists():
            raise Conflict(f"Team {team.name!r} already has this {kind} channel.", code="channel_exists")
        channel = NotificationChannel.objects.create(
            team=team, kind=kind, target=target, min_severity=min_severity, enabled=enabled
        )
        event_record(
            actor=user,
            obj=channel,
            team=team,
            action=EventAction.CHANNEL_CREATED,
            data={"kind": kind, "target": target},
        )
    return channel


def channel_delete(*, user, channel) -> None:
    if channel.team is None:
        if not (user.is_staff or user.is_superuser):
            raise Forbidden("Only staff remove global channels.", code="role_required")
    else:
        require_role(user=user, team=channel.team, role=Role.ADMIN)
    with transaction.atomic():
        event_record(
            actor=user,
            obj=channel,
            team=channel.team,
            action=EventAction.CHANNEL_DELETED,
            data={"kind": channel.kind, "target": channel.target},
        )
        channel.delete()
