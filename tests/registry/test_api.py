import io
import pickle

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from harness import factories
from registry import storage
from registry.models import Event, ModelVersion, RegisteredModel

pytestmark = pytest.mark.django_db

MODELS = "/api/v1/models/"


def _upload(api, model_name, content: bytes, name="model.onnx", **extra):
    if "/" in name or "\\" in name:
        return _raw_multipart(api, model_name, content, name)
    return api.post(f"{MODELS}{model_name}/versions/", {"file": _file(content, name), **extra}, format="multipart")


def _raw_multipart(api, model_name, content: bytes, name: str):
    """Django's test client strips path parts from file names; a real client may not."""
    boundary = "----modelplane-test"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
            f"Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + content
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return api.generic(
        "POST", f"{MODELS}{model_name}/versions/", body, content_type=f"multipart/form-data; boundary={boundary}"
    )


def _file(content: bytes, name: str):
    f = io.BytesIO(content)
    f.name = name
    return f


@pytest.fixture
def model_a(team_a):
    return factories.registered_model(team_a, name="ranker-a")


@pytest.fixture
def model_b(team_b):
    return factories.registered_model(team_b, name="ranker-b")


@pytest.mark.parametrize(
    "method,url",
    [
        ("get", MODELS),
        ("post", MODELS),
        ("get", f"{MODELS}ranker-a/"),
        ("patch", f"{MODELS}ranker-a/"),
        ("delete", f"{MODELS}ranker-a/"),
        ("get", f"{MODELS}ranker-a/versions/"),
        ("post", f"{MODELS}ranker-a/versions/"),
        ("get", "/api/v1/versions/1/"),
        ("get", "/api/v1/versions/"),
        ("get", "/api/v1/events/"),
        ("get", "/api/v1/teams/"),
    ],
)
def test_every_endpoint_requires_authentication(model_a, method, url):
    response = getattr(APIClient(), method)(url)
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"


def test_create_and_list_models(alice_api, team_a):
    response = alice_api.post(
        MODELS, {"name": "ctr", "team": "team-a", "task": "ctr", "description": "d"}, format="json"
    )
    assert response.status_code == 201, response.json()
    assert response.json()["team"] == "team-a"
    listed = alice_api.get(MODELS).json()
    assert listed["count"] == 1 and listed["results"][0]["name"] == "ctr"
    assert Event.objects.filter(object_type="registry.registeredmodel", action="created").count() == 1


def test_validation_errors_name_the_field(alice_api, team_a):
    response = alice_api.post(MODELS, {"team": "team-a"}, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "required" and body["detail"].startswith("name:") and "name" in body["errors"]
    response = alice_api.post(MODELS, {"name": "Bad Name", "team": "team-a"}, format="json")
    assert response.status_code == 400 and response.json()["detail"].startswith("name:")


def test_scoping_other_teams_models_are_404(alice_api, model_a, model_b):
    names = [m["name"] for m in alice_api.get(MODELS).json()["results"]]
    assert names == ["ranker-a"]
    assert alice_api.get(f"{MODELS}ranker-b/").status_code == 404
    assert alice_api.get(f"{MODELS}ranker-b/versions/").status_code == 404
    assert alice_api.patch(f"{MODELS}ranker-b/", {"description": "x"}, format="json").status_code == 404
    assert alice_api.delete(f"{MODELS}ranker-b/").status_code == 404
    assert RegisteredModel.objects.filter(name="ranker-b").exists()


def test_cannot_attach_a_version_to_another_teams_model(alice_api, model_b, onnx_path):
    response = _upload(alice_api, "ranker-b", onnx_path.read_bytes())
    assert response.status_code == 404
    assert response.json()["code"] == "model_not_found"
    assert not ModelVersion.objects.exists()


def test_cannot_create_a_model_in_another_team(alice_api, team_b):
    response = alice_api.post(MODELS, {"name": "sneaky", "team": "team-b"}, format="json")
    assert response.status_code == 400 and response.json()["detail"].startswith("team:")
    assert not RegisteredModel.objects.exists()


def test_staff_see_every_team(api_for, staff, model_a, model_b):
    names = [m["name"] for m in api_for(staff).get(MODELS).json()["results"]]
    assert names == ["ranker-a", "ranker-b"]


def test_versions_of_other_teams_are_404(alice_api, bob_api, model_b, onnx_path):
    version_id = _upload(bob_api, "ranker-b", onnx_path.read_bytes()).json()["id"]
    assert bob_api.get(f"/api/v1/versions/{version_id}/").status_code == 200
    assert alice_api.get(f"/api/v1/versions/{version_id}/").status_code == 404
    assert alice_api.get("/api/v1/versions/").json()["count"] == 0
    assert alice_api.get("/api/v1/events/").json()["count"] == 0
    assert bob_api.get("/api/v1/events/").json()["count"] >= 1


def test_pagination_filtering_ordering(alice_api, team_a, team_b, staff, api_for):
    for i in range(7):
        factories.registered_model(team_a, name=f"a-{i:02d}")
    factories.registered_model(team_b, name="b-00")
    page = alice_api.get(MODELS, {"page_size": 3}).json()
    assert page["count"] == 7 and len(page["results"]) == 3 and page["next"]
    assert alice_api.get(page["next"]).json()["results"][0]["name"] == "a-03"
    assert [m["name"] for m in alice_api.get(MODELS, {"ordering": "-name", "page_size": 2}).json()["results"]] == [
        "a-06",
        "a-05",
    ]
    assert alice_api.get(MODELS, {"name": "a-0"}).json()["count"] == 7
    assert api_for(staff).get(MODELS, {"team": "team-b"}).json()["count"] == 1


def test_model_list_query_count_is_pinned(alice_api, team_a, django_assert_max_num_queries):
    for i in range(30):
        factories.registered_model(team_a, name=f"q-{i:02d}")
    with django_assert_max_num_queries(6):
        response = alice_api.get(MODELS)
    assert response.json()["count"] == 30


def test_update_and_delete_when_unused(alice_api, model_a, onnx_path):
    response = alice_api.patch(f"{MODELS}ranker-a/", {"description": "new"}, format="json")
    assert response.status_code == 200 and response.json()["description"] == "new"
    assert _upload(alice_api, "ranker-a", onnx_path.read_bytes()).status_code == 201
    response = alice_api.delete(f"{MODELS}ranker-a/")
    assert response.status_code == 409 and response.json()["code"] == "model_in_use"


def test_upload_onnx_reads_signature(alice_api, model_a, onnx_path):
    response = _upload(alice_api, "ranker-a", onnx_path.read_bytes(), name="ctr.onnx", metrics='{"auc": 0.75}')
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["version"] == 1 and body["framework"] == "onnx" and body["metrics"] == {"auc": 0.75}
    assert body["signature"]["inputs"][0] == {"name": "dense", "dtype": "float32", "shape": [-1, 13]}
    detail = alice_api.get(f"/api/v1/versions/{body['id']}/").json()
    assert detail["signature"]["outputs"][0]["name"] == "ctr"
    assert storage.absolute(f"sha256/{body['file_sha256'][:2]}/{body['file_sha256']}.onnx").exists()


@pytest.mark.parametrize(
    "content,name,status,code,says",
    [
        (b"", "m.onnx", 400, None, "empty"),
        (b"this is not a model at all" * 10, "m.onnx", 400, "not_onnx", "ONNX"),
        (pickle.dumps({"weights": [1, 2, 3]}), "m.onnx", 400, "not_onnx", "pickle"),
        (b"PK\x03\x04" + b"\0" * 100, "m.onnx", 400, "not_onnx", "zip"),
        ("TRUNCATED", "m.onnx", 400, "not_onnx", "truncated"),
        ("VALID", "../../etc/m.onnx", 400, "parse_error", "path parts"),
        ("VALID", "model.pkl", 400, "not_onnx", ".onnx"),
    ],
)
def test_bad_uploads_are_refused_and_nothing_is_stored(
    alice_api, model_a, onnx_path, content, name, status, code, says
):
    valid = onnx_path.read_bytes()
    if content == "TRUNCATED":
        content = valid[: len(valid) // 2]
    elif content == "VALID":
        content = valid
    response = _upload(alice_api, "ranker-a", content, name=name)
    assert response.status_code == status, response.json()
    body = response.json()
    assert says.lower() in body["detail"].lower(), body
    if code:
        assert body["code"] == code
    assert not ModelVersion.objects.exists()
    assert [p for p in storage.root().rglob("*") if p.is_file()] == []


def test_oversized_upload_is_413(alice_api, model_a, settings):
    settings.MAX_UPLOAD_MB = 1
    response = _upload(alice_api, "ranker-a", b"\0" * (1024 * 1024 + 200 * 1024))
    assert response.status_code == 413
    assert "MAX_UPLOAD_MB" in response.json()["detail"]
    assert not ModelVersion.objects.exists()


def test_version_needs_exactly_one_source(alice_api, model_a, onnx_path):
    response = alice_api.post(f"{MODELS}ranker-a/versions/", {}, format="multipart")
    assert response.status_code == 400 and response.json()["detail"].startswith("file:")


def test_mlflow_uri_that_does_not_resolve(alice_api, model_a, settings, tmp_path):
    settings.MLFLOW_TRACKING_URI = f"sqlite:///{tmp_path / 'mlflow.db'}"
    from kernel import mlflow as mlflow_config

    mlflow_config.configure.cache_clear()
    response = alice_api.post(
        f"{MODELS}ranker-a/versions/", {"source_uri": "runs:/0123456789abcdef/model"}, format="json"
    )
    assert response.status_code == 404
    assert response.json()["code"] == "source_not_found" and response.json()["detail"].startswith("source_uri:")
    response = alice_api.post(f"{MODELS}ranker-a/versions/", {"source_uri": "file:///etc/passwd"}, format="json")
    assert response.status_code == 400 and response.json()["code"] == "bad_source_uri"
    assert not ModelVersion.objects.exists()


def test_mlflow_onnx_model_registers(alice_api, model_a, settings, tmp_path, onnx_path):
    import mlflow
    import onnx

    from kernel import mlflow as mlflow_config

    settings.MLFLOW_TRACKING_URI = f"sqlite:///{tmp_path / 'mlflow.db'}"
    settings.MLFLOW_ARTIFACT_ROOT = str(tmp_path / "mlruns")
    mlflow_config.configure.cache_clear()
    mlflow_config.configure()
    with mlflow.start_run(experiment_id=mlflow_config.experiment_id("api-test", team="team-a")) as run:
        mlflow.log_metric("auc", 0.71)
        mlflow.onnx.log_model(onnx.load(str(onnx_path)), name="model")
    response = alice_api.post(
        f"{MODELS}ranker-a/versions/", {"source_uri": f"runs:/{run.info.run_id}/model"}, format="json"
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["source"] == "mlflow" and body["framework"] == "onnx" and body["metrics"]["auc"] == pytest.approx(0.71)
    mlflow_config.configure.cache_clear()


def test_events_are_read_only(alice_api, model_a):
    assert alice_api.post("/api/v1/events/", {}, format="json").status_code == 405


def test_teams_lists_my_roles(alice_api, team_a, team_b):
    teams = alice_api.get("/api/v1/teams/").json()["results"]
    assert teams == [{"id": team_a.pk, "name": "team-a", "role": "developer"}]


def test_openapi_schema_and_docs(alice_api):
    schema = alice_api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    assert schema["openapi"].startswith("3.")
    for path in (
        "/api/v1/models/",
        "/api/v1/models/{model_name}/versions/",
        "/api/v1/versions/{id}/",
        "/api/v1/events/",
    ):
        assert path in schema["paths"], path
    assert alice_api.get(reverse("api-docs")).status_code == 200
