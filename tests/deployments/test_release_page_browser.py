"""A release watched on its endpoint page in a real browser (Debian's Chromium via
Playwright), with no reload from the start form to its end: the release's canary appears in
the rollout card, the verdicts, the events and the rollouts table while the page still
shows the previous, rolled-back rollout; the release card and the rollout card say the
same thing at every read; after the release ends, its "Measured by the canary" column keeps
the canary's figures though the last step (100 % to the candidate) had no control beside it.

No processes: the release's build is finished by hand (tests/deployments/release_helpers.py)
and the release and rollout reconciles are called from the test, as the worker calls them;
the page polls the web app (live server) like a person's browser."""

import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from deployments.models import PoolModel, PoolModelState, Release, Rollout
from deployments.rollout_machine import State
from deployments.services import releases as release_services
from deployments.services import rollouts as rollout_services
from harness import factories
from monitoring.models import Verdict
from registry.models import ModelVersion, VersionSource
from tests.browser import login, wait_until
from tests.deployments.release_helpers import finish_build

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# One read of the page's live part (htmx swaps it whole, so one evaluate sees one render).
READ = """() => {
  const text = (sel) => { const e = document.querySelector(sel); return e ? e.innerText.trim() : null; };
  const card = document.querySelector('#release-card [data-state]');
  return {header: text('#endpoint-status'), release: card ? card.dataset.state : null, releaseRollout: text('#release-rollout'),
          releaseRolloutState: text('#release-rollout-state'), card: text('#rollout-card strong'),
          cardState: text('#rollout-state'), rows: Array.from(document.querySelectorAll('#rollout-table tbody tr')).map(r => r.id),
          events: text('#rollout-events'), verdicts: Array.from(document.querySelectorAll('#verdicts tr[data-check]')).map(r => r.dataset.check),
          measured: text('#measured-p50-ratio'), polling: !!document.querySelector('#rollout-status[hx-trigger]'),
          marker: window.__notReloaded === true};
}"""


def _agree(seen: dict) -> None:
    """The release card names the rollout the rollout card shows, in the same words."""
    if seen["releaseRollout"] and seen["card"] == seen["releaseRollout"].replace("rollout", "Rollout"):
        assert seen["releaseRolloutState"] == seen["cardState"], seen
    if seen["release"] in ("building", "canary") and seen["cardState"] not in (None, "rolled back"):
        assert seen["header"].startswith(("rollout #", "release #")), seen


def _watch(page, until, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        seen = page.evaluate(READ)
        assert seen["marker"], "the page was reloaded"
        _agree(seen)
        if until(seen):
            return seen
        time.sleep(0.3)
    raise AssertionError(f"the page never showed it; last read: {seen}")


def _verdict(rollout, team, *, step: int, control: bool) -> None:
    quantiles = {"candidate": {"p50": 1.0, "p99": 4.0}, "stable": {"p50": 2.0, "p99": 8.0} if control else {}}
    now = timezone.now()
    Verdict.objects.create(
        rollout_id=rollout.pk,
        endpoint=rollout.endpoint.name,
        step=step,
        stable_variant="v1-onnx-fp32-baseline" if control else "",
        candidate_variant="v2-onnx-int8-tuned",
        outcome="pass",
        reason="every check passed",
        checks=[
            {
                "name": "latency",
                "kind": "test",
                "outcome": "pass" if control else "skipped",
                "quantiles_ms": quantiles,
                "samples": {"candidate": 300, "stable": 310 if control else 0},
            },
            {"name": "error_rate", "kind": "test", "outcome": "pass", "rates": {"candidate": 0.0, "stable": 0.001}},
        ],
        window_start=now - timedelta(seconds=10),
        window_end=now,
        team=team,
    )


def test_a_release_canary_is_live_on_its_endpoint_page(
    live_server, browser_page, deployer, team_a, onnx_path, tmp_path
):
    stable = factories.artifact(team_a, onnx_path, tmp_path)
    pool = factories.pool(team_a, ready_replicas=1, max_queue_size=0, queue_timeout_ms=0)
    endpoint = factories.endpoint(pool, stable, name="ctr", slo_p99_ms=40)
    previous = factories.rollout(
        endpoint, factories.artifact(team_a, onnx_path, tmp_path), state=State.ROLLED_BACK, reason="judge: p99 over"
    )
    version = ModelVersion.objects.create(
        model=stable.version.model, version=3, source=VersionSource.UPLOAD, file_sha256="0" * 64, file_path="x.onnx"
    )

    page = browser_page
    login(page, live_server.url, deployer.username)
    page.goto(f"{live_server.url}/deployments/endpoints/ctr/")
    assert page.inner_text("#rollout-state") == "rolled back"  # the newest rollout, before the release
    # the release form: its steps field, as the rollout form's (the forecast's plan unless typed)
    page.select_option("#release-version", str(version.pk))
    page.fill("#release-steps", "50, 100")
    page.click("#release-form button[type=submit]")
    page.wait_for_selector("#release-state")
    page.evaluate("() => { window.__notReloaded = true; }")  # from here on, no navigation
    release = Release.objects.get(endpoint=endpoint)
    assert release.rollout_options == {"steps_bp": [5000, 10000]}
    seen = _watch(page, lambda s: s["release"] == "building" and s["polling"])
    assert seen["header"] == f"release #{release.pk}: Building and tuning" and seen["cardState"] == "rolled back"

    # the build is done: the release starts its canary; the page shows it without a reload
    finish_build(release, tuned=True, onnx_path=onnx_path, tmp_path=tmp_path)
    release = release_services.release_reconcile(release_id=release.pk)
    rollout = Rollout.objects.get(pk=release.rollout_id)
    PoolModel.objects.update(state=PoolModelState.READY, replica_ready={"r0": True})
    rollout_services.rollout_reconcile(rollout_id=rollout.pk)
    seen = _watch(page, lambda s: s["card"] == f"Rollout #{rollout.pk}" and s["cardState"] == "canary · step 1 of 2")
    assert seen["releaseRollout"] == f"rollout #{rollout.pk}" and seen["releaseRolloutState"] == "canary · step 1 of 2"
    assert seen["rows"][:2] == [f"rollout-row-{rollout.pk}", f"rollout-row-{previous.pk}"]
    assert "canary · step 1 of 2" in seen["events"] and seen["header"] == f"rollout #{rollout.pk}: canary · step 1 of 2"
    wait_until(
        page,  # the charts of the new rollout, drawn on its own canvases
        f"() => Object.values(Chart.instances).filter(c => c.canvas.closest('#rollout-charts-{rollout.pk}')).length === 3",
    )

    # the judge's verdicts appear; then the last step (no control beside the candidate) and the end
    _verdict(rollout, team_a, step=0, control=True)
    seen = _watch(page, lambda s: "latency" in s["verdicts"] and s["measured"] is not None)
    assert seen["measured"] == "0.50×"
    Rollout.objects.filter(pk=rollout.pk).update(step_index=1)
    for _ in range(60):  # more than a page of verdicts at 100 %: no control quantiles in any of them
        _verdict(rollout, team_a, step=1, control=False)
    Rollout.objects.filter(pk=rollout.pk).update(
        state=State.SUCCEEDED, finished_at=timezone.now(), reason="promoted: every step passed"
    )
    release = release_services.release_reconcile(release_id=release.pk)
    assert release.state == "promoted"
    seen = _watch(page, lambda s: s["release"] == "promoted" and not s["polling"])
    assert seen["measured"] == "0.50×"  # the canary's figures, kept after the release ended
    assert seen["cardState"] == "succeeded" and seen["header"] == "serving"
    assert "is the stable now and takes 100 % of traffic" in page.inner_text("#rollout-outcome")
    assert "baseline 0 %" not in page.inner_text("#rollout-card")
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    out = Path(settings.VAR_DIR) / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out / "release-promoted.png"), full_page=True)
