"""MLflow sources are scoped to teams, against a real MLflow store
(sqlite tracking + file artifacts): a version may come from `runs:/…` or `models:/…` only
when the run or registered model belongs to the model's team; another team's, an
unowned one and a missing one all answer the same 404."""

import shutil

import mlflow
import onnx
import pytest

from harness import factories
from kernel import mlflow as mlflow_config
from registry.models import ModelVersion

pytestmark = pytest.mark.django_db

MODELS = "/api/v1/models/"


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory):
    """An MLflow SQLite database with MLflow's schema and nothing in it: each test copies it
    (a store of its own) instead of running MLflow's migrations again."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    work = tmp_path_factory.mktemp("mlflow-template")
    SqlAlchemyStore(f"sqlite:///{work / 'mlflow.db'}", str(work / "mlruns")).engine.dispose()
    return work / "mlflow.db"


@pytest.fixture
def store(settings, tmp_path, onnx_path, empty_store):
    shutil.copyfile(empty_store, tmp_path / "mlflow.db")
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


# --- one rule for seeing a run and registering from it --------------------------------------
def _run_page(web, run_id):
    return web.get(f"/experiments/training/runs/{run_id}/")


def _run_api(api, run):
    experiment_id = mlflow_config.client().get_run(run).info.experiment_id
    return api.get(f"/api/v1/training-experiments/{experiment_id}/runs/{run}/")


def test_a_run_tagged_for_the_team_under_an_untagged_experiment_is_seen_and_registered(
    store, alice, alice_api, bob_api, team_a, team_b
):
    """Registration read the run's tag, visibility the experiment's: a developer could make
    a version from a run yet got 404 on it. Both now follow kernel.mlflow.run_team."""
    from django.test import Client

    factories.registered_model(team_a, name="red")
    with mlflow.start_run(
        experiment_id=mlflow_config.experiment_id("shared-untagged"), tags={mlflow_config.TEAM_TAG: "team-a"}
    ) as run:
        mlflow.log_metric("auc", 0.71)
    run_id = run.info.run_id
    web = Client()
    web.force_login(alice)
    # seen: the run's page and API, and its experiment listed with the one run alice may see
    assert _run_page(web, run_id).status_code == 200
    detail = _run_api(alice_api, run_id)
    assert detail.status_code == 200 and detail.json()["metrics"] == {"auc": 0.71}
    listed = {e["name"]: e for e in alice_api.get("/api/v1/training-experiments/").json()}
    assert listed["shared-untagged"]["run_count"] == 1 and listed["shared-untagged"]["team"] == ""
    runs = alice_api.get(f"/api/v1/training-experiments/{listed['shared-untagged']['id']}/runs/").json()
    assert [r["run_id"] for r in runs] == [run_id]
    # and registered from (the same rule), while another team neither sees nor registers it
    assert mlflow_config.source_team(f"runs:/{run_id}/model") == "team-a"
    assert _run_api(bob_api, run_id).status_code == 404
    assert "shared-untagged" not in {e["name"] for e in bob_api.get("/api/v1/training-experiments/").json()}


def test_a_run_of_another_team_inside_our_experiment_is_neither_seen_nor_registered(
    store, alice_api, bob_api, team_a, team_b
):
    factories.registered_model(team_a, name="red")
    factories.registered_model(team_b, name="blue")
    ours = store("red-exp", "team-a")
    with mlflow.start_run(
        experiment_id=mlflow_config.experiment_id("red-exp"), tags={mlflow_config.TEAM_TAG: "team-b"}
    ) as run:
        mlflow.log_metric("auc", 0.7)
    theirs = run.info.run_id  # in team-a's experiment, but the run says team-b: it is team-b's
    red_exp = mlflow_config.client().get_experiment_by_name("red-exp").experiment_id
    assert [r["run_id"] for r in alice_api.get(f"/api/v1/training-experiments/{red_exp}/runs/").json()] == [ours]
    assert _run_api(alice_api, theirs).status_code == 404
    assert _link(alice_api, "red", f"runs:/{theirs}/model").status_code == 404
    assert _run_api(bob_api, theirs).status_code == 200  # team-b sees it, in team-a's experiment
    assert _link(bob_api, "blue", f"runs:/{theirs}/model").status_code != 404


def test_untagged_foreign_and_missing_runs_are_one_404_that_says_what_to_tag(store, alice, alice_api, team_a):
    from django.test import Client

    factories.registered_model(team_a, name="red")
    untagged = store("loose", None)
    foreign = store("blue-exp", "team-b")
    missing = "0123456789abcdef0123456789abcdef"
    web = Client()
    web.force_login(alice)
    details, registrations = set(), set()
    for run_id in (untagged, foreign, missing):
        reply = alice_api.get(f"/api/v1/training-experiments/1/runs/{run_id}/")
        assert reply.status_code == 404 and reply.json()["code"] == "run_not_found"
        details.add(reply.json()["detail"].replace(run_id, "<id>"))
        page = _run_page(web, run_id)
        assert page.status_code == 404 and "modelplane.team=&lt;team&gt;" in page.content.decode()
        linked = _link(alice_api, "red", f"runs:/{run_id}/model")
        assert linked.status_code == 404 and linked.json()["code"] == "source_not_found"
        registrations.add(linked.json()["detail"].replace(run_id, "<id>"))
    assert len(details) == 1 and len(registrations) == 1  # nothing tells the three apart
    (detail,) = details
    (registration,) = registrations
    for message in (detail, registration):
        assert "modelplane.team=<team>" in message and "or its experiment" in message
