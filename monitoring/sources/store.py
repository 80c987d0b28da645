"""The built-in store as a metric source: the collector's samples in SQL (MetricSample, and
the 1-minute MetricRollup past raw retention or MAX_POINTS). What the dashboards and the
API read when PROMETHEUS_URL is not set (make run); team-scoped by the team each sample
was stored with (samples with none are staff only)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.db.models import Count, Max, Min, Q, QuerySet, Sum
from django.utils import timezone

from monitoring import conf
from monitoring.collection.collect import UNKNOWN_ENDPOINT
from monitoring.judge.evidence import ArmWindow
from monitoring.judge.windows import (
    COUNT_METRICS,
    HISTOGRAMS,
    LLM_TICK_METRICS,
    PER_TICK_COUNTS,
    TICK_METRICS,
    arms_from_rows,
)
from monitoring.models import MetricRollup, MetricSample
from registry.selectors.teams import team_scoped

MAX_POINTS = 2000  # per series; past this the 1-minute roll-ups answer


def sample_list(
    *,
    user,
    endpoint: str | None = None,
    variant: str | None = None,
    metrics=None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet:
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


def judge_arms(
    *, endpoint: str, variants: list[str], since: datetime, until: datetime | None = None
) -> dict[str, ArmWindow]:
    """Any number of arms over [since, until] from the store, ticks aligned by scrape time
    (see judge_window); monitoring/judge/windows.py turns the rows into windows."""
    variants = list(dict.fromkeys(variants))
    base = MetricSample.objects.filter(endpoint=endpoint, variant__in=variants, time__gte=since)
    if until:
        base = base.filter(time__lte=until)
    # latency buckets tick by tick (only non-empty buckets and their lower edges are stored):
    # the p99 guardrail counts the requests over the SLO in disjoint windows
    # (and on LLM endpoints their requests/errors and TTFT/ITL buckets, read the same way)
    histograms_per_tick = Q()
    for prefix in HISTOGRAMS:
        histograms_per_tick |= Q(metric__startswith=f"{prefix}:")
    ticks = base.filter(
        Q(metric__in=(*TICK_METRICS, *PER_TICK_COUNTS, *LLM_TICK_METRICS)) | histograms_per_tick
    ).values_list("variant", "metric", "time", "value")
    # score bins and counts are summed over the window by the database (their time does not matter)
    histograms = (
        base.filter(Q(metric__startswith="score_bin:") | Q(metric__in=COUNT_METRICS))
        .values("variant", "metric")
        .annotate(n=Sum("value"))
        .values_list("variant", "metric", "n")
    )
    rows = [*ticks, *((variant, metric, None, n) for variant, metric, n in histograms)]
    return arms_from_rows(rows, variants)


MANY_CHUNK = 500  # windows per pair of statements (each an OR of (endpoint, since) filters)


def judge_arms_many(
    *, windows: list[tuple[str, list[str], datetime]], until: datetime
) -> dict[str, dict[str, ArmWindow]]:
    """judge_arms for many endpoints' windows [(endpoint, variants, since)] up to `until` in two
    statements per MANY_CHUNK windows instead of two per endpoint (the analysis tick over every
    running experiment): {endpoint: {variant: ArmWindow}}, the same windows judge_arms gives."""
    histograms_per_tick = Q()
    for prefix in HISTOGRAMS:
        histograms_per_tick |= Q(metric__startswith=f"{prefix}:")
    rows: dict[str, list] = {endpoint: [] for endpoint, _, _ in windows}
    for i in range(0, len(windows), MANY_CHUNK):
        chunk = windows[i : i + MANY_CHUNK]
        each = Q()
        for endpoint, variants, since in chunk:
            each |= Q(endpoint=endpoint, variant__in=list(dict.fromkeys(variants)), time__gte=since)
        base = MetricSample.objects.filter(each, time__lte=until)
        ticks = base.filter(
            Q(metric__in=(*TICK_METRICS, *PER_TICK_COUNTS, *LLM_TICK_METRICS)) | histograms_per_tick
        ).values_list("endpoint", "variant", "metric", "time", "value")
        histograms = (
            base.filter(Q(metric__startswith="score_bin:") | Q(metric__in=COUNT_METRICS))
            .values("endpoint", "variant", "metric")
            .annotate(n=Sum("value"))
            .values_list("endpoint", "variant", "metric", "n")
        )
        for endpoint, variant, metric, at, value in ticks:
            rows[endpoint].append((variant, metric, at, value))
        for endpoint, variant, metric, n in histograms:
            rows[endpoint].append((variant, metric, None, n))
    return {endpoint: arms_from_rows(rows[endpoint], variants) for endpoint, variants, _ in windows}


class StoreSource:
    """The built-in collector's samples (the default)."""

    name = "store"

    def judge_arms(self, *, endpoint, variants, since, until=None):
        return judge_arms(endpoint=endpoint, variants=variants, since=since, until=until)

    def metric_series(
        self, *, user, endpoint=None, variant=None, metrics=None, since: datetime, until=None, resolution="auto"
    ) -> list[dict]:
        now = timezone.now()
        raw_from = now - timedelta(hours=conf.get("MONITORING_RAW_RETENTION_HOURS"))
        filters = dict(endpoint=endpoint, variant=variant, metrics=metrics, since=since, until=until)
        if resolution == "auto":
            resolution = "raw"
            if since < raw_from:
                resolution = "1m"
            else:
                busiest = (
                    sample_list(user=user, **filters)
                    .values("endpoint", "variant", "metric")
                    .annotate(n=Count("id"))
                    .order_by("-n")
                    .values_list("n", flat=True)
                    .first()
                )
                if busiest and busiest > MAX_POINTS:
                    resolution = "1m"
        grouped: dict[tuple, list] = defaultdict(list)
        if resolution == "raw":
            rows = (
                sample_list(user=user, **filters)
                .order_by("endpoint", "variant", "metric", "time")
                .values_list("endpoint", "variant", "metric", "time", "value")
            )
            for ep, var, metric, time, value in rows:
                grouped[(ep, var, metric)].append((time, value))
        else:
            rows = (
                rollup_list(user=user, **filters)
                .order_by("endpoint", "variant", "metric", "minute")
                .values_list("endpoint", "variant", "metric", "minute", "total", "count")
            )
            for ep, var, metric, minute, total, count in rows:
                grouped[(ep, var, metric)].append((minute, total / count if count else 0.0))
        return [
            {
                "endpoint": ep,
                "variant": var,
                "metric": metric,
                "resolution": resolution,
                "points": [{"time": t, "value": v} for t, v in points[-MAX_POINTS:]],
            }
            for (ep, var, metric), points in grouped.items()
        ]

    def series_index(self, *, user, since: datetime) -> list[dict]:
        rows = (
            sample_list(user=user, since=since, metrics=["request_rate", "triton_inference_rate", "llm_request_rate"])
            .exclude(endpoint=UNKNOWN_ENDPOINT)
            .values("endpoint", "variant")
            .annotate(last=Max("time"))
            .order_by("endpoint", "variant")
        )
        endpoints: dict[str, dict] = {}
        for row in rows:
            entry = endpoints.setdefault(
                row["endpoint"], {"endpoint": row["endpoint"], "variants": [], "last": row["last"]}
            )
            entry["variants"].append(row["variant"])
            entry["last"] = max(entry["last"], row["last"])
        return list(endpoints.values())

    def unknown_traffic(self, *, user, since: datetime) -> dict | None:
        # a 404 is the client's fault (client_faults); a 503 before any route table, requests
        qs = sample_list(user=user, endpoint=UNKNOWN_ENDPOINT, metrics=["requests", "client_faults"], since=since)
        total = qs.order_by().aggregate(n=Sum("value"))["n"]
        if not total:
            return None
        seconds = max((timezone.now() - since).total_seconds(), 1.0)
        return {"requests": int(total), "rate": total / seconds}

    def latest_values(self, *, user, endpoint: str, since: datetime, metrics) -> dict[str, dict[str, float]]:
        qs = sample_list(user=user, endpoint=endpoint, metrics=metrics, since=since).order_by(
            "variant", "metric", "-time"
        )
        out: dict[str, dict[str, float]] = defaultdict(dict)
        for variant, metric, value in qs.values_list("variant", "metric", "value"):
            out[variant].setdefault(metric, value)
        return dict(out)

    def endpoint_request_rate(self, *, endpoint: str, window_s: float, now: datetime) -> float | None:
        rows = MetricSample.objects.filter(  # an LLM endpoint's requests are llm_requests
            endpoint=endpoint,
            metric__in=("requests", "llm_requests"),
            time__gt=now - timedelta(seconds=window_s),
            time__lte=now,
        )
        stats = rows.aggregate(
            total=Sum("value"), first=Min("time"), last=Max("time"), ticks=Count("time", distinct=True)
        )
        if not stats["total"] or not stats["ticks"]:
            return None
        span = (stats["last"] - stats["first"]).total_seconds()
        # each stored tick covers the scrape interval before it: n ticks span n intervals
        interval = span / (stats["ticks"] - 1) if stats["ticks"] > 1 else 2.0
        return float(stats["total"]) / max(span + interval, 1e-9)
