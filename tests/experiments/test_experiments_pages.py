import mlflow
import pytest
from django.test import Client

from config import mlflow as mlflow_config
from experiments.selectors import TEAM_TAG

pytestmark = pytest.mark.django_db


@pytest.fixture
def tracking(settings, tmp_path):
    settings.MLFLOW_TRACKING_URI = f"sqlite:///{tmp_path / 'mlflow.db'}"
    settings.MLFLOW_ARTIFACT_ROOT = str(tmp_path / "mlruns")
    mlflow_config.configure.cache_clear()
    mlflow_config.configure()
    client = mlflow_config.client()

    def experiment(name, team, aucs):
        exp_id = mlflow_config.experiment_id(name)
        client.set_experiment_tag(exp_id, TEAM_TAG, team)
        for i, auc in enumerate(aucs):
            with mlflow.start_run(experiment_id=exp_id, run_name=f"{name}-run{i}"):
                mlflow.log_param("lr", 0.01 * (i + 1))
                mlflow.log_metric("auc", auc)
        return exp_id

    yield experiment
    mlflow_config.configure.cache_clear()


def test_experiments_are_scoped_to_teams(tracking, alice_api, alice, team_a, team_b):
    mine = tracking("ctr-a", "team-a", [0.71, 0.74])
    theirs = tracking("ctr-b", "team-b", [0.6])
    listed = alice_api.get("/api/v1/training-experiments/").json()
    assert [(e["name"], e["run_count"]) for e in listed] == [("ctr-a", 2)]
    runs = alice_api.get(f"/api/v1/training-experiments/{mine}/runs/").json()
    assert sorted(r["metrics"]["auc"] for r in runs) == [0.71, 0.74]
    assert alice_api.get(f"/api/v1/training-experiments/{theirs}/runs/").status_code == 404


def test_experiment_pages_show_runs_and_chart(tracking, alice, team_a):
    exp_id = tracking("ctr-a", "team-a", [0.71, 0.74])
    client = Client()
    client.force_login(alice)
    listing = client.get("/experiments/training/").content.decode()
    assert "ctr-a" in listing
    page = client.get(f"/experiments/training/{exp_id}/").content.decode()
    assert "ctr-a-run1" in page and "0.7400" in page and 'id="run-metrics"' in page and "run-chart-data" in page
