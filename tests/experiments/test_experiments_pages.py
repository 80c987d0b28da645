"""Training experiments (MLflow runs) in the API and the dashboard: team scoping, the run
page (params, metric history, artifacts, versions registered from it), comparison of runs,
links both ways between versions and runs, rounded figures, one chart per metric."""

import json

import mlflow
import pytest
from django.test import Client

from experiments.figures import metric_table, rounded
from experiments.selectors.training import TEAM_TAG
from kernel import mlflow as mlflow_config
from registry.models import ModelVersion, VersionSource

pytestmark = pytest.mark.django_db


@pytest.fixture
def tracking(mlflow_store, tmp_path):
    client = mlflow_store

    def experiment(name, team, aucs, *, epochs=1):
        """One run per AUC: params, `auc` logged per epoch ending at the given value,
        `train_seconds` (another unit), and a small artifact."""
        exp_id = mlflow_config.experiment_id(name)
        client.set_experiment_tag(exp_id, TEAM_TAG, team)
        run_ids = []
        for i, auc in enumerate(aucs):
            with mlflow.start_run(experiment_id=exp_id, run_name=f"{name}-run{i}") as run:
                mlflow.log_param("lr", 0.01 * (i + 1))
                mlflow.log_param("layers", 3)
                for epoch in range(epochs):
                    mlflow.log_metric("auc", auc - 0.05 * (epochs - 1 - epoch), step=epoch)
                mlflow.log_metric("train_seconds", 100.0 + 17.3 * i)
                notes = tmp_path / "notes.txt"
                notes.write_text("x" * (100 + i))
                mlflow.log_artifact(str(notes), artifact_path="reports")
                run_ids.append(run.info.run_id)
        return exp_id, run_ids

    return experiment


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_experiments_api_is_scoped_and_moved_under_training(tracking, alice_api, alice, team_a, team_b):
    mine, runs = tracking("ctr-a", "team-a", [0.71, 0.74])
    theirs, their_runs = tracking("ctr-b", "team-b", [0.6])
    listed = alice_api.get("/api/v1/training-experiments/").json()
    assert [(e["name"], e["run_count"]) for e in listed] == [("ctr-a", 2)]
    listed_runs = alice_api.get(f"/api/v1/training-experiments/{mine}/runs/").json()
    assert sorted(r["metrics"]["auc"] for r in listed_runs) == [0.71, 0.74]
    assert alice_api.get(f"/api/v1/training-experiments/{theirs}/runs/").status_code == 404
    assert alice_api.get(f"/api/v1/training-experiments/{theirs}/runs/{their_runs[0]}/").status_code == 404
    assert alice_api.get(f"/api/v1/training-experiments/{mine}/runs/{their_runs[0]}/").status_code == 404
    assert alice_api.get(f"/api/v1/training-experiments/{mine}/runs/not-a-run/").status_code == 404
    online = alice_api.get("/api/v1/experiments/")  # the old path is for online experiments now
    assert online.status_code == 200 and "ctr-a" not in online.content.decode()


def test_run_detail_api_has_history_artifacts_and_versions(tracking, alice_api, alice, team_a):
    exp_id, runs = tracking("ctr-a", "team-a", [0.74], epochs=3)
    from harness import factories

    model = factories.registered_model(team_a, name="ctr")
    version = ModelVersion.objects.create(
        model=model,
        version=1,
        source=VersionSource.MLFLOW,
        source_uri=f"runs:/{runs[0]}/model",
        tags={"mlflow_run_id": runs[0]},
    )
    body = alice_api.get(f"/api/v1/training-experiments/{exp_id}/runs/{runs[0]}/").json()
    assert [round(p["value"], 2) for p in body["metric_history"]["auc"]] == [0.64, 0.69, 0.74]
    assert [p["step"] for p in body["metric_history"]["auc"]] == [0, 1, 2]
    assert body["artifacts"] == [{"path": "reports/notes.txt", "size": 100}]
    assert body["versions"] == [
        {
            "id": version.pk,
            "model": "ctr",
            "version": 1,
            "source_uri": f"runs:/{runs[0]}/model",
            "status": version.status,
        }
    ]


def test_experiment_page_has_one_chart_per_metric_rounded_figures_and_run_links(tracking, alice, team_a):
    exp_id, runs = tracking("ctr-a", "team-a", [0.712345678, 0.74])
    client = _client(alice)
    assert "ctr-a" in client.get("/experiments/training/").content.decode()
    page = client.get(f"/experiments/training/{exp_id}/").content.decode()
    table = page[page.index('<table id="runs">') : page.index("</table>", page.index('<table id="runs">'))]
    assert "0.7123" in table and "0.712345678" not in table  # rounded in the table (the chart's tooltip rounds too)
    charts = json.loads(page.split('<script id="training-charts" type="application/json">')[1].split("</script>")[0])
    assert sorted(c["metric"] for c in charts) == ["auc", "train_seconds"]  # separate axes: AUC never next to seconds
    assert f'href="/experiments/training/runs/{runs[0]}/"' in page
    assert f'name="runs" value="{runs[1]}"' in page and f"/experiments/training/{exp_id}/compare/" in page


def test_run_page_and_links_both_ways_with_versions(tracking, alice, bob, team_a):
    exp_id, runs = tracking("ctr-a", "team-a", [0.74], epochs=4)
    from harness import factories

    model = factories.registered_model(team_a, name="ctr")
    from_run = ModelVersion.objects.create(
        model=model, version=1, source=VersionSource.MLFLOW, source_uri=f"runs:/{runs[0]}/model"
    )
    from_registry = ModelVersion.objects.create(
        model=model,
        version=2,
        source=VersionSource.MLFLOW,
        source_uri="models:/ctr-mlflow/3",
        tags={"mlflow_run_id": runs[0]},
    )
    client = _client(alice)
    page = client.get(f"/experiments/training/runs/{runs[0]}/").content.decode()
    assert "reports/notes.txt" in page and "100\xa0bytes" in page
    assert "lr" in page and "0.01" in page
    assert f'href="/models/versions/{from_run.pk}/"' in page and f'href="/models/versions/{from_registry.pk}/"' in page
    charts = json.loads(page.split('<script id="training-charts" type="application/json">')[1].split("</script>")[0])
    auc = next(c for c in charts if c["metric"] == "auc")
    assert [p["x"] for p in auc["points"]] == [0, 1, 2, 3]
    for version in (from_run, from_registry):  # the version page links its run (runs:/ and models:/ sources)
        version_page = client.get(f"/models/versions/{version.pk}/").content.decode()
        assert f'id="training-run" href="/experiments/training/runs/{runs[0]}/"' in version_page
    assert _client(bob).get(f"/experiments/training/runs/{runs[0]}/").status_code == 404
    assert client.get("/experiments/training/runs/0123/").status_code == 404


def test_compare_runs_side_by_side(tracking, alice, team_a):
    exp_id, runs = tracking("ctr-a", "team-a", [0.71, 0.74, 0.73], epochs=2)
    client = _client(alice)
    response = client.get(f"/experiments/training/{exp_id}/compare/", {"runs": [runs[0], runs[1]]})
    page = response.content.decode()
    assert response.status_code == 200
    row = page.split('<tr data-metric="auc">')[1].split("</tr>")[0]
    assert "0.71" in row and "<strong>0.74</strong>" in row  # the best AUC stands out
    seconds = page.split('<tr data-metric="train_seconds">')[1].split("</tr>")[0]
    assert "<strong>100</strong>" in seconds and "117.3" in seconds  # less time is better
    assert '<tr data-param="lr" class="differs">' in page and '<tr data-param="layers">' in page
    charts = json.loads(page.split('<script id="training-charts" type="application/json">')[1].split("</script>")[0])
    assert {c["metric"]: c["kind"] for c in charts} == {"auc": "line", "train_seconds": "bar"}
    assert client.get(f"/experiments/training/{exp_id}/compare/", {"runs": [runs[0]]}).status_code == 400
    other, other_runs = tracking("ctr-other", "team-a", [0.5])
    assert client.get(f"/experiments/training/{exp_id}/compare/", {"runs": [runs[0], other_runs[0]]}).status_code == 404


def test_rounding_and_best_marking():
    assert [rounded(v) for v in (0.7412345, 1234.56, 3.0, None, 117.3, 0.000123456)] == [
        "0.7412",
        "1235",
        "3",
        "—",
        "117.3",
        "0.0001235",
    ]
    rows = metric_table(
        [{"metrics": {"auc": 0.7, "val_loss": 0.3}}, {"metrics": {"auc": 0.8, "val_loss": 0.2}}], ["auc", "val_loss"]
    )
    assert [[c["best"] for c in r["cells"]] for r in rows] == [[False, True], [False, True]]
