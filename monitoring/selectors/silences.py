"""Reads of silences: the user's teams' list, and the one query that says which active
silence (if any) holds an alert's notifications back (same rule as Silence.matches)."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q, QuerySet
from django.utils import timezone

from kernel.errors import InvalidInput, NotFound
from monitoring.models import Alert, Silence
from registry.selectors.teams import team_scoped

STATES = ("active", "pending", "expired")


def silence_list(*, user, state: str | None = None, now: datetime | None = None) -> QuerySet:
    now = now or timezone.now()
    qs = team_scoped(Silence.objects.select_related("team", "created_by", "expired_by"), user)
    if state == "active":
        qs = qs.filter(starts_at__lte=now, ends_at__gt=now)
    elif state == "pending":
        qs = qs.filter(starts_at__gt=now)
    elif state == "expired":
        qs = qs.filter(ends_at__lte=now)
    elif state:
        raise InvalidInput(f"state: one of {', '.join(STATES)}.", field="state")
    return qs


def silence_get(*, user, silence_id: int) -> Silence:
    silence = silence_list(user=user).filter(pk=silence_id).first()
    if silence is None:
        raise NotFound(f"No silence with id {silence_id}.", code="silence_not_found")
    return silence


def silence_state(silence: Silence, now: datetime | None = None) -> str:
    now = now or timezone.now()
    if silence.ends_at <= now:
        return "expired"
    return "active" if silence.starts_at <= now else "pending"


def silence_matching(alert: Alert, now: datetime | None = None) -> Silence | None:
    """The active silence of the alert's own team that matches it (the one ending last),
    or None. Another team's silence never matches: the team is part of the match."""
    now = now or timezone.now()
    qs = Silence.objects.filter(starts_at__lte=now, ends_at__gt=now)
    qs = qs.filter(team__isnull=True) if alert.team_id is None else qs.filter(team_id=alert.team_id)
    qs = qs.filter(
        Q(endpoint="") | Q(endpoint=alert.endpoint),
        Q(kind="") | Q(kind=alert.kind),
        Q(severity="") | Q(severity=alert.severity),
    )
    return qs.select_related("created_by").order_by("-ends_at", "-id").first()
