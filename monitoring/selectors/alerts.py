"""Reads of verdicts, alerts, their deliveries and notification channels, scoped to the user's teams."""

from __future__ import annotations

from django.db.models import Q, QuerySet
from django.utils import timezone

from kernel.errors import NotFound
from monitoring import conf
from monitoring.models import Alert, AlertStatus, NotificationChannel, NotificationDelivery, Verdict
from registry.selectors.teams import team_scoped


# --- time series ---------------------------------------------------------------------------------
# The dashboards' and the API's reads go to the metric source the judge reads (monitoring/
# sources: the built-in store by default, Prometheus when PROMETHEUS_URL is set), so what
# people see and what the judge decides come from the same series. `source` picks one.
def verdict_list(*, user, rollout_id: int | None = None, endpoint: str | None = None) -> QuerySet:
    qs = team_scoped(Verdict.objects.all(), user)
    if rollout_id is not None:
        qs = qs.filter(rollout_id=rollout_id)
    if endpoint:
        qs = qs.filter(endpoint=endpoint)
    return qs


def rollout_verdicts(*, user, rollout_id: int, limit: int) -> list[dict]:
    """The latest verdicts on a rollout, newest first, with each check's outcome (not its
    evidence): what a rollout's status shows (deployments.rollout_verdicts)."""
    return [
        {
            "id": v.id,
            "step": v.step,
            "outcome": v.outcome,
            "reason": v.reason,
            "checks": [
                {"name": c.get("name"), "kind": c.get("kind"), "outcome": c.get("outcome")}
                for c in (v.checks or [])
                if isinstance(c, dict)
            ],
            "created_at": v.created_at,
        }
        for v in verdict_list(user=user, rollout_id=rollout_id).order_by("-id")[:limit]
    ]


# --- alerts --------------------------------------------------------------------------------------------
def alert_list(
    *, user, status: str | None = None, endpoint: str | None = None, rollout_id: int | None = None
) -> QuerySet:
    qs = team_scoped(Alert.objects.select_related("team", "acknowledged_by", "silenced_by__created_by"), user)
    if status:
        qs = qs.filter(status=status)
    if endpoint:
        qs = qs.filter(endpoint=endpoint)
    if rollout_id is not None:
        qs = qs.filter(rollout_id=rollout_id)
    return qs


def alert_get(*, user, alert_id: int) -> Alert:
    alert = alert_list(user=user).filter(pk=alert_id).first()
    if alert is None:
        raise NotFound(f"No alert with id {alert_id}.", code="alert_not_found")
    return alert


def open_alerts(*, user) -> QuerySet:
    """Open (not yet acknowledged) alerts of the user's teams that no active silence holds:
    the dashboard banner (a silenced alert stays on the alerts page, marked)."""
    if not getattr(user, "is_authenticated", False):
        return Alert.objects.none()
    now = timezone.now()
    return (
        alert_list(user=user, status=AlertStatus.OPEN)
        .exclude(silenced_by__starts_at__lte=now, silenced_by__ends_at__gt=now)
        .order_by("-last_seen", "-id")
    )


def delivery_list(*, alert: Alert) -> QuerySet:
    return NotificationDelivery.objects.filter(alert=alert).order_by("created_at", "id")


def channel_list(*, user) -> QuerySet:
    return team_scoped(NotificationChannel.objects.select_related("team"), user)


def channels_for_alert(alert: Alert) -> list[tuple[str, str]]:
    """(kind, target) pairs that receive `alert`: the team's and global channels at or
    below its severity, then the env defaults; no duplicates."""
    from monitoring.models import Severity

    rank = Severity.rank(alert.severity)
    rows = NotificationChannel.objects.filter(enabled=True).filter(Q(team=alert.team_id) | Q(team__isnull=True))
    out: list[tuple[str, str]] = []
    for channel in rows.order_by("id"):
        if Severity.rank(channel.min_severity) <= rank:
            out.append((channel.kind, channel.target))
    out += [("webhook", url) for url in conf.get("MONITORING_ALERT_WEBHOOKS")]
    out += [("email", address) for address in conf.get("MONITORING_ALERT_EMAILS")]
    return list(dict.fromkeys(out))
