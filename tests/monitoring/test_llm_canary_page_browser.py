"""An LLM canary watched in a real browser (Debian's Chromium via Playwright): the endpoint
page's candidate-vs-stable charts draw what the judge decides on (TTFT and ITL p99, with
the endpoint's TTFT/ITL SLO lines, beside the LLM request and error rates) and fill while
the canary runs, without a reload; the Monitoring page's TTFT figures are the judge's own
(its verdict's quantiles over the same samples), not one tick's bucket edges.

The gateway's LLM metric families are produced as prometheus_client exposes them
(tests/monitoring/conftest.py LLMGatewayMetrics) and go through the collector's parse,
deltas and derived metrics into the store, as tests/monitoring/test_llm_canary_loop.py
feeds them; the judge is the real one (monitoring.services.canary)."""

import re
import time
from datetime import timedelta

import numpy as np
import pytest
from django.utils import timezone

from deployments.models import Endpoint, Rollout
from monitoring.collection import collect, gateway_samples
from monitoring.models import Verdict
from monitoring.services import canary
from monitoring.services.store import samples_store
from registry.names import variant_name
from tests.browser import login, wait_until
from tests.monitoring.canary_feed import start_rollout
from tests.monitoring.conftest import LLMGatewayMetrics

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHARTS = """() => Object.fromEntries(Object.values(Chart.instances).map(c => [c.canvas.dataset.metric, {
  lines: Object.fromEntries(c.data.datasets.filter(d => !d.slo).map(d => [d.role, d.data.filter(p => p.y !== null).length])),
  slo: c.data.datasets.filter(d => d.slo).map(d => d.data[0].y)}]))"""


class Streams:
    """One gateway's LLM families over successive 1 s scrapes from the step's start, each
    stored once its time has come (as the collector does: snapshot, deltas, derive, store)."""

    def __init__(self, rollout, seed: int = 0):
        self.rollout, self.rng = rollout, np.random.default_rng(seed)
        self.clock = rollout.step_started_at
        self.metrics = LLMGatewayMetrics()
        self.previous = gateway_samples.gateway_snapshot(self.metrics.text())
        self.arms = (
            (variant_name(rollout.baseline_artifact), 60, 40.0),
            (variant_name(rollout.candidate_artifact), 20, 60.0),
        )

    def ticks(self, count: int) -> None:
        for _ in range(count):
            self.clock += timedelta(seconds=1)
            time.sleep(max(0.0, (self.clock - timezone.now()).total_seconds()))
            for variant, rps, ttft_ms in self.arms:
                for ttft in self.rng.lognormal(np.log(ttft_ms / 1000), 0.3, rps):
                    self.metrics.stream("ctr", variant, ttft_s=float(ttft), itl_s=self.rng.lognormal(np.log(0.004), 0.25, 5),
                                        status=200, fault="none", prompt=12, completion=6)  # fmt: skip
            current = gateway_samples.gateway_snapshot(self.metrics.text())
            totals = gateway_samples.gateway_deltas(self.previous, current, seconds=1.0)
            self.previous = current
            rows = [(ep, var, m, v) for (ep, var), t in totals.items() for m, v in collect.derive(t).items()]
            samples_store(rows=rows, at=self.clock, team_ids={"ctr": self.rollout.endpoint.team_id})


def test_an_llm_canary_charts_ttft_and_itl_and_the_table_says_what_the_judge_said(
    live_server, browser_page, deployer, team_a, artifact_factory
):
    rollout = start_rollout(deployer, team_a, artifact_factory, [2000, 10000])
    Endpoint.objects.filter(pk=rollout.endpoint_id).update(kind="llm", ttft_slo_ms=1000, itl_slo_ms=50)
    rollout = Rollout.objects.select_related("endpoint").get(pk=rollout.pk)
    streams = Streams(rollout)

    page = browser_page
    login(page, live_server.url, deployer.username)
    page.goto(f"{live_server.url}/deployments/endpoints/ctr/")
    assert "Time to first token p99" in page.inner_text("#rollout-status")
    wait_until(
        page,  # drawn once: four charts, the SLO lines in
        "() => Object.values(Chart.instances).length === 4"
        " && Object.values(Chart.instances).some(c => c.data.datasets.some(d => d.slo))",
    )
    charts = page.evaluate(CHARTS)
    assert set(charts) == {"llm_request_rate", "llm_error_rate", "ttft_p99_ms", "itl_p99_ms"}  # what the judge reads
    assert charts["ttft_p99_ms"]["slo"] == [1000] and charts["itl_p99_ms"]["slo"] == [50]
    assert charts["ttft_p99_ms"]["lines"] == {}  # no traffic yet

    # the canary's traffic arrives: the charts fill, without a reload
    streams.ticks(5)
    fill = """(n) => ['ttft_p99_ms', 'itl_p99_ms'].every(m => {
      const c = Object.values(Chart.instances).find(c => c.canvas.dataset.metric === m);
      const lines = c.data.datasets.filter(d => !d.slo);
      return lines.length === 2 && lines.every(d => d.data.filter(p => p.y !== null).length >= n); })"""
    wait_until(page, fill, arg=5, timeout=15_000)
    streams.ticks(5)
    wait_until(page, fill, arg=10, timeout=15_000)
    charts = page.evaluate(CHARTS)
    assert set(charts["ttft_p99_ms"]["lines"]) == {"candidate", "stable"}, charts

    # the judge decides on these samples; the Monitoring page's TTFT figures are its own
    canary.judge_rollout(rollout, now=timezone.now())
    verdict = Verdict.objects.filter(rollout_id=rollout.pk).latest("created_at")
    ttft = next(c for c in verdict.checks if c["name"] == "ttft")
    assert ttft["outcome"] != "skipped", ttft
    page.goto(f"{live_server.url}/monitoring/?range=15m")
    table = page.query_selector("table.llm-summary")
    columns = [th.inner_text().strip().lower() for th in table.query_selector_all("thead th")]
    for role, variant in (("stable", verdict.stable_variant), ("candidate", verdict.candidate_variant)):
        row = next(r for r in table.query_selector_all("tbody tr") if r.query_selector("td").inner_text() == variant)
        cells = dict(zip(columns, (td.inner_text() for td in row.query_selector_all("td"))))
        shown = {q: float(re.match(r"([\d.]+) ms", cells[f"ttft {q}"]).group(1)) for q in ("p50", "p99")}
        judged = {q: ttft["quantiles_ms"][role][q] for q in ("p50", "p99")}
        # the same figure, printed to 0.1 ms
        assert all(abs(shown[q] - judged[q]) <= 0.05 + 1e-9 for q in shown), (role, shown, judged)
