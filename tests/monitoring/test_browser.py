"""The monitoring pages in a real browser (Debian's Chromium via Playwright): the charts
draw one line per variant from /api/v1/metrics/ with units, the endpoint's SLO lines, one
shared time range and a 24-hour clock; the banner shows open alerts, and
acknowledging from the alerts page swaps the row in place (htmx)."""

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from harness import factories
from monitoring.models import Alert
from monitoring.services.alerts import alert_raise
from monitoring.services.store import samples_store
from tests.browser import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_overview_charts_banner_and_acknowledge(live_server, browser_page, alice, team_a):
    page = browser_page
    now = timezone.now()
    for tick in range(30):
        at = now - timedelta(seconds=2 * (30 - tick))
        samples_store(
            rows=[
                ("ctr", "stable", "request_rate", 190.0 + tick % 5),
                ("ctr", "canary", "request_rate", 10.0),
                ("ctr", "stable", "error_rate", 0.01),
                ("ctr", "canary", "error_rate", 0.01 + tick / 500),
                ("ctr", "stable", "latency_p99_ms", 4.0),
                ("ctr", "canary", "latency_p99_ms", 4.0 + tick / 10),
            ],
            at=at,
            team_ids={"ctr": team_a.pk},
        )
    pool = factories.pool(team_a, name="cpu")
    factories.endpoint(pool, name="ctr", slo_p99_ms=35.0, slo_error_rate=0.02)
    alert, _ = alert_raise(
        kind="rollout_rolled_back",
        severity="critical",
        endpoint="ctr",
        rollout_id=3,
        team=team_a,
        reason="ctr: canary rolled back — candidate error rate 6.9% vs stable 1.0%",
    )

    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "pw-for-tests-only")
    page.click("button[type=submit]")
    page.wait_for_load_state()
    page.goto(f"{live_server.url}/monitoring/")
    assert "1 open alert" in page.inner_text("#alert-banner")
    # six panels; the three with data draw one line per variant (+ a dashed SLO line on
    # error rate and p99 latency, from the endpoint's SLOs)
    wait_until(
        page,
        "() => { const charts = Object.values(Chart.instances);"
        " return charts.length === 6 && charts.filter(c => c.data.datasets.filter(d => !d.slo).length === 2"
        " && c.data.datasets.filter(d => !d.slo).every(d => d.data.length === 30)).length === 3; }",
        timeout=15000,
    )
    charts = page.evaluate("""Object.values(Chart.instances).map(c => ({
        metric: c.canvas.dataset.metric, yticks: c.scales.y.ticks.map(t => t.label),
        lines: c.data.datasets.filter(d => !d.slo).map(d => d.label).sort().join(','),
        slo: c.data.datasets.filter(d => d.slo).map(d => [d.label, d.data[0].y]),
        min: c.options.scales.x.min, max: c.options.scales.x.max,
        ticks: c.scales.x.ticks.map(t => t.label)}))""")
    by_metric = {c["metric"]: c for c in charts}
    assert [by_metric[m]["lines"] for m in ("request_rate", "error_rate", "latency_p99_ms")] == ["canary,stable"] * 3
    for metric, unit in (
        ("request_rate", " req/s"),
        ("error_rate", " %"),
        ("latency_p99_ms", " ms"),
        ("utilization", " %"),
    ):
        assert by_metric[metric]["yticks"] and all(t.endswith(unit) for t in by_metric[metric]["yticks"]), by_metric[
            metric
        ]
    assert by_metric["latency_p99_ms"]["slo"] == [["SLO 35.0 ms", 35.0]]
    assert by_metric["error_rate"]["slo"] == [["SLO 2.00 %", 2.0]]
    assert by_metric["request_rate"]["slo"] == []
    # one time range for every panel: the same [now - 1 h, now] on each x axis
    assert len({(c["min"], c["max"]) for c in charts}) == 1
    assert abs((charts[0]["max"] - charts[0]["min"]) - 3600 * 1000) < 1
    ticks = [t for c in charts for t in c["ticks"]]
    assert ticks and all(re.fullmatch(r"([01]\d|2[0-3]):[0-5]0", t) for t in ticks), (
        ticks
    )  # 24-hour clock, round 10 minutes
    titles = page.locator(".panel-title").all_inner_texts()
    assert "Latency p99 (ms)" in titles and "request_rate" not in " ".join(titles)
    page.click("nav.range a:text-is('15m')")
    wait_until(
        page,
        "() => { const c = Object.values(Chart.instances);"
        " return c.length === 6 && c.every(x => x.options.scales.x.max - x.options.scales.x.min === 900000); }",
        timeout=15000,
    )
    assert page.url.endswith("?range=15m")
    out = Path(settings.VAR_DIR) / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out / "monitoring-overview.png"), full_page=True)

    page.goto(f"{live_server.url}/monitoring/alerts/?status=open")
    page.click(f"#alert-{alert.pk} button:has-text('Acknowledge')")
    wait_until(page, f"document.querySelector('#alert-{alert.pk}').innerText.includes('acknowledged')")
    assert page.url.endswith("/monitoring/alerts/?status=open")  # swapped in place, no navigation
    assert Alert.objects.get(pk=alert.pk).status == "acknowledged"
    page.goto(f"{live_server.url}/models/")
    assert page.query_selector("#alert-banner") is None
