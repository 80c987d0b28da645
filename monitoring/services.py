"""Every write of monitoring: storing samples (collector, score samples), roll-ups and
retention, canary verdicts, alerts and their notification attempts."""

from __future__ import annotations

import json
import logging
import os
import time as _time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone as dt_timezone

from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import Count, Max, Min, Sum
from django.db.models.functions import TruncMinute
from django.urls import reverse
from django.utils import timezone

from config.errors import Conflict, Forbidden, InvalidInput
from monitoring import collect, conf, lock_objects, selectors
from monitoring.judge import ArmWindow, Decision, JudgeConfig, judge
from monitoring.models import (
    Alert,
    AlertStatus,
    ChannelKind,
    DeliveryStatus,
    MetricRollup,
    MetricSample,
    NotificationDelivery,
    ScrapeState,
    Severity,
    Verdict,
)
from monitoring.targets import ScrapeTarget, scrape_targets
from registry.models import Role
from registry.services import event_record, require_role

log = logging.getLogger(__name__)
EPOCH = datetime(1970, 1, 1, tzinfo=dt_timezone.utc)


# === storing samples ===========================================================================
def samples_store(*, rows: list[tuple[str, str, str, float]], at: datetime, team_ids: dict[str, int] | None = None) -> int:
    """Append (endpoint, variant, metric, value) rows at time `at`; returns how many."""
    team_ids = team_ids or {}
    objs = [
        MetricSample(endpoint=ep[:64], variant=var[:64], metric=metric[:64], time=at, value=float(value), team_id=team_ids.get(ep))
        for ep, var, metric, value in rows
    ]
    MetricSample.objects.bulk_create(objs, batch_size=1000)
    return len(objs)


def score_samples_record(*, endpoint: str, variant: str, scores, team_id: int | None = None, at: datetime | None = None) -> list[int]:
    """Store the bin counts of a sampled copy of a variant's prediction scores."""
    if not endpoint or not variant:
        raise InvalidInput("endpoint and variant are required.", field="endpoint" if not endpoint else "variant")
    try:
        values = [float(s) for s in scores]
    except (TypeError, ValueError):
        raise InvalidInput("scores must be a list of numbers.", field="scores") from None
    if not values:
        raise InvalidInput("scores must not be empty.", field="scores")
    bins = collect.score_bins(values)
    rows = [(endpoint, variant, f"score_bin:{i}", count) for i, count in enumerate(bins) if count]
    samples_store(rows=rows, at=at or timezone.now(), team_ids={endpoint: team_id} if team_id else None)
    return bins


# === collector =====================================================================================
@dataclass
class Scrape:
    target: ScrapeTarget
    fetched_at: datetime
    text: str | None = None
    error: str = ""


def fetch_metrics(url: str, timeout: float, token: str | None = None) -> str:
    headers = {"Accept": "text/plain"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        if response.status != 200:
            raise OSError(f"HTTP {response.status}")
        return response.read().decode("utf-8", errors="replace")


def _scrape(target: ScrapeTarget, timeout: float) -> Scrape:
    try:
        # the gateway's /metrics is behind GATEWAY_METRICS_TOKEN when that is set
        token = os.environ.get("GATEWAY_METRICS_TOKEN") if target.kind == "gateway" else None
        text = fetch_metrics(target.url, timeout, token)
        return Scrape(target=target, fetched_at=timezone.now(), text=text)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return Scrape(target=target, fetched_at=timezone.now(), error=f"{type(exc).__name__}: {exc}"[:2000])


def _snapshot(target: ScrapeTarget, text: str) -> dict:
    if target.kind == "gateway":
        names = collect.GatewayNames(prefix=target.metric_prefix or conf.get("MONITORING_GATEWAY_METRIC_PREFIX"))
        return collect.gateway_snapshot(text, names)
    return collect.triton_snapshot(text)


def _deltas(target: ScrapeTarget, prev: dict, cur: dict, seconds: float):
    if target.kind == "gateway":
        names = collect.GatewayNames(prefix=target.metric_prefix or conf.get("MONITORING_GATEWAY_METRIC_PREFIX"))
        return collect.gateway_deltas(prev, cur, seconds=seconds, names=names)
    return collect.triton_deltas(prev, cur, seconds=seconds, models=target.models,
                                 cost_per_replica_hour=target.cost_per_replica_hour)


def metrics_collect(*, targets: list[ScrapeTarget] | None = None, now: datetime | None = None) -> dict:
    """One collector tick: scrape every target (bounded batch, in parallel), diff each
    against its previous scrape, add replicas up per endpoint x variant and store the
    derived metrics at one common time. A target another tick holds is skipped; the
    first scrape of a target only records its counters. Returns a summary."""
    targets = list(targets if targets is not None else scrape_targets())[: conf.get("MONITORING_SCRAPE_MAX_TARGETS")]
    summary = {"targets": len(targets), "scraped": 0, "failed": 0, "skipped": 0, "samples": 0, "errors": {}}
    if not targets:
        return summary
    timeout = conf.get("MONITORING_SCRAPE_TIMEOUT_S")
    with ThreadPoolExecutor(max_workers=min(8, len(targets))) as pool:
        scrapes = list(pool.map(lambda t: _scrape(t, timeout), targets))
    at = now or timezone.now()
    keys = [s.target.key for s in scrapes]
    ScrapeState.objects.bulk_create([ScrapeState(target=k, scraped_at=EPOCH, counters={}) for k in keys], ignore_conflicts=True)
    parts, team_ids, outages = [], {}, {}
    with transaction.atomic():
        states = lock_objects.scrape_states_for_update(keys)
        for scrape in scrapes:
            state = states.get(scrape.target.key)
            if state is None or state.scraped_at >= scrape.fetched_at:
                summary["skipped"] += 1
                continue
            current, error = None, scrape.error
            if scrape.text is not None:
                try:
                    current = _snapshot(scrape.target, scrape.text)
                except (ValueError, IndexError, KeyError) as exc:  # not (valid) Prometheus text
                    error = f"unparseable metrics: {exc}"[:2000]
            if current is None:
                summary["failed"] += 1
                summary["errors"][scrape.target.url] = error
                state.ok, state.error = False, error
                state.failing_since = state.failing_since or scrape.fetched_at
                state.save(update_fields=["ok", "error", "failing_since", "updated_at"])
                if (scrape.fetched_at - state.failing_since).total_seconds() >= conf.get("MONITORING_SCRAPE_ALERT_AFTER_S"):
                    outages[scrape.target.url] = {"error": error, "failing_since": state.failing_since.isoformat()}
                continue
            if state.scraped_at > EPOCH:
                seconds = (scrape.fetched_at - state.scraped_at).total_seconds()
                parts.append(_deltas(scrape.target, state.counters, current, seconds))
            team_ids.update(scrape.target.endpoint_teams)
            state.counters, state.scraped_at, state.ok, state.error, state.failing_since = current, scrape.fetched_at, True, "", None
            state.save(update_fields=["counters", "scraped_at", "ok", "error", "failing_since", "updated_at"])
            summary["scraped"] += 1
        rows = []
        for (endpoint, variant), totals in collect.merge(*parts).items():
            for metric, value in collect.derive(totals).items():
                rows.append((endpoint, variant, metric, value))
        summary["samples"] = samples_store(rows=rows, at=at, team_ids=team_ids)
    if outages:
        # Monitoring that cannot see is itself worth an alert: the judge would wait forever.
        alert_raise(
            kind="scrape_failed", severity=Severity.WARNING,
            reason=f"{len(outages)} metrics target(s) unreachable for over {conf.get('MONITORING_SCRAPE_ALERT_AFTER_S'):.0f} s: "
                   + ", ".join(sorted(outages))[:1500],
            evidence={"targets": outages},
        )
    return summary


# === roll-ups and retention ===========================================================================
def rollups_refresh(*, now: datetime | None = None, minutes_back: int = 3) -> int:
    """(Re)compute the 1-minute roll-ups of the last `minutes_back` whole minutes (the
    current minute is left until it is complete). Idempotent: upserts by series+minute."""
    now = now or timezone.now()
    end = now.replace(second=0, microsecond=0)
    start = end - timedelta(minutes=minutes_back)
    rows = (
        MetricSample.objects.filter(time__gte=start, time__lt=end)
        .annotate(minute=TruncMinute("time"))
        .values("endpoint", "variant", "metric", "minute")
        .annotate(count=Count("id"), total=Sum("value"), minimum=Min("value"), maximum=Max("value"), team=Max("team_id"))
    )
    objs = [
        MetricRollup(endpoint=r["endpoint"], variant=r["variant"], metric=r["metric"], minute=r["minute"],
                     count=r["count"], total=r["total"], minimum=r["minimum"], maximum=r["maximum"], team_id=r["team"])
        for r in rows
    ]
    if objs:
        MetricRollup.objects.bulk_create(
            objs, batch_size=1000, update_conflicts=True,
            unique_fields=["endpoint", "variant", "metric", "minute"],
            update_fields=["count", "total", "minimum", "maximum", "team"],
        )
    return len(objs)


def _delete_older(model, field: str, before: datetime, limit: int) -> int:
    ids = list(model.objects.filter(**{f"{field}__lt": before}).order_by(field).values_list("id", flat=True)[:limit])
    if not ids:
        return 0
    deleted, _ = model.objects.filter(id__in=ids).delete()
    return deleted


def retention_sweep(*, now: datetime | None = None) -> dict:
    """Delete raw samples past MONITORING_RAW_RETENTION_HOURS and roll-ups (and verdicts)
    past MONITORING_ROLLUP_RETENTION_DAYS, at most MONITORING_RETENTION_BATCH rows each."""
    now = now or timezone.now()
    limit = conf.get("MONITORING_RETENTION_BATCH")
    raw_before = now - timedelta(hours=conf.get("MONITORING_RAW_RETENTION_HOURS"))
    rollup_before = now - timedelta(days=conf.get("MONITORING_ROLLUP_RETENTION_DAYS"))
    return {
        "samples": _delete_older(MetricSample, "time", raw_before, limit),
        "rollups": _delete_older(MetricRollup, "minute", rollup_before, limit),
        # Verdicts are evidence: kept as long as the roll-ups. Scrape states of targets
        # that went away stop mattering once their samples are gone.
        "verdicts": _delete_older(Verdict, "created_at", rollup_before, limit),
        "scrape_states": _delete_older(ScrapeState, "updated_at", raw_before, limit),
    }


# === canary judge ======================================================================================
def judge_tick(
    *, rollout_id: int, endpoint: str, stable_variant: str, candidate_variant: str, since: datetime,
    until: datetime | None = None, step: int | None = None, config: JudgeConfig | None = None, team=None,
    latency_window: tuple[ArmWindow, ArmWindow] | None = None, compare_latency: bool = True,
) -> Verdict:
    """Judge candidate vs stable over the anchored window [since, until] from the store
    and store the verdict with its evidence. `since` must stay fixed for a rollout (the
    moment the candidate first got traffic): the error-rate e-process runs from there.
    `latency_window` (stable, candidate over the current step, while the split is
    constant) is what the latency comparisons use instead; `compare_latency=False` skips
    them (no stable traffic beside the candidate); see monitoring/judge.py."""
    if stable_variant == candidate_variant:
        raise InvalidInput("stable and candidate must be different variants.", field="candidate_variant")
    until = until or timezone.now()
    config = config or JudgeConfig(alpha=conf.get("MONITORING_JUDGE_ALPHA"), psi_threshold=conf.get("MONITORING_PSI_THRESHOLD"))
    stable, candidate = selectors.judge_window(
        endpoint=endpoint, stable_variant=stable_variant, candidate_variant=candidate_variant, since=since, until=until
    )
    decision: Decision = judge(stable, candidate, config, latency=latency_window, compare_latency=compare_latency)
    return Verdict.objects.create(
        rollout_id=rollout_id, endpoint=endpoint, step=step, stable_variant=stable_variant,
        candidate_variant=candidate_variant, outcome=decision.outcome, reason=decision.reason[:4000],
        checks=decision.checks, window_start=since, window_end=until, team=team,
    )


# === alerts ===========================================================================================
def alert_dedupe_key(*, kind: str, rollout_id: int | None, endpoint: str) -> str:
    scope = f"rollout:{rollout_id}" if rollout_id is not None else f"endpoint:{endpoint or '-'}"
    return f"{scope}:{kind}"[:200]


def alert_raise(
    *, kind: str, reason: str, severity: str = Severity.WARNING, endpoint: str = "", rollout_id: int | None = None,
    team=None, evidence: dict | None = None, links: dict | None = None, user=None,
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
                        team=team, severity=severity, kind=kind, endpoint=endpoint, rollout_id=rollout_id,
                        reason=reason, evidence=evidence or {}, links=links or {}, dedupe_key=key, last_seen=now,
                    )
            except IntegrityError:  # a concurrent raise created it first: count the occurrence instead
                alert = lock_objects.alert_by_key_for_update(key)
                if alert is None:
                    raise
            else:
                alert.links = {**_default_links(alert), **alert.links}
                alert.save(update_fields=["links"])
                event_record(actor=user, obj=alert, team=team, action="alert_raised", to_state=AlertStatus.OPEN, reason=reason,
                             data={"kind": kind, "severity": severity, "rollout_id": rollout_id})
                _queue_notifications(alert)
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
            event_record(actor=user, obj=alert, team=alert.team, action="alert_reopened", from_state=from_state,
                         to_state=AlertStatus.OPEN, reason=reason)
        alert.save()
        if notify:
            _queue_notifications(alert)
    return alert, notify


def _default_links(alert: Alert) -> dict:
    base = conf.public_url()
    return {"alert": f"{base}{reverse('monitoring:alert-detail', args=[alert.pk])}"}


def _queue_notifications(alert: Alert) -> None:
    for kind, target in selectors.channels_for_alert(alert):
        args = (alert.pk, kind, target, alert.notify_round)
        transaction.on_commit(lambda args=args: _dispatch_delivery(args))


def _dispatch_delivery(args: tuple) -> None:
    """Queue one delivery; a broker outage must not fail the change that raised the alert
    (the alert is committed and on the dashboard either way)."""
    from monitoring.tasks import deliver_notification

    try:
        deliver_notification.apply_async(args=args, queue="control")
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
        event_record(actor=user, obj=alert, team=alert.team, action="alert_acknowledged", from_state=AlertStatus.OPEN,
                     to_state=AlertStatus.ACKNOWLEDGED, reason=note)
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
        event_record(actor=user, obj=alert, team=alert.team, action="alert_resolved", from_state=from_state,
                     to_state=AlertStatus.RESOLVED, reason=note)
    return alert


# === notifications =======================================================================================
def alert_payload(alert: Alert) -> dict:
    """The webhook body: Slack-compatible `text` plus the alert as structured data."""
    where = alert.endpoint or "platform"
    rollout = f" (rollout {alert.rollout_id})" if alert.rollout_id is not None else ""
    link = alert.links.get("alert", "")
    text = f"[{alert.severity.upper()}] {where}{rollout}: {alert.reason}" + (f" <{link}|details>" if link else "")
    return {
        "text": text,
        "alert": {
            "id": alert.pk, "severity": alert.severity, "kind": alert.kind, "endpoint": alert.endpoint,
            "rollout_id": alert.rollout_id, "reason": alert.reason, "status": alert.status,
            "evidence": alert.evidence, "links": alert.links, "occurrences": alert.occurrences,
            "first_seen": alert.first_seen.isoformat(), "last_seen": alert.last_seen.isoformat(),
        },
    }


def _send_webhook(url: str, payload: dict) -> int:
    body = json.dumps(payload, default=str).encode()
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=conf.get("MONITORING_NOTIFY_TIMEOUT_S")) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        raise DeliveryFailed(f"HTTP {exc.code}: {exc.read()[:300].decode(errors='replace')}", exc.code) from None
    except (urllib.error.URLError, OSError) as exc:
        raise DeliveryFailed(f"{type(exc).__name__}: {exc}") from None


def _send_email(address: str, alert: Alert, payload: dict) -> int:
    subject = f"[modelplane {alert.severity}] {alert.endpoint or 'platform'}: {alert.kind}"
    lines = [payload["text"], "", f"Reason: {alert.reason}", "", "Evidence:", json.dumps(alert.evidence, indent=2, default=str)]
    lines += ["", *[f"{k}: {v}" for k, v in alert.links.items()]]
    try:
        send_mail(subject, "\n".join(lines), settings.DEFAULT_FROM_EMAIL, [address], fail_silently=False)
    except Exception as exc:  # every backend raises its own errors (SMTP, socket, …)
        raise DeliveryFailed(f"{type(exc).__name__}: {exc}") from None
    return 250


class DeliveryFailed(Exception):
    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.code = code


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
    if alert is None or alert.notify_round != notify_round:
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
        status = DeliveryStatus.GAVE_UP if attempt >= max_attempts else DeliveryStatus.FAILED
    NotificationDelivery.objects.create(
        alert=alert, notify_round=notify_round, kind=kind, target=target, attempt=attempt, status=status,
        response_code=code, error=error, duration_ms=(_time.monotonic() - started) * 1000,
    )
    if status == DeliveryStatus.FAILED:
        return "retry", notify_backoff(attempt)
    return ("delivered" if status == DeliveryStatus.DELIVERED else "gave_up"), 0.0


# === notification channels ================================================================================
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
    with transaction.atomic():
        if NotificationChannel.objects.filter(team=team, kind=kind, target=target).exists():
            raise Conflict(f"Team {team.name!r} already has this {kind} channel.", code="channel_exists")
        channel = NotificationChannel.objects.create(team=team, kind=kind, target=target, min_severity=min_severity, enabled=enabled)
        event_record(actor=user, obj=channel, team=team, action="channel_created", data={"kind": kind, "target": target})
    return channel


def channel_delete(*, user, channel) -> None:
    if channel.team is None:
        if not (user.is_staff or user.is_superuser):
            raise Forbidden("Only staff remove global channels.", code="role_required")
    else:
        require_role(user=user, team=channel.team, role=Role.ADMIN)
    with transaction.atomic():
        event_record(actor=user, obj=channel, team=channel.team, action="channel_deleted",
                     data={"kind": channel.kind, "target": channel.target})
        channel.delete()
