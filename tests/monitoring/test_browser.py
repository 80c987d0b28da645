"""The monitoring pages in a real browser (Debian's Chromium via Playwright): the charts
draw one line per variant from /api/v1/metrics/, the banner shows open alerts, and
acknowledging from the alerts page swaps the row in place (htmx)."""

from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from monitoring.models import Alert
from monitoring.services.alerts import alert_raise
from monitoring.services.store import samples_store

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_overview_charts_banner_and_acknowledge(live_server, browser_page, alice, team_a):
    page = browser_page
    now = timezone.now()
    for tick in range(30):
        at = now - timedelta(seconds=2 * (30 - tick))
        samples_store(rows=[
            ("ctr", "stable", "request_rate", 190.0 + tick % 5), ("ctr", "canary", "request_rate", 10.0),
            ("ctr", "stable", "error_rate", 0.01), ("ctr", "canary", "error_rate", 0.01 + tick / 500),
            ("ctr", "stable", "latency_p99_ms", 4.0), ("ctr", "canary", "latency_p99_ms", 4.0 + tick / 10),
        ], at=at, team_ids={"ctr": team_a.pk})
    alert, _ = alert_raise(kind="rollout_rolled_back", severity="critical", endpoint="ctr", rollout_id=3,
                                    team=team_a, reason="ctr: canary rolled back — candidate error rate 6.9% vs stable 1.0%")

    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "pw-for-tests-only")
    page.click("button[type=submit]")
    page.wait_for_load_state()
    page.goto(f"{live_server.url}/monitoring/")
    assert "1 open alert" in page.inner_text("#alert-banner")
    page.wait_for_function(
        "() => { const charts = Object.values(Chart.instances);"
        " return charts.length === 3 && charts.every(c => c.data.datasets.length === 2"
        " && c.data.datasets.every(d => d.data.length === 30)); }", timeout=15000)
    labels = page.evaluate("Object.values(Chart.instances).map(c => c.data.datasets.map(d => d.label).sort().join(','))")
    assert labels == ["canary,stable"] * 3
    out = Path(settings.VAR_DIR) / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out / "monitoring-overview.png"), full_page=True)

    page.goto(f"{live_server.url}/monitoring/alerts/?status=open")
    page.click(f"#alert-{alert.pk} button:has-text('Acknowledge')")
    page.wait_for_function(f"document.querySelector('#alert-{alert.pk}').innerText.includes('acknowledged')")
    assert page.url.endswith("/monitoring/alerts/?status=open")  # swapped in place, no navigation
    assert Alert.objects.get(pk=alert.pk).status == "acknowledged"
    page.goto(f"{live_server.url}/models/")
    assert page.query_selector("#alert-banner") is None
