"""Reads of the metric source for pages, the API and the judge: series, latest values, arms' windows, request rates."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q, Sum
from django.utils import timezone

from monitoring.judge.evidence import ArmWindow
from monitoring.judge.statistics import SCORE_BINS, histogram_quantile
from monitoring.judge.windows import HISTOGRAMS, arms_from_rows
from monitoring.sources import MetricSource, metric_source
from monitoring.sources.store import judge_arms, sample_list


# --- time series ---------------------------------------------------------------------------------
# The dashboards' and the API's reads go to the metric source the judge reads (monitoring/
# sources: the built-in store by default, Prometheus when PROMETHEUS_URL is set), so what
# people see and what the judge decides come from the same series. `source` picks one.
def metric_series(
    *,
    user,
    endpoint: str | None = None,
    variant: str | None = None,
    metrics=None,
    since: datetime,
    until: datetime | None = None,
    resolution: str = "auto",
    source: MetricSource | None = None,
) -> list[dict]:
    """Series of (time, value) points per endpoint x variant x metric, oldest first.

    `resolution`: "raw" (every tick), "1m" (one point a minute) or "auto": raw when the
    window lies inside raw retention and has at most MAX_POINTS per series.
    """
    return (source or metric_source()).metric_series(
        user=user, endpoint=endpoint, variant=variant, metrics=metrics, since=since, until=until, resolution=resolution
    )


def series_index(*, user, since: datetime, source: MetricSource | None = None) -> list[dict]:
    """Endpoints with the variants that reported samples since `since`. Only real
    endpoints: requests to endpoints that do not exist are one bucket (unknown_traffic)."""
    return (source or metric_source()).series_index(user=user, since=since)


def unknown_traffic(*, user, since: datetime, source: MetricSource | None = None) -> dict | None:
    """Requests to endpoints that do not exist, as one bucket: their mean rate and total
    count over the window (staff only: such requests belong to no team); None if none."""
    return (source or metric_source()).unknown_traffic(user=user, since=since)


def latest_values(
    *, user, endpoint: str, since: datetime, metrics, source: MetricSource | None = None
) -> dict[str, dict[str, float]]:
    """{variant: {metric: latest value}} over the window (the dashboard's summary row)."""
    return (source or metric_source()).latest_values(user=user, endpoint=endpoint, since=since, metrics=metrics)


# The histograms the judge reads, as the table's quantile columns ({prefix}_p50_ms, {prefix}_p99_ms).
QUANTILE_HISTOGRAMS = {"latency_bucket": "latency", "ttft_bucket": "ttft", "itl_bucket": "itl"}
TABLE_QUANTILES = (("p50", 0.50), ("p99", 0.99))


def window_quantiles(
    *, user, endpoint: str, variants: list[str], since: datetime, until: datetime | None = None, source=None
) -> dict[str, dict[str, float]]:
    """{variant: {"latency_p50_ms", "latency_p99_ms", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms",
    "itl_p99_ms"}} over [since, until], as the judge computes them: the histograms' bucket
    counts summed over the window (monitoring/judge/windows.py, the judge's windows) and Prometheus'
    histogram_quantile on them (the estimate of monitoring.judge's quantiles). A verdict over
    the same window gives the same figures; one tick's own quantile (the latest value) is
    an interpolation inside the few buckets of that tick and reads as bucket edges at low
    traffic. The store sums in SQL; another source builds the judge's windows."""
    source = source or metric_source()
    if getattr(source, "name", "") == "store":
        prefixes = Q()
        for prefix in QUANTILE_HISTOGRAMS:
            prefixes |= Q(metric__startswith=f"{prefix}:")
        sums = (
            sample_list(user=user, endpoint=endpoint, since=since, until=until)
            .filter(prefixes, variant__in=variants)
            .values("variant", "metric")
            .annotate(n=Sum("value"))
            .values_list("variant", "metric", "n")
        )
        arms = arms_from_rows(((variant, metric, None, n) for variant, metric, n in sums), variants)
    else:
        arms = source.judge_arms(endpoint=endpoint, variants=variants, since=since, until=until)
    out: dict[str, dict[str, float]] = {}
    for variant, arm in arms.items():
        values = out.setdefault(variant, {})
        for prefix, column in QUANTILE_HISTOGRAMS.items():
            buckets = getattr(arm, HISTOGRAMS[prefix][0])
            for label, q in TABLE_QUANTILES:
                value = histogram_quantile(q, buckets) if buckets else None
                if value is not None:
                    values[f"{column}_{label}_ms"] = value * 1000
    return out


def judge_window(
    *, endpoint: str, stable_variant: str, candidate_variant: str, since: datetime, until: datetime | None = None
) -> tuple[ArmWindow, ArmWindow]:
    """Both arms over [since, until] from the store: per-tick (requests, errors) aligned by
    scrape time, summed latency bucket counts and prediction-score bins. Internal (the
    judge acts for the platform), so not user-scoped."""
    arms = judge_arms(endpoint=endpoint, variants=[stable_variant, candidate_variant], since=since, until=until)
    return arms[stable_variant], arms[candidate_variant]


def score_distribution(*, user, endpoint: str, variant: str, since: datetime) -> list[float]:
    rows = (
        sample_list(user=user, endpoint=endpoint, variant=variant, since=since)
        .filter(metric__startswith="score_bin:")
        .values("metric")
        .annotate(n=Sum("value"))
    )
    bins = [0.0] * SCORE_BINS
    for row in rows:
        index = int(row["metric"].split(":", 1)[1])
        if 0 <= index < SCORE_BINS:
            bins[index] += row["n"]
    return bins


# --- verdicts ----------------------------------------------------------------------------------------


def endpoint_request_rate(
    *, endpoint: str, window_s: float = 300.0, now: datetime | None = None, source: MetricSource | None = None
) -> float | None:
    """Requests/s the endpoint served (every variant) over the last `window_s` seconds;
    None when nothing was seen (internal: the forecast's input)."""
    return (source or metric_source()).endpoint_request_rate(
        endpoint=endpoint, window_s=window_s, now=now or timezone.now()
    )
