"""Silences (Alertmanager's): a team's developer mutes the notifications of matching
alerts for a while, saying why. Matching alerts are still raised, counted and shown
("silenced by ..."); only their notifications are held back. Create, expire and delete
each write an audit event in the same transaction."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from kernel.errors import Conflict, Forbidden, InvalidInput
from monitoring.models import Alert, AlertStatus, Severity, Silence
from registry.models import EventAction, Role
from registry.services.events import event_record
from registry.services.teams import require_role

MAX_DURATION = timedelta(days=30)  # a silence is a pause, not a way to switch an alert off for good
MAX_COMMENT = 2000
MAX_MATCHER = 64


def _require_silence_role(*, user, team) -> None:
    if team is None:
        if not (user.is_staff or user.is_superuser):
            raise Forbidden("Only staff silence platform-wide alerts.", code="role_required")
        return
    require_role(user=user, team=team, role=Role.DEVELOPER)


def _matcher(value, name: str) -> str:
    value = (value or "").strip()
    if len(value) > MAX_MATCHER:
        raise InvalidInput(f"{name}: at most {MAX_MATCHER} characters.", field=name)
    return value


def silence_create(
    *,
    user,
    team,
    comment: str,
    endpoint: str = "",
    kind: str = "",
    severity: str = "",
    starts_at: datetime | None = None,
    ends_at: datetime | None = None,
    duration: timedelta | None = None,
    now: datetime | None = None,
) -> Silence:
    """A silence of `team`'s alerts matching every non-empty matcher (exact values), from
    `starts_at` (default now) until `ends_at` or for `duration` (at most 30 days). Alerts
    of the team that match and are not resolved are marked silenced by it at once."""
    now = now or timezone.now()
    _require_silence_role(user=user, team=team)
    endpoint, kind = _matcher(endpoint, "endpoint"), _matcher(kind, "check")
    severity = (severity or "").strip()
    if severity and severity not in Severity.values:
        raise InvalidInput(f"severity: one of {', '.join(Severity.values)} (or empty for any).", field="severity")
    if not (endpoint or kind or severity):
        raise InvalidInput(
            "Give at least one matcher (endpoint, check or severity): a silence of everything hides real trouble.",
            field="endpoint",
            code="no_matcher",
        )
    comment = (comment or "").strip()
    if not comment:
        raise InvalidInput("comment: say why (what is being done about it).", field="comment")
    if len(comment) > MAX_COMMENT:
        raise InvalidInput(f"comment: at most {MAX_COMMENT} characters.", field="comment")
    starts_at = starts_at or now
    if abs(starts_at - now) > MAX_DURATION:
        raise InvalidInput("starts_at: within 30 days of now.", field="starts_at")
    if ends_at is None:
        if duration is None:
            raise InvalidInput("Give ends_at or a duration.", field="ends_at")
        if not timedelta(0) < duration <= MAX_DURATION:
            raise InvalidInput("A silence lasts at most 30 days.", field="duration_s")
        ends_at = starts_at + duration
    if ends_at <= starts_at or ends_at <= now:
        raise InvalidInput("ends_at: must be after the start and in the future.", field="ends_at")
    if ends_at - starts_at > MAX_DURATION:
        raise InvalidInput("A silence lasts at most 30 days.", field="ends_at")
    with transaction.atomic():
        silence = Silence.objects.create(
            team=team,
            endpoint=endpoint,
            kind=kind,
            severity=severity,
            starts_at=starts_at,
            ends_at=ends_at,
            comment=comment,
            created_by=user,
        )
        event_record(
            actor=user,
            obj=silence,
            team=team,
            action=EventAction.CREATED,
            to_state="active" if starts_at <= now else "pending",
            reason=comment,
            data={"endpoint": endpoint, "check": kind, "severity": severity, "ends_at": ends_at.isoformat()},
        )
        if starts_at <= now:
            matching = Alert.objects.filter(team=team).exclude(status=AlertStatus.RESOLVED)
            for field, value in (("endpoint", endpoint), ("kind", kind), ("severity", severity)):
                if value:
                    matching = matching.filter(**{field: value})
            matching.update(silenced_by=silence)
    return silence


def silence_expire(*, user, silence: Silence, now: datetime | None = None) -> Silence:
    """End a silence now: matching alerts raised from now on are notified again."""
    now = now or timezone.now()
    _require_silence_role(user=user, team=silence.team)
    with transaction.atomic():
        silence = Silence.objects.select_for_update().get(pk=silence.pk)
        if silence.ends_at <= now:
            raise Conflict(f"Silence #{silence.pk} has already expired.", code="silence_expired")
        from_state = "active" if silence.starts_at <= now else "pending"
        silence.starts_at = min(silence.starts_at, now - timedelta(microseconds=1))
        silence.ends_at, silence.expired_by = now, user
        silence.save(update_fields=["starts_at", "ends_at", "expired_by"])
        event_record(
            actor=user,
            obj=silence,
            team=silence.team,
            action=EventAction.STATUS_CHANGED,
            from_state=from_state,
            to_state="expired",
            reason=f"expired by {user}",
        )
    return silence


def silence_delete(*, user, silence: Silence) -> None:
    """Remove a silence (the audit trail keeps what it was); alerts it silenced keep no link."""
    _require_silence_role(user=user, team=silence.team)
    with transaction.atomic():
        event_record(
            actor=user,
            obj=silence,
            team=silence.team,
            action=EventAction.DELETED,
            data={
                "endpoint": silence.endpoint,
                "check": silence.kind,
                "severity": silence.severity,
                "comment": silence.comment,
            },
        )
        silence.delete()
