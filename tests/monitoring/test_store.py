"""The time-series store: samples, roll-ups, retention, the metrics API and judge windows."""

from datetime import timedelta

import numpy as np
import pytest
from django.utils import timezone

from monitoring.models import MetricRollup, MetricSample, Verdict
from monitoring.selectors import metrics as metric_selectors
from monitoring.services.canary import judge_tick
from monitoring.services.collector import metrics_collect
from monitoring.services.store import retention_sweep, rollups_refresh, samples_store

pytestmark = pytest.mark.django_db
METRICS = "/api/v1/metrics/"


def _store(team=None, endpoint="ctr", variant="stable", metric="request_rate", values=(1.0,), start=None, step_s=2):
    start = start or timezone.now() - timedelta(seconds=step_s * len(values))
    for i, value in enumerate(values):
        samples_store(
            rows=[(endpoint, variant, metric, value)],
            at=start + timedelta(seconds=step_s * i),
            team_ids={endpoint: team.pk} if team else None,
        )
    return start


def test_rollups_aggregate_whole_minutes_and_are_idempotent(team_a):
    now = timezone.now().replace(second=30, microsecond=0)
    minute = now.replace(second=0) - timedelta(minutes=1)
    _store(team_a, values=[1.0, 2.0, 3.0, 6.0], start=minute + timedelta(seconds=5), step_s=10)
    _store(team_a, values=[100.0], start=now.replace(second=0) + timedelta(seconds=1))  # current minute: not yet
    assert rollups_refresh(now=now) == 1
    assert rollups_refresh(now=now) == 1  # again: same row, not a second one
    rollup = MetricRollup.objects.get()
    assert (rollup.minute, rollup.count, rollup.total, rollup.minimum, rollup.maximum) == (minute, 4, 12.0, 1.0, 6.0)
    assert rollup.mean == 3.0 and rollup.team_id == team_a.pk


def test_retention_deletes_only_what_is_past_its_age(team_a, settings):
    settings.MONITORING_RAW_RETENTION_HOURS = 1
    settings.MONITORING_ROLLUP_RETENTION_DAYS = 2
    now = timezone.now()
    _store(team_a, values=[1.0], start=now - timedelta(hours=2))
    _store(team_a, values=[2.0], start=now - timedelta(minutes=30))
    for days, value in ((3, 1.0), (1, 2.0)):
        MetricRollup.objects.create(
            endpoint="ctr",
            variant="stable",
            metric="m",
            minute=now - timedelta(days=days),
            count=1,
            total=value,
            minimum=value,
            maximum=value,
        )
    Verdict.objects.create(
        rollout_id=1,
        endpoint="ctr",
        stable_variant="s",
        candidate_variant="c",
        outcome="pass",
        window_start=now,
        window_end=now,
    )
    Verdict.objects.filter().update(created_at=now - timedelta(days=3))
    assert retention_sweep(now=now) == {"samples": 1, "rollups": 1, "verdicts": 1, "scrape_states": 0}
    assert list(MetricSample.objects.values_list("value", flat=True)) == [2.0]
    assert list(MetricRollup.objects.values_list("total", flat=True)) == [2.0]


def test_metrics_api_is_team_scoped_and_staff_sees_all(alice_api, bob_api, api_for, staff, team_a, team_b):
    _store(team_a, endpoint="ctr-a", values=[1.0, 2.0, 3.0])
    _store(team_b, endpoint="ctr-b", values=[9.0])
    _store(None, endpoint="platform", values=[5.0])
    response = alice_api.get(METRICS, {"metric": "request_rate", "since": "10m"})
    assert response.status_code == 200, response.content
    series = response.json()["series"]
    assert [(s["endpoint"], s["variant"], s["metric"]) for s in series] == [("ctr-a", "stable", "request_rate")]
    assert [p["value"] for p in series[0]["points"]] == [1.0, 2.0, 3.0]
    assert bob_api.get(METRICS, {"endpoint": "ctr-a"}).json()["series"] == []
    everything = api_for(staff).get(METRICS, {"metric": "request_rate", "since": "10m"}).json()["series"]
    assert {s["endpoint"] for s in everything} == {"ctr-a", "ctr-b", "platform"}


def test_metrics_api_filters_and_rejects_bad_input(alice_api, team_a):
    old = timezone.now() - timedelta(minutes=40)
    _store(team_a, metric="error_rate", values=[0.5], start=old)
    _store(team_a, metric="error_rate", values=[0.1])
    _store(team_a, variant="canary", metric="latency_p99_ms", values=[12.0])
    body = alice_api.get(METRICS, {"endpoint": "ctr", "metric": "error_rate,latency_p99_ms", "since": "15m"}).json()
    assert sorted((s["variant"], s["metric"], len(s["points"])) for s in body["series"]) == [
        ("canary", "latency_p99_ms", 1),
        ("stable", "error_rate", 1),
    ]
    iso = (old - timedelta(minutes=1)).isoformat()
    body = alice_api.get(METRICS, {"endpoint": "ctr", "variant": "stable", "metric": "error_rate", "since": iso}).json()
    assert [p["value"] for p in body["series"][0]["points"]] == [0.5, 0.1]

    for params, field in (
        ({"since": "15m"}, "endpoint"),
        ({"endpoint": "ctr", "since": "yesterday"}, "since"),
        ({"endpoint": "ctr", "since": "40d"}, "since"),
        ({"endpoint": "c t r"}, "endpoint"),
        ({"endpoint": "ctr", "since": "1h", "until": "2h"}, "until"),
    ):
        response = alice_api.get(METRICS, params)
        assert response.status_code == 400, params
        assert set(response.json()) >= {"detail", "code"} and field in response.json()["detail"], response.json()


def test_metrics_api_serves_rollups_for_old_windows(alice_api, team_a, settings):
    settings.MONITORING_RAW_RETENTION_HOURS = 1
    minute = (timezone.now() - timedelta(hours=3)).replace(second=0, microsecond=0)
    MetricRollup.objects.create(
        endpoint="ctr",
        variant="stable",
        metric="request_rate",
        minute=minute,
        count=30,
        total=3000.0,
        minimum=90.0,
        maximum=110.0,
        team=team_a,
    )
    body = alice_api.get(METRICS, {"endpoint": "ctr", "since": "4h"}).json()
    assert body["series"][0]["resolution"] == "1m"
    assert body["series"][0]["points"][0]["value"] == 100.0


def test_metrics_api_query_count_is_pinned(alice_api, team_a, django_assert_max_num_queries):
    for variant in ("stable", "canary", "shadow"):
        for metric in ("request_rate", "error_rate", "latency_p99_ms"):
            _store(team_a, variant=variant, metric=metric, values=[1.0, 2.0])
    with django_assert_max_num_queries(6):
        response = alice_api.get(METRICS, {"endpoint": "ctr"})
    assert len(response.json()["series"]) == 9


def test_judge_tick_reads_the_store_and_records_the_verdict(team_a):
    """Stored per-tick counts and latency buckets of a candidate erroring 6 % vs 1 %."""
    rng = np.random.default_rng(3)
    start = timezone.now() - timedelta(seconds=200)
    for tick in range(100):
        at = start + timedelta(seconds=2 * tick)
        rows = []
        for variant, n_mean, p in (("stable", 300, 0.01), ("canary", 100, 0.06)):
            n = int(rng.poisson(n_mean))
            rows += [
                ("ctr", variant, "requests", n),
                ("ctr", variant, "errors", int(rng.binomial(n, p))),
                ("ctr", variant, "latency_bucket:0.003", n * 0.6),
                ("ctr", variant, "latency_bucket:0.005", n * 0.4),
            ]
        samples_store(rows=rows, at=at, team_ids={"ctr": team_a.pk})
    stable, canary = metric_selectors.judge_window(
        endpoint="ctr", stable_variant="stable", candidate_variant="canary", since=start
    )
    assert len(stable.ticks) == len(canary.ticks) == 100
    assert sum(canary.latency_buckets.values()) == pytest.approx(canary.requests)
    # latency per tick too, aligned with the request counts (the p99 guardrail's disjoint windows)
    assert len(canary.latency_ticks) == 100
    assert sum(canary.latency_ticks[5].values()) == pytest.approx(canary.ticks[5][0])
    verdict = judge_tick(
        rollout_id=7,
        endpoint="ctr",
        stable_variant="stable",
        candidate_variant="canary",
        since=start,
        step=1,
        team=team_a,
    )
    assert verdict.outcome == "fail"
    assert Verdict.objects.filter(rollout_id=7).count() == 1
    error = next(c for c in verdict.checks if c["name"] == "error_rate")
    assert error["e_value"] >= 20 and error["samples"]["candidate"] == canary.requests


def test_verdicts_api_is_scoped(alice_api, bob_api, team_a):
    Verdict.objects.create(
        rollout_id=3,
        endpoint="ctr",
        stable_variant="s",
        candidate_variant="c",
        outcome="pass",
        checks=[{"name": "error_rate", "outcome": "pass"}],
        window_start=timezone.now(),
        window_end=timezone.now(),
        team=team_a,
    )
    assert alice_api.get("/api/v1/verdicts/", {"rollout": 3}).json()["count"] == 1
    assert alice_api.get("/api/v1/verdicts/", {"rollout": 4}).json()["count"] == 0
    assert bob_api.get("/api/v1/verdicts/").json()["count"] == 0
    assert alice_api.get("/api/v1/verdicts/", {"rollout": "x"}).status_code == 400


def test_score_samples_api_is_for_platform_components(alice_api, api_for, staff, team_a):
    payload = {"endpoint": "ctr", "variant": "canary", "scores": [0.05, 0.15, 0.15, 0.95], "team": team_a.name}
    assert alice_api.post("/api/v1/score-samples/", payload, format="json").status_code == 403
    response = api_for(staff).post("/api/v1/score-samples/", payload, format="json")
    assert response.status_code == 201 and response.json()["bins"] == [1, 2, 0, 0, 0, 0, 0, 0, 0, 1]
    bins = metric_selectors.score_distribution(
        user=staff, endpoint="ctr", variant="canary", since=timezone.now() - timedelta(minutes=1)
    )
    assert bins == [1, 2, 0, 0, 0, 0, 0, 0, 0, 1]
    bad = api_for(staff).post("/api/v1/score-samples/", {**payload, "scores": []}, format="json")
    assert bad.status_code == 400 and "scores" in bad.json()["detail"]


def test_collector_records_an_unparseable_target_and_keeps_going(gateway_server, team_a):
    from monitoring.collection.targets import ScrapeTarget
    from monitoring.models import ScrapeState

    class Garbage:
        def text(self):
            return 'gateway_requests_total{endpoint="ctr" 1\n'

    good = ScrapeTarget(kind="gateway", url=gateway_server.url)
    bad_server_metrics, gateway_server.metrics = gateway_server.metrics, Garbage()
    summary = metrics_collect(targets=[good])
    assert summary["failed"] == 1 and "unparseable" in summary["errors"][gateway_server.url]
    state = ScrapeState.objects.get(target=good.key)
    assert not state.ok and state.failing_since is not None
    gateway_server.metrics = bad_server_metrics
    assert metrics_collect(targets=[good])["scraped"] == 1
    state.refresh_from_db()
    assert state.ok and state.failing_since is None
