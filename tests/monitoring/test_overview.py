"""The monitoring overview people read: one time range for the whole page, units and
human titles from one place (monitoring/display/charts.py), the endpoint's SLOs for the chart
lines, and requests to endpoints that do not exist kept as one bucket, not an endpoint."""

import json
from datetime import UTC, timedelta

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest

from gateway.telemetry.metrics import UNKNOWN_ENDPOINT, HotPath
from gateway.wire.faults import CLIENT, OK
from harness import factories
from monitoring.collection import collect, gateway_samples
from monitoring.collection.collect import bucket_metric
from monitoring.display import charts
from monitoring.selectors import metrics as metric_selectors
from monitoring.services.store import samples_store

pytestmark = pytest.mark.django_db


def _web(user):
    client = Client()
    client.force_login(user)
    return client


def _chart_config(page) -> dict:
    text = page.content.decode()
    start = text.index('<script id="chart-config" type="application/json">') + len(
        '<script id="chart-config" type="application/json">'
    )
    return json.loads(text[start : text.index("</script>", start)])


def test_one_time_range_for_the_whole_page(alice, team_a):
    now = timezone.now()
    samples_store(rows=[("old", "v1", "request_rate", 5.0)], at=now - timedelta(hours=3), team_ids={"old": team_a.pk})
    samples_store(rows=[("new", "v1", "request_rate", 7.0)], at=now - timedelta(minutes=5), team_ids={"new": team_a.pk})
    web = _web(alice)
    for time_range, shown in (("15m", {"new"}), ("1h", {"new"}), ("6h", {"new", "old"}), ("24h", {"new", "old"})):
        page = web.get("/monitoring/", {"range": time_range})
        body = page.content.decode()
        assert {name for name in ("old", "new") if f'data-endpoint="{name}"' in body} == shown, time_range
        assert _chart_config(page)["range_seconds"] == charts.TIME_RANGES[time_range].total_seconds()
        assert f'hx-get="/monitoring/?range={time_range}"' in body  # the live summary keeps the range
        assert f'aria-current="true">{time_range}<' in body
    page = web.get("/monitoring/", {"range": "5y"})  # not a range: the default, not an error
    assert page.status_code == 200 and _chart_config(page)["range_seconds"] == 3600


def test_panels_have_titles_units_and_the_endpoints_slo(alice, bob, team_a, team_b):
    pool = factories.pool(team_a, name="cpu")
    factories.endpoint(pool, name="ctr", slo_p99_ms=42.0, slo_error_rate=0.005)
    factories.endpoint(factories.pool(team_b, name="other"), name="theirs", slo_p99_ms=7.0)
    now = timezone.now()
    samples_store(
        rows=[
            ("ctr", "v1", "request_rate", 150.0),
            ("ctr", "v1", "error_rate", 0.02),
            ("ctr", "v1", "latency_p99_ms", 12.5),  # the tick's own quantile: not the table's
            ("ctr", "v1", bucket_metric("latency_bucket", 0.010), 0.0),  # the lower edge of the next
            ("ctr", "v1", bucket_metric("latency_bucket", 0.020), 100.0),
        ],
        at=now,
        team_ids={"ctr": team_a.pk},
    )
    samples_store(rows=[("theirs", "v1", "request_rate", 1.0)], at=now, team_ids={"theirs": team_b.pk})
    page = _web(alice).get("/monitoring/")
    body = page.content.decode()
    config = _chart_config(page)
    panels = {p["metric"]: p for p in config["panels"]}
    assert panels["latency_p99_ms"]["unit"] == "ms" and panels["error_rate"]["unit"] == "%"
    assert panels["error_rate"]["scale"] == 100 and panels["request_rate"]["unit"] == "req/s"
    assert config["slos"] == {
        "ctr": {"error_rate": 0.5, "latency_p99_ms": 42.0}
    }  # in the panel's unit; not bob's endpoint
    assert "Latency p99 <span" in body and ">latency_p99_ms<" not in body  # a title people read, not the metric id
    assert "150.0 req/s" in body and "2.00 %" in body  # every figure with its unit
    # the p99 from the bucket counts over the range (Prometheus' histogram_quantile, as the judge)
    assert "15.00 ms" in body and "19.90 ms" in body and "12.50 ms" not in body


def test_requests_to_unknown_endpoints_are_one_bucket_not_an_endpoint(alice, staff, team_a):
    """The gateway labels them "(unknown)" (never the client's string); the collector keeps
    that label as one bucket; the page shows real endpoints only, and the bucket to staff."""
    hot = HotPath(registry=None)
    registry = CollectorRegistry()
    registry.register(hot)
    before = gateway_samples.gateway_snapshot(generate_latest(registry).decode())
    for _ in range(9):
        hot.done(UNKNOWN_ENDPOINT, "none", 404, 0.0001, CLIENT)
    hot.done("ctr", "v1", 200, 0.002, OK)
    totals = gateway_samples.gateway_deltas(
        before, gateway_samples.gateway_snapshot(generate_latest(registry).decode()), seconds=2.0
    )
    assert set(totals) == {(collect.UNKNOWN_ENDPOINT, "none"), ("ctr", "v1")}
    rows = [(ep, var, metric, value) for (ep, var), t in totals.items() for metric, value in collect.derive(t).items()]
    samples_store(rows=rows, at=timezone.now(), team_ids={"ctr": team_a.pk})

    since = timezone.now() - timedelta(minutes=15)
    assert [e["endpoint"] for e in metric_selectors.series_index(user=staff, since=since)] == ["ctr"]
    staff_page = _web(staff).get("/monitoring/").content.decode()
    assert (
        'data-endpoint="ctr"' in staff_page and UNKNOWN_ENDPOINT not in staff_page and "unknown/none" not in staff_page
    )
    assert 'id="unknown-endpoints"' in staff_page and "9 in the last 1h" in staff_page
    alice_page = _web(alice).get("/monitoring/").content.decode()
    assert 'data-endpoint="ctr"' in alice_page and 'id="unknown-endpoints"' not in alice_page  # belongs to no team


def test_gateway_and_collector_agree_on_the_unknown_label():
    assert gateway_samples.GatewayNames().unknown_endpoint == UNKNOWN_ENDPOINT
    # not a slug: no endpoint (a SlugField) can ever be called that
    from django.core.exceptions import ValidationError
    from django.core.validators import validate_slug

    with pytest.raises(ValidationError):
        validate_slug(UNKNOWN_ENDPOINT)


def test_unformatted_times_use_the_24_hour_clock_too():
    """Pages format times explicitly ("H:i:s"); the admin and any bare {{ datetime }} use the
    site's formats, which must be the same 24-hour clock (not "4:05 p.m.")."""
    from datetime import datetime

    from django.template import Context, Template

    at = datetime(2026, 11, 23, 16, 5, 9, tzinfo=UTC)
    assert (
        Template("{{ at }}|{{ at|date }}|{{ at|time }}").render(Context({"at": at}))
        == "2026-11-23 16:05:09|2026-11-23|16:05:09"
    )
