"""Silences and the alert's evidence in a real browser (Debian's Chromium via Playwright),
an alert's page fits 1280 px with the judge's evidence open (no 28-column table,
no raw epoch); "Silence…" from the alert opens the form with the alert's endpoint, check
and severity filled in; once created the alert reads "silenced by …", a new alert of the
same kind is recorded but not notified; expiring the silence ends that."""

from pathlib import Path

import pytest
from django.conf import settings

from monitoring.models import Alert, Silence
from monitoring.services.alerts import alert_raise
from tests.browser import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# A judge verdict's evidence as canary.py stores it: three checks with 10-20 keys each.
CHECKS = [
    {
        "name": "error_rate",
        "kind": "test",
        "outcome": "fail",
        "test": "mixture e-process (conditional binomial LR, Ville)",
        "samples": {"stable": 48213.0, "candidate": 12150.0},
        "errors": {"stable": 482.0, "candidate": 842.0},
        "rates": {"stable": 0.009997, "candidate": 0.0693},
        "statistic": 0.0593,
        "e_value": 1.8e9,
        "threshold": 20.0,
        "min_samples": 500,
        "margin": 0.01,
        "progress": {"have": 12150, "need": 500, "unit": "requests"},
        "eta_seconds": 0.0,
    },
    {
        "name": "p99_slo",
        "kind": "guardrail",
        "outcome": "pass",
        "test": "e-process on the share over the SLO vs its 1 % ceiling and vs the control, in disjoint windows",
        "samples": {"candidate": 12150.0},
        "statistic": 21.7,
        "threshold": 35.0,
        "over": {"candidate": 12.0},
        "share_over": {"candidate": 0.00099, "control": 0.0011},
        "allowed_share": 0.01,
        "counted_over_ms": 35.0,
        "e_value": 0.02,
        "e_value_control": 0.4,
        "e_threshold": 100.0,
        "windows_over": 0,
        "windows": 14,
        "failure_limit": 3,
        "min_samples": 100,
        "progress": {"have": 12150, "need": 100, "unit": "requests"},
        "eta_seconds": 0.0,
    },
    {
        "name": "psi",
        "kind": "guardrail",
        "outcome": "inconclusive",
        "samples": {"stable": 9000.0, "candidate": 3000.0},
        "statistic": 0.31,
        "threshold": 0.25,
        "min_samples": 200,
        "breaches": 2,
        "breach_since": 1795554625.3,
        "breach_held_s": 4.01,
        "failure_limit": 3,
        "sustain_s": 10.0,
        "progress": {"have": 3000, "need": 200, "unit": "scores"},
        "eta_seconds": 0.0,
        "window": "https://dashboard.example.test/" + "very-long-path-segment-" * 12,
    },
]
FITS = "() => document.documentElement.scrollWidth <= window.innerWidth"


def _raise(team, rollout_id):
    return alert_raise(
        kind="rollout_rolled_back",
        severity="critical",
        endpoint="ctr",
        rollout_id=rollout_id,
        team=team,
        reason="ctr: v2-onnx-int8 rolled back — judge: error_rate: candidate 6.9 % vs 1.0 %",
        evidence={
            "verdict_id": 41,
            "outcome": "fail",
            "stable": "v1-onnx-fp32",
            "candidate": "v2-onnx-int8",
            "checks": CHECKS,
        },
    )[0]


def test_silence_from_an_alert_then_expire_it(live_server, browser_page, alice, team_a):
    page = browser_page
    alert = _raise(team_a, rollout_id=3)
    login(page, live_server.url, "alice")

    # the evidence: the deciding figures, then everything folded; the page fits 1280 px open or closed
    page.goto(f"{live_server.url}/monitoring/alerts/{alert.pk}/")
    figures = page.inner_text(".evidence-check[data-check='error_rate']")
    assert "candidate 6.93 % vs stable 1 %" in figures and "e-value needed" in figures
    assert page.evaluate(FITS), page.evaluate("document.documentElement.scrollWidth")
    page.click("#evidence-all summary")
    assert page.is_visible("#evidence-all dl")
    assert page.evaluate(FITS), page.evaluate("document.documentElement.scrollWidth")
    text = page.inner_text("#evidence")
    assert (
        "2026-11-24 21:10:25 UTC" in text
        and "1,795,554,625" not in text
        and "<table" not in page.inner_html("#evidence")
    )
    out = Path(settings.VAR_DIR) / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out / "alert-evidence.png"), full_page=True)

    # Silence… from the alert: its endpoint, check and severity are filled in
    page.click("#silence-alert")
    page.wait_for_selector("#silence-form")
    assert page.input_value("#id_endpoint") == "ctr" and page.input_value("#id_check") == "rollout_rolled_back"
    assert page.input_value("#id_severity") == "critical" and page.input_value("#id_team") == str(team_a.pk)
    page.fill("#id_comment", "known bad build, rolling back by hand")
    page.click("#silence-form button[type=submit]")
    page.wait_for_url(f"**/monitoring/alerts/{alert.pk}/")
    assert "silenced by alice" in page.inner_text("#alert-notification")
    silence = Silence.objects.get()
    assert silence.comment == "known bad build, rolling back by hand" and silence.kind == "rollout_rolled_back"

    # a new alert of the same kind: recorded and shown silenced, not notified
    again = _raise(team_a, rollout_id=4)
    assert Alert.objects.get(pk=again.pk).silenced_by_id == silence.pk
    page.goto(f"{live_server.url}/monitoring/alerts/")
    assert "silenced" in page.inner_text(f"#alert-{again.pk}")

    # expire it: it moves to the expired list and the alert says it was silenced
    page.goto(f"{live_server.url}/monitoring/alerts/silences/")
    page.click(f"#silence-{silence.pk} button:has-text('Expire')")
    page.wait_for_selector(f"#silences-expired #silence-{silence.pk}")
    assert "expired by alice" in page.inner_text(f"#silences-expired #silence-{silence.pk}")
    page.goto(f"{live_server.url}/monitoring/alerts/{alert.pk}/")
    assert "was silenced" in page.inner_text("#alert-notification")
    third = _raise(team_a, rollout_id=5)
    assert Alert.objects.get(pk=third.pk).silenced_by_id is None
