"""The dashboard on a phone-sized screen (390 px wide, Debian's Chromium via Playwright):
the nav wraps instead of overflowing, exactly one item is highlighted, every nav link is
inside the viewport, and no page scrolls sideways (wide tables scroll inside themselves)."""

from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from harness import factories
from monitoring.services.alerts import alert_raise
from monitoring.services.store import samples_store

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTH = 390
PAGES = [
    "/models/",
    "/models/ctr-narrow/",
    "/models/builds/",
    "/deployments/",
    "/deployments/endpoints/",
    "/deployments/keys/",
    "/monitoring/",
    "/monitoring/alerts/",
    "/monitoring/alerts/silences/",
    "/no-such-page/",
]


def test_narrow_screen_has_no_horizontal_overflow(live_server, browser_page, alice, team_a):
    factories.registered_model(team_a, name="ctr-narrow", description="a model with a long description " * 4)
    now = timezone.now()
    samples_store(
        rows=[("ctr", "stable", "request_rate", 120.0), ("ctr", "stable", "latency_p99_ms", 4.2)],
        at=now - timedelta(seconds=5),
        team_ids={"ctr": team_a.pk},
    )
    alert_raise(
        kind="rollout_rolled_back",
        severity="critical",
        endpoint="ctr",
        rollout_id=9,
        team=team_a,
        reason="ctr: canary rolled back — candidate error rate 6.9% vs stable 1.0%",
        evidence={"checks": [{"name": "error_rate", "outcome": "fail", "candidate": 0.069, "stable": 0.01}]},
    )
    page = browser_page
    page.set_viewport_size({"width": WIDTH, "height": 800})
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "pw-for-tests-only")
    page.click("button[type=submit]")
    page.wait_for_load_state()
    out = Path(settings.VAR_DIR) / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    for path in PAGES:
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("load")
        widths = page.evaluate("[document.documentElement.scrollWidth, document.body.scrollWidth, window.innerWidth]")
        assert max(widths[:2]) <= widths[2] == WIDTH, (path, widths)
        links = page.evaluate("""Array.from(document.querySelectorAll('header.top nav a')).map(a => {
            const r = a.getBoundingClientRect(); return [a.textContent, r.left, r.right, a.classList.contains('active')]; })""")
        assert len(links) >= 6, path
        assert all(0 <= left and right <= WIDTH for _, left, right, _ in links), (path, links)
        assert sum(active for *_, active in links) <= 1, (path, links)
        page.screenshot(path=str(out / f"narrow{path.strip('/').replace('/', '-') or 'home'}.png"), full_page=True)
