"""Comparing training runs in a real browser (Debian's Chromium via Playwright): tick two
runs on the experiment page, compare them side by side — a metrics table with rounded
figures and the better value marked, and one chart per metric on its own axis (AUC and
train_seconds never share one), with a line per run over the metric's history."""

from pathlib import Path

import mlflow
import pytest
from django.conf import settings

from experiments.selectors.training import TEAM_TAG
from kernel import mlflow as mlflow_config
from tests.browser import login, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_compare_two_runs(live_server, browser_page, mlflow_store, alice, team_a):
    exp_id = mlflow_config.experiment_id("ctr-train")
    mlflow_store.set_experiment_tag(exp_id, TEAM_TAG, "team-a")
    runs = {}
    for name, final_auc, seconds in (
        ("baseline", 0.7123456, 95.25),
        ("wider", 0.7456789, 143.5),
        ("deeper", 0.70, 180.0),
    ):
        with mlflow.start_run(experiment_id=exp_id, run_name=name) as run:
            mlflow.log_params({"hidden": 64 if name != "wider" else 256, "lr": 0.01})
            for epoch in range(5):
                mlflow.log_metric("auc", final_auc - 0.02 * (4 - epoch), step=epoch)
            mlflow.log_metric("train_seconds", seconds)
            runs[name] = run.info.run_id

    page = browser_page
    login(page, live_server.url, alice.username)
    page.goto(f"{live_server.url}/experiments/training/{exp_id}/")
    page.check(f"input[name=runs][value='{runs['baseline']}']")
    page.check(f"input[name=runs][value='{runs['wider']}']")
    page.click("#compare-button")
    page.wait_for_url(f"**/experiments/training/{exp_id}/compare/**")
    assert page.inner_text("h1").endswith("compare 2 runs")

    headers = page.eval_on_selector_all("#compare-metrics thead th", "ths => ths.map(t => t.textContent.trim())")
    assert headers == ["Metric", "wider", "baseline"]  # the experiment page's order: newest first
    auc = page.eval_on_selector_all(
        "#compare-metrics tr[data-metric=auc] td", "tds => tds.map(t => t.textContent.trim())"
    )
    assert auc[1:] == ["0.7457", "0.7123"]  # rounded
    assert page.inner_text("#compare-metrics tr[data-metric=auc] td.best") == "0.7457"
    assert page.inner_text("#compare-metrics tr[data-metric=train_seconds] td.best") == "95.25"  # less time is better
    assert page.get_attribute("#compare-params tr[data-param=hidden]", "class") == "differs"
    assert page.get_attribute("#compare-params tr[data-param=lr]", "class") is None

    wait_until(page, "() => window.Chart && Object.keys(Chart.instances).length === 2", timeout=15000)
    charts = page.evaluate("""() => Object.values(Chart.instances).map(c => ({
        metric: c.canvas.dataset.metric, type: c.config.type, axis: c.options.scales.y.title.text,
        datasets: c.data.datasets.map(d => ({label: d.label, points: d.data.length}))}))""")
    by_metric = {c["metric"]: c for c in charts}
    assert set(by_metric) == {"auc", "train_seconds"}
    assert by_metric["auc"]["axis"] == "auc" and by_metric["train_seconds"]["axis"] == "train_seconds"
    assert by_metric["auc"]["type"] == "line"
    assert by_metric["auc"]["datasets"] == [{"label": "wider", "points": 5}, {"label": "baseline", "points": 5}]
    assert by_metric["train_seconds"]["type"] == "bar" and by_metric["train_seconds"]["datasets"][0]["points"] == 2

    out = Path(settings.VAR_DIR) / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out / "training-compare.png"), full_page=True)

    page.click("#compare-metrics thead a:has-text('wider')")  # to the run's page and back to its versions
    page.wait_for_url(f"**/experiments/training/runs/{runs['wider']}/")
    wait_until(page, "() => window.Chart && Object.keys(Chart.instances).length === 2", timeout=15000)
    assert "hidden" in page.inner_text("#run-params") and "0.7457" in page.inner_text("#run-metrics")
