"""MLflow sources are scoped to teams (issue 11 item 3), against a real MLflow store
(sqlite tracking + file artifacts): a version may come from `runs:/…` or `models:/…` only
when the run or registered model belongs to the model's team; another team's, an
unowned one and a missing one all answer the same 404."""

import mlflow
import onnx
import pytest

from harness import factories
from kernel import mlflow as mlflow_config
from registry.models import ModelVersion

pytestmark = pytest.mark.django_db

MODELS = "/api/v1/models/"


@pytest.fixture
def store(settings, tmp_path, onnx_path):
    settings.MLFLOW_TRACKING_URI = f"sqlite:///{tmp_path / 'mlflow.db'}"
    settings.MLFLOW_ARTIFACT_ROOT = str(tmp_path / "mlruns")
    mlflow_config.configure.cache_clear()
    mlflow_config.configure()

    logged_uris = {}

    def log_run(experiment: str, team: str | None, *, register_as: str = "", model_team_tag: str | None = None) -> str:
        with mlflow.start_run(experiment_id=mlflow_config.experiment_id(experiment, team=team)) as run:
            mlflow.log_metric("auc", 0.7)
            info = mlflow.onnx.log_model(onnx.load(str(onnx_path)), name="model")
        logged_uris[run.info.run_id] = info.model_uri
        if register_as:
            client = mlflow_config.client()
            mlflow.register_model(f"runs:/{run.info.run_id}/model", register_as)
            if model_team_tag:
                client.set_registered_model_tag(register_as, mlflow_config.TEAM_TAG, model_team_tag)
        return run.info.run_id

    log_run.logged_uris = logged_uris
    yield log_run
    mlflow_config.configure.cache_clear()


def _link(api, model: str, uri: str):
    return api.post(f"{MODELS}{model}/versions/", {"source_uri": uri}, format="json")


def test_a_run_of_another_team_is_not_found(store, alice_api, bob_api, team_a, team_b):
    factories.registered_model(team_a, name="red")
    factories.registered_model(team_b, name="blue")
    blue_run = store("blue-exp", "team-b")
    red_run = store("red-exp", "team-a")
    stolen = _link(alice_api, "red", f"runs:/{blue_run}/model")
    missing = _link(alice_api, "red", "runs:/0123456789abcdef0123456789abcdef/model")
    assert stolen.status_code == 404 and stolen.json()["code"] == "source_not_found"
    # the same answer as for a run that does not exist: nothing tells red that blue's run is there
    assert missing.status_code == 404 and missing.json()["code"] == "source_not_found"
    assert blue_run not in stolen.json()["detail"].replace(f"runs:/{blue_run}/model", "")
    assert not ModelVersion.objects.exists()
    assert _link(alice_api, "red", f"runs:/{red_run}/model").status_code == 201
    assert _link(bob_api, "blue", f"runs:/{blue_run}/model").status_code == 201
    assert _link(bob_api, "blue", f"runs:/{red_run}/model").status_code == 404
    # MLflow 3's logged-model URIs (what log_model returns) are scoped the same way
    red_logged, blue_logged = store.logged_uris[red_run], store.logged_uris[blue_run]
    assert red_logged.startswith("models:/m-")
    assert _link(alice_api, "red", blue_logged).status_code == 404
    assert _link(alice_api, "red", red_logged).status_code == 201


def test_a_run_tagged_on_the_run_or_its_experiment_counts(store, alice_api, team_a):
    factories.registered_model(team_a, name="red")
    untagged = store("loose", None)
    assert _link(alice_api, "red", f"runs:/{untagged}/model").status_code == 404  # no team: nobody's
    with mlflow.start_run(
        experiment_id=mlflow_config.experiment_id("loose"), tags={mlflow_config.TEAM_TAG: "team-a"}
    ) as run:
        mlflow.log_metric("auc", 0.7)
    assert mlflow_config.source_team(f"runs:/{untagged}/model") == ""
    assert mlflow_config.source_team(f"runs:/{run.info.run_id}/model") == "team-a"
    mlflow_config.experiment_id("loose", team="team-a")  # an untagged experiment is claimed by a team
    assert mlflow_config.source_team(f"runs:/{untagged}/model") == "team-a"
    with pytest.raises(mlflow_config.ExperimentOfAnotherTeam):
        mlflow_config.experiment_id("loose", team="team-b")


def test_registered_models_of_another_team_are_not_found(store, alice_api, bob_api, team_a, team_b):
    factories.registered_model(team_a, name="red")
    factories.registered_model(team_b, name="blue")
    store("blue-exp", "team-b", register_as="blue-ctr")
    store("red-exp", "team-a", register_as="red-ctr", model_team_tag="team-a")
    for uri in ("models:/blue-ctr/1", "models:/blue-ctr/latest", "models:/nope/1"):
        response = _link(alice_api, "red", uri)
        assert response.status_code == 404 and response.json()["code"] == "source_not_found", (uri, response.json())
    assert _link(alice_api, "red", "models:/red-ctr/1").status_code == 201
    assert _link(bob_api, "blue", "models:/blue-ctr/1").status_code == 201
    # a registered model tagged for team-a whose run is team-b's belongs to neither
    store("blue-exp", "team-b", register_as="mixed", model_team_tag="team-a")
    assert _link(alice_api, "red", "models:/mixed/1").status_code == 404
    assert _link(bob_api, "blue", "models:/mixed/1").status_code == 404


def test_members_see_their_teams_experiments_created_through_the_platform(
    store, alice_api, bob_api, staff, api_for, team_a, team_b
):
    store("red-exp", "team-a")
    store("blue-exp", "team-b")
    assert [e["name"] for e in alice_api.get("/api/v1/training-experiments/").json()] == ["red-exp"]
    assert [e["name"] for e in bob_api.get("/api/v1/training-experiments/").json()] == ["blue-exp"]
    assert {e["name"] for e in api_for(staff).get("/api/v1/training-experiments/").json()} >= {"red-exp", "blue-exp"}
