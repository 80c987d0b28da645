"""Reads shared by the API, the dashboard and the canary judge: one time-series store."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.db.models import Count, Max, Min, Q, QuerySet, Sum
from django.utils import timezone

from config.errors import NotFound
from monitoring import conf
from monitoring.collect import UNKNOWN_ENDPOINT, parse_bucket_metric
from monitoring.judge import ArmWindow
from monitoring.models import Alert, AlertStatus, MetricRollup, MetricSample, NotificationChannel, NotificationDelivery, Verdict
from monitoring.statistics import SCORE_BINS
from registry.selectors.teams import team_scoped

MAX_POINTS = 2000  # per series; past this the 1-minute roll-ups answer


# --- time series ---------------------------------------------------------------------------------
def sample_list(*, user, endpoint: str | None = None, variant: str | None = None, metrics=None,
                since: datetime | None = None, until: datetime | None = None) -> QuerySet:
    qs = team_scoped(MetricSample.objects.all(), user)
    if endpoint:
        qs = qs.filter(endpoint=endpoint)
    if variant:
        qs = qs.filter(variant=variant)
    if metrics:
        qs = qs.filter(metric__in=list(metrics))
    if since:
        qs = qs.filter(time__gte=since)
    if until:
        qs = qs.filter(time__lte=until)
    return qs


def rollup_list(*, user, endpoint=None, variant=None, metrics=None, since=None, until=None) -> QuerySet:
    qs = team_scoped(MetricRollup.objects.all(), user)
    if endpoint:
        qs = qs.filter(endpoint=endpoint)
    if variant:
        qs = qs.filter(variant=variant)
    if metrics:
        qs = qs.filter(metric__in=list(metrics))
    if since:
        qs = qs.filter(minute__gte=since.replace(second=0, microsecond=0))
    if until:
        qs = qs.filter(minute__lte=until)
    return qs


def metric_series(*, user, endpoint: str | None = None, variant: str | None = None, metrics=None,
                  since: datetime, until: datetime | None = None, resolution: str = "auto") -> list[dict]:
    """Series of (time, value) points per endpoint x variant x metric, oldest first.

    `resolution`: "raw" (every sample), "1m" (roll-up means) or "auto": raw when the
    window lies inside raw retention and has at most MAX_POINTS per series.
    """
    now = timezone.now()
    raw_from = now - timedelta(hours=conf.get("MONITORING_RAW_RETENTION_HOURS"))
    filters = dict(endpoint=endpoint, variant=variant, metrics=metrics, since=since, until=until)
    if resolution == "auto":
        resolution = "raw"
        if since < raw_from:
            resolution = "1m"
        else:
            busiest = (sample_list(user=user, **filters).values("endpoint", "variant", "metric")
                       .annotate(n=Count("id")).order_by("-n").values_list("n", flat=True).first())
            if busiest and busiest > MAX_POINTS:
                resolution = "1m"
    grouped: dict[tuple, list] = defaultdict(list)
    if resolution == "raw":
        rows = (sample_list(user=user, **filters).order_by("endpoint", "variant", "metric", "time")
                .values_list("endpoint", "variant", "metric", "time", "value"))
        for ep, var, metric, time, value in rows:
            grouped[(ep, var, metric)].append((time, value))
    else:
        rows = (rollup_list(user=user, **filters).order_by("endpoint", "variant", "metric", "minute")
                .values_list("endpoint", "variant", "metric", "minute", "total", "count"))
        for ep, var, metric, minute, total, count in rows:
            grouped[(ep, var, metric)].append((minute, total / count if count else 0.0))
    return [
        {"endpoint": ep, "variant": var, "metric": metric, "resolution": resolution,
         "points": [{"time": t, "value": v} for t, v in points[-MAX_POINTS:]]}
        for (ep, var, metric), points in grouped.items()
    ]


def series_index(*, user, since: datetime) -> list[dict]:
    """Endpoints with the variants that reported samples since `since`. Only real
    endpoints: requests to endpoints that do not exist are one bucket (unknown_traffic)."""
    rows = (sample_list(user=user, since=since, metrics=["request_rate", "triton_inference_rate"])
            .exclude(endpoint=UNKNOWN_ENDPOINT).values("endpoint", "variant").annotate(last=Max("time")).order_by("endpoint", "variant"))
    endpoints: dict[str, dict] = {}
    for row in rows:
        entry = endpoints.setdefault(row["endpoint"], {"endpoint": row["endpoint"], "variants": [], "last": row["last"]})
        entry["variants"].append(row["variant"])
        entry["last"] = max(entry["last"], row["last"])
    return list(endpoints.values())


def unknown_traffic(*, user, since: datetime) -> dict | None:
    """Requests to endpoints that do not exist, as one bucket: their mean rate and total
    count over the window (staff only: such requests belong to no team); None if none."""
    # a 404 is the client's fault (client_faults); a 503 before any route table, requests
    qs = sample_list(user=user, endpoint=UNKNOWN_ENDPOINT, metrics=["requests", "client_faults"], since=since)
    total = qs.order_by().aggregate(n=Sum("value"))["n"]
    if not total:
        return None
    seconds = max((timezone.now() - since).total_seconds(), 1.0)
    return {"requests": int(total), "rate": total / seconds}


def latest_values(*, user, endpoint: str, since: datetime, metrics) -> dict[str, dict[str, float]]:
    """{variant: {metric: latest value}} over the window (the dashboard's summary row)."""
    qs = sample_list(user=user, endpoint=endpoint, metrics=metrics, since=since).order_by("variant", "metric", "-time")
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for variant, metric, value in qs.values_list("variant", "metric", "value"):
        out[variant].setdefault(metric, value)
    return dict(out)


def judge_window(*, endpoint: str, stable_variant: str, candidate_variant: str, since: datetime,
                 until: datetime | None = None) -> tuple[ArmWindow, ArmWindow]:
    """Both arms over [since, until] from the store: per-tick (requests, errors) aligned by
    scrape time, summed latency bucket counts and prediction-score bins. Internal (the
    judge acts for the platform), so not user-scoped."""
    arms = judge_arms(endpoint=endpoint, variants=[stable_variant, candidate_variant], since=since, until=until)
    return arms[stable_variant], arms[candidate_variant]


def judge_arms(*, endpoint: str, variants: list[str], since: datetime, until: datetime | None = None) -> dict[str, ArmWindow]:
    """Any number of arms over [since, until], ticks aligned by scrape time (see judge_window)."""
    variants = list(dict.fromkeys(variants))
    base = MetricSample.objects.filter(endpoint=endpoint, variant__in=variants, time__gte=since)
    if until:
        base = base.filter(time__lte=until)
    per_tick: dict[datetime, dict[str, list[float]]] = defaultdict(lambda: {v: [0.0, 0.0] for v in variants})
    for variant, metric, time, value in base.filter(metric__in=["requests", "errors"]).values_list("variant", "metric", "time", "value"):
        per_tick[time][variant][0 if metric == "requests" else 1] += value
    times = sorted(per_tick)
    arms = {v: ArmWindow(ticks=[tuple(per_tick[t][v]) for t in times]) for v in variants}
    buckets = (base.filter(metric__startswith="latency_bucket:").values("variant", "metric").annotate(n=Sum("value")))
    for row in buckets:
        _, le = parse_bucket_metric(row["metric"])
        arms[row["variant"]].latency_buckets[le] = arms[row["variant"]].latency_buckets.get(le, 0.0) + row["n"]
    scores = base.filter(metric__startswith="score_bin:").values("variant", "metric").annotate(n=Sum("value"))
    for variant in variants:
        arms[variant].score_bins = []
    for row in scores:
        arm = arms[row["variant"]]
        if not arm.score_bins:
            arm.score_bins = [0.0] * SCORE_BINS
        index = int(row["metric"].split(":", 1)[1])
        if 0 <= index < SCORE_BINS:
            arm.score_bins[index] += row["n"]
    return arms


def score_distribution(*, user, endpoint: str, variant: str, since: datetime) -> list[float]:
    rows = (sample_list(user=user, endpoint=endpoint, variant=variant, since=since)
            .filter(metric__startswith="score_bin:").values("metric").annotate(n=Sum("value")))
    bins = [0.0] * SCORE_BINS
    for row in rows:
        index = int(row["metric"].split(":", 1)[1])
        if 0 <= index < SCORE_BINS:
            bins[index] += row["n"]
    return bins


# --- verdicts ----------------------------------------------------------------------------------------
def verdict_list(*, user, rollout_id: int | None = None, endpoint: str | None = None) -> QuerySet:
    qs = team_scoped(Verdict.objects.all(), user)
    if rollout_id is not None:
        qs = qs.filter(rollout_id=rollout_id)
    if endpoint:
        qs = qs.filter(endpoint=endpoint)
    return qs


# --- alerts --------------------------------------------------------------------------------------------
def alert_list(*, user, status: str | None = None, endpoint: str | None = None, rollout_id: int | None = None) -> QuerySet:
    qs = team_scoped(Alert.objects.select_related("team", "acknowledged_by"), user)
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
    """Open (not yet acknowledged) alerts of the user's teams: the dashboard banner."""
    if not getattr(user, "is_authenticated", False):
        return Alert.objects.none()
    return alert_list(user=user, status=AlertStatus.OPEN).order_by("-last_seen", "-id")


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




def endpoint_request_rate(*, endpoint: str, window_s: float = 300.0, now: datetime | None = None) -> float | None:
    """Requests/s the endpoint served (every variant) over the last `window_s` seconds of
    stored scrapes; None when nothing was stored (internal: the forecast's input)."""
    now = now or timezone.now()
    rows = MetricSample.objects.filter(endpoint=endpoint, metric="requests", time__gt=now - timedelta(seconds=window_s), time__lte=now)
    stats = rows.aggregate(total=Sum("value"), first=Min("time"), last=Max("time"), ticks=Count("time", distinct=True))
    if not stats["total"] or not stats["ticks"]:
        return None
    span = (stats["last"] - stats["first"]).total_seconds()
    # each stored tick covers the scrape interval before it: n ticks span n intervals
    interval = span / (stats["ticks"] - 1) if stats["ticks"] > 1 else 2.0
    return float(stats["total"]) / max(span + interval, 1e-9)
