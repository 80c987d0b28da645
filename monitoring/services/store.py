"""The time-series store's writes: samples (from the collector and the gateway's score
samples), 1-minute roll-ups and retention. Every metric sample is (endpoint, variant,
metric, time, value); the dashboard, the judge and the API read the same rows."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Count, Max, Min, Sum
from django.db.models.functions import TruncMinute
from django.utils import timezone

from kernel.errors import InvalidInput
from monitoring import conf
from monitoring.judge.statistics import score_bins
from monitoring.models import MetricRollup, MetricSample, ScrapeState, Verdict


def samples_store(
    *, rows: list[tuple[str, str, str, float]], at: datetime, team_ids: dict[str, int] | None = None
) -> int:
    """Append (endpoint, variant, metric, value) rows at time `at`; returns how many."""
    team_ids = team_ids or {}
    objs = [
        MetricSample(
            endpoint=ep[:64],
            variant=var[:64],
            metric=metric[:64],
            time=at,
            value=float(value),
            team_id=team_ids.get(ep),
        )
        for ep, var, metric, value in rows
    ]
    MetricSample.objects.bulk_create(objs, batch_size=1000)
    return len(objs)


def score_samples_record(
    *, endpoint: str, variant: str, scores, team_id: int | None = None, at: datetime | None = None
) -> list[int]:
    """Store the bin counts of a sampled copy of a variant's prediction scores."""
    if not endpoint or not variant:
        raise InvalidInput("endpoint and variant are required.", field="endpoint" if not endpoint else "variant")
    try:
        values = [float(s) for s in scores]
    except (TypeError, ValueError):
        raise InvalidInput("scores must be a list of numbers.", field="scores") from None
    if not values:
        raise InvalidInput("scores must not be empty.", field="scores")
    bins = score_bins(values)
    rows = [(endpoint, variant, f"score_bin:{i}", count) for i, count in enumerate(bins) if count]
    samples_store(rows=rows, at=at or timezone.now(), team_ids={endpoint: team_id} if team_id else None)
    return bins


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
        .annotate(
            count=Count("id"), total=Sum("value"), minimum=Min("value"), maximum=Max("value"), team=Max("team_id")
        )
    )
    objs = [
        MetricRollup(
            endpoint=r["endpoint"],
            variant=r["variant"],
            metric=r["metric"],
            minute=r["minute"],
            count=r["count"],
            total=r["total"],
            minimum=r["minimum"],
            maximum=r["maximum"],
            team_id=r["team"],
        )
        for r in rows
    ]
    if objs:
        MetricRollup.objects.bulk_create(
            objs,
            batch_size=1000,
            update_conflicts=True,
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
