"""The experiment page's lift chart and labels in a real browser (Debian's Chromium via
Playwright) when the first analysis tick already decides: the chart draws the lift's
always-valid band at that one tick (a band, not a lone dot), the same bounds the table
prints; the CTR's ± says it is a standard error and the CTR says what it counts (and why a
traffic driver's own figure differs); the MDE is a percentage like the lifts beside it.
Exposures and clicks go through the experiments' store as the ingest writes them; the
analysis tick is the service beat's task calls."""

import re

import numpy as np
import pytest
from django.db import transaction
from django.utils import timezone

from experiments.services import online as services
from experiments.store import default_store
from harness import factories
from tests.browser import login, overflow, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHART = """() => {
  const chart = Chart.getChart(document.getElementById('lift-chart'));
  return chart.data.datasets.map(d => ({label: d.label, band: !!d.band, data: d.data}));
}"""


def _decisive_experiment(team, deployer, artifact_factory):
    pool = factories.pool(team, ready_replicas=1)
    stable, candidate = artifact_factory(team), artifact_factory(team)
    endpoint = factories.endpoint(pool, stable, name="ctr-demo")
    exp = services.experiment_create(
        user=deployer, endpoint=endpoint, name="better", candidates=[candidate], baseline_rate=0.2, mde=0.05
    )
    services.experiment_start(user=deployer, experiment=exp)
    arms = {a.is_control: a for a in exp.arms.all()}
    t0 = timezone.now()
    rows = [
        {"request_id": f"{int(c)}-{u}-{j}", "experiment": exp.pk, "arm": arms[c].pk, "unit_key": f"{c}{u}", "time": t0}
        for c in (True, False)
        for u in range(400)
        for j in range(5)
    ]
    default_store().write_exposures(rows)
    rng = np.random.default_rng(0)
    events = [
        {"event_id": f"c-{r['request_id']}", "type": "click", "request_id": r["request_id"], "time": t0}
        for r in rows
        if rng.random() < (0.1 if r["request_id"].startswith("1-") else 0.3)
    ]
    with transaction.atomic():  # as the ingest writes a batch (its staging table lives for one transaction)
        default_store().write_feedback(team=team, endpoint_name="ctr-demo", experiments=[exp], events=events)
    return exp


def test_the_first_tick_draws_the_band_and_the_labels_say_what_they_are(
    live_server, browser_page, deployer, team_a, artifact_factory
):
    exp = _decisive_experiment(team_a, deployer, artifact_factory)
    services.experiment_analyze(experiment_id=exp.pk)  # one tick, and it decides
    exp.refresh_from_db()
    assert exp.state == "decided" and len(exp.history) == 1, (exp.analysis_error, exp.evidence)

    page = browser_page
    login(page, live_server.url, deployer.username)
    page.goto(f"{live_server.url}/experiments/{exp.pk}/")
    wait_until(page, "() => Chart.getChart(document.getElementById('lift-chart')).data.datasets.length > 0")
    datasets = page.evaluate(CHART)
    candidate = exp.arms.get(is_control=False).name
    [band] = [d for d in datasets if d["band"]]
    [lift] = [d for d in datasets if d["label"] == f"{candidate} lift"]
    assert len(band["data"]) == 1 and band["data"][0] is not None, band  # the band at the first tick
    lower, upper = band["data"][0]
    assert lower < lift["data"][0] < upper and lower > 0  # it decided: the band is above 0
    # the bounds the table prints, to the percent
    cell = page.inner_text(f'tr[data-arm="{candidate}"] td.lift')
    shown = [int(x) for x in re.findall(r"-?\d+", cell)]
    assert shown == [round(lift["data"][0]), round(lower), round(upper)], (cell, lift, band)
    box = page.eval_on_selector("#lift-chart", "c => c.getBoundingClientRect().height")
    assert box >= 200  # a chart one can read, not a strip

    assert page.inner_text("#ctr-head") == "CTR ± STD. ERROR"
    assert re.fullmatch(r"0\.\d{4} ± 0\.\d{4} s\.e\.", page.inner_text(f'tr[data-arm="{candidate}"] td.ctr'))
    explained = page.inner_text("#ctr-explained")
    assert "attributed to an exposure of this experiment" in explained and "simulate_traffic" in explained
    assert "MDE +5 %" in page.inner_text("#primary-metric")
    page.set_viewport_size({"width": 390, "height": 844})  # a phone
    page.goto(f"{live_server.url}/experiments/{exp.pk}/")
    wait_until(page, "() => Chart.getChart(document.getElementById('lift-chart')).data.datasets.length > 0")
    assert not overflow(page), overflow(page)
