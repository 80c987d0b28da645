"""The analysis tick reads every running experiment's arm windows at once: judge_arms_many gives
each endpoint the same windows judge_arms gives it alone, each over its own start."""

from datetime import timedelta

import pytest
from django.utils import timezone

from monitoring.models import MetricSample
from monitoring.sources.store import judge_arms, judge_arms_many


@pytest.mark.django_db
def test_many_windows_read_at_once_are_each_endpoints_own():
    now = timezone.now().replace(microsecond=0)
    rows = []
    for e, endpoint in enumerate(("ep-a", "ep-b", "ep-c")):
        for t in range(12):
            at = now - timedelta(seconds=10 * t)
            for variant in ("stable", "cand"):
                rows += [
                    MetricSample(endpoint=endpoint, variant=variant, metric="requests", time=at, value=50 + t + e),
                    MetricSample(endpoint=endpoint, variant=variant, metric="errors", time=at, value=t % 3),
                    MetricSample(
                        endpoint=endpoint, variant=variant, metric="latency_bucket:0.005", time=at, value=7 + e
                    ),
                    MetricSample(endpoint=endpoint, variant=variant, metric="score_bin:3", time=at, value=t),
                ]
    rows.append(MetricSample(endpoint="ep-a", variant="other", metric="requests", time=now, value=999))
    MetricSample.objects.bulk_create(rows)
    windows = [
        ("ep-a", ["stable", "cand"], now - timedelta(seconds=35)),  # each its own start
        ("ep-b", ["stable", "cand"], now - timedelta(seconds=200)),
        ("ep-c", ["stable", "cand"], now + timedelta(seconds=5)),  # nothing yet
    ]
    many = judge_arms_many(windows=windows, until=now)
    for endpoint, variants, since in windows:
        assert many[endpoint] == judge_arms(endpoint=endpoint, variants=variants, since=since, until=now), endpoint
    assert many["ep-a"]["stable"] != many["ep-b"]["stable"]
