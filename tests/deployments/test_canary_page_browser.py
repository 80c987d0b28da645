"""The endpoint page during a canary in a real browser (Debian's Chromium via Playwright),
every arm's share with the baseline labelled; the three charts over one time
range, one line per arm of this rollout (no old variant in the legend) in its role's
colour, and a gap in the data left as a gap; the error rate in % and the p99 with their
SLO lines; the page fits 1280 px."""

from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from deployments.models import PoolModel, PoolModelState
from deployments.rollout_machine import State
from deployments.selectors.rollout_page import ROLE_COLORS
from deployments.services import endpoints as endpoint_services
from deployments.services import rollouts as services
from harness import factories
from monitoring.services.store import samples_store
from tests.browser import login, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHARTS = """() => Object.values(Chart.instances).map(c => ({
  id: c.canvas.id, min: c.options.scales.x.min, max: c.options.scales.x.max,
  slo: c.data.datasets.filter(d => d.slo).map(d => d.data[0].y),
  lines: c.data.datasets.filter(d => !d.slo).map(d => ({label: d.label, role: d.role, color: d.borderColor,
                                    nulls: d.data.filter(p => p.y === null).length, points: d.data.length}))}))"""


def test_canary_page_labels_every_arm_and_shares_one_time_range(
    live_server, browser_page, deployer, team_a, artifact_factory
):
    pool = factories.pool(team_a, "cpu-pool", ready_replicas=1)
    stable = artifact_factory(team_a, model_name="ctr")
    endpoint = endpoint_services.endpoint_create(user=deployer, name="demo-ctr", pool=pool, stable_artifact=stable)
    PoolModel.objects.update(state=PoolModelState.READY, replica_ready={"r0": True})
    candidate = artifact_factory(team_a, model_name="ctr")
    rollout = services.rollout_start(
        user=deployer, endpoint=endpoint, candidate=candidate, steps_bp=[2500, 5000, 10000]
    )
    PoolModel.objects.update(state=PoolModelState.READY, replica_ready={"r0": True})
    services.rollout_reconcile(rollout_id=rollout.pk)
    rollout.refresh_from_db()
    assert rollout.state == State.CANARY and rollout.baseline_model

    # 2 s samples over the last 50 s with a 20 s hole, for the three arms and a variant of an old rollout
    now = timezone.now()
    variants = ["v2-onnx-fp32", "v1-onnx-fp32-baseline", "v1-onnx-fp32", "v0-onnx-fp32"]
    for seconds in [*range(50, 30, -2), *range(10, 0, -2)]:
        rows = [("demo-ctr", v, m, 5.0) for v in variants for m in ("request_rate", "error_rate", "latency_p99_ms")]
        samples_store(rows=rows, at=now - timedelta(seconds=seconds), team_ids={"demo-ctr": team_a.pk})

    page = browser_page
    login(page, live_server.url, deployer.username)
    page.goto(f"{live_server.url}/deployments/endpoints/demo-ctr/?rollout={rollout.pk}")
    assert " ".join(page.inner_text("#arm-shares").split()) == "candidate 25 % · baseline 25 % · stable 50 %"
    wait_until(
        page,
        "() => Object.values(Chart.instances).length === 3"
        " && Object.values(Chart.instances).every(c => c.data.datasets.filter(d => !d.slo).length === 3)",
        timeout=15000,
    )
    charts = page.evaluate(CHARTS)
    assert len({(c["min"], c["max"]) for c in charts}) == 1  # one time range for all three
    # the error rate in % and the p99 in ms, each with the endpoint's SLO line; no SLO on the rate
    assert {c["id"]: c["slo"] for c in charts} == {
        "chart-request_rate": [],
        "chart-error_rate": [endpoint.slo_error_rate * 100],
        "chart-latency_p99_ms": [endpoint.slo_p99_ms],
    }
    for chart in charts:
        assert [line["role"] for line in chart["lines"]] == ["candidate", "baseline", "stable"]  # no v0 line
        assert all(line["color"] == ROLE_COLORS[line["role"]] for line in chart["lines"])
        assert all(line["nulls"] == 1 for line in chart["lines"]), chart  # the 20 s hole is a gap
    segments = page.eval_on_selector_all("#traffic-split span", "els => els.map(e => [e.dataset.role, e.style.width])")
    assert segments == [["candidate", "25%"], ["baseline", "25%"], ["stable", "50%"]]
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    out = Path(settings.VAR_DIR) / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out / "canary-page.png"))
