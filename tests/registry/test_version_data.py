"""A version carries its data: /api/v1/versions/{id}/data/ checks an
input example or labelled validation set against the signature, stores it atomically,
and builds validate and benchmark on it."""

import io
import json
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness import factories
from registry import storage
from registry.factory import runner
from registry.models import Artifact, BuildStatus, VersionData
from registry.services import builds as build_services
from tests.registry.build_helpers import fast_build_settings, upload_version
from tests.registry.model_families import small_table_ranker

pytestmark = pytest.mark.django_db


def _file(content: bytes, name: str):
    f = io.BytesIO(content)
    f.name = name
    return f


def _npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _rows(n, seed=0, rows_in_table=500):
    rng = np.random.default_rng(seed)
    return {
        "features": rng.standard_normal((n, 8)).astype(np.float32),
        "item_id": rng.integers(0, rows_in_table, (n, 1)),
        "label": (rng.random(n) < 0.3).astype(np.int64),
    }


@pytest.fixture
def version(alice, team_a, tmp_path):
    model = factories.registered_model(team_a, name="small-ranker")
    return upload_version(alice, model, small_table_ranker(tmp_path / "small.onnx"))


def _post(api, version, content, name="val.npz", **extra):
    return api.post(f"/api/v1/versions/{version.pk}/data/", {"file": _file(content, name), **extra}, format="multipart")


def _stored_npz() -> list:
    return list((storage.root() / "sha256").rglob("*.npz")) if (storage.root() / "sha256").exists() else []


def test_npz_validation_set_is_checked_stored_and_listed(alice_api, version):
    response = _post(alice_api, version, _npz(**_rows(300)))
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["kind"] == "validation" and body["format"] == "npz" and body["rows"] == 300 and body["label"] == "label"
    assert body["summary"]["inputs"]["item_id"] == {"dtype": "int64", "shape": [300, 1]}
    row = VersionData.objects.get(version=version)
    with np.load(storage.absolute(row.path), allow_pickle=False) as stored:
        assert sorted(stored.files) == ["features", "item_id", "label"] and stored["label"].dtype == np.float64
    listed = alice_api.get(f"/api/v1/versions/{version.pk}/data/").json()
    assert [d["kind"] for d in listed] == ["validation"]


def test_parquet_with_list_columns_and_json_lines_are_read(alice_api, version):
    data = _rows(50, seed=1)
    table = pa.table(
        {
            "features": [list(map(float, r)) for r in data["features"]],
            "item_id": [list(map(int, r)) for r in data["item_id"]],
            "clicked": data["label"],
        }
    )
    sink = io.BytesIO()
    pq.write_table(table, sink)
    response = _post(alice_api, version, sink.getvalue(), "val.parquet", label="clicked")
    assert response.status_code == 201, response.json()
    assert response.json()["format"] == "parquet" and response.json()["label"] == "clicked"
    # item_id is [batch, 1]: a bare number per row is taken as that one value
    lines = "\n".join(
        json.dumps({"features": r.tolist(), "item_id": int(i[0])})
        for r, i in zip(data["features"][:3], data["item_id"][:3])
    )
    response = _post(alice_api, version, lines.encode(), "example.jsonl", kind="example")
    assert response.status_code == 201, response.json()
    assert response.json()["rows"] == 3 and response.json()["label"] == ""
    assert VersionData.objects.filter(version=version).count() == 2


@pytest.mark.parametrize(
    "mutate,status,needle",
    [
        (lambda d: d.pop("item_id"), 400, "missing input(s) ['item_id']"),
        (
            lambda d: d.update(item_id=d["item_id"].astype(np.float32)),
            400,
            "input 'item_id' is int64 in the model; the data holds float32",
        ),
        (
            lambda d: d.update(features=d["features"][:, :5]),
            400,
            "input 'features' has shape [20, 5]; the model takes [-1, 8]",
        ),
        (lambda d: d.update(item_id=d["item_id"][:10]), 400, "input 'item_id' has 10 rows, other inputs have 20"),
        (lambda d: d.update(user_id=d["item_id"]), 400, "unknown name(s) ['user_id']"),
        (lambda d: d.pop("label"), 400, "no label 'label'"),
        (lambda d: d.update(label=np.full(20, np.nan)), 400, "label 'label' has NaN/Inf values"),
        (
            lambda d: d.update(features=np.array([["a"] * 8] * 20)),
            400,
            "input 'features' is float32 in the model; the data holds strings",
        ),
    ],
)
def test_data_that_disagrees_with_the_signature_is_refused_naming_what(alice_api, version, mutate, status, needle):
    data = _rows(20)
    mutate(data)
    response = _post(alice_api, version, _npz(**data))
    assert response.status_code == status and needle in response.json()["detail"], response.json()
    assert not VersionData.objects.exists() and not _stored_npz()


def test_pickles_are_never_loaded(alice_api, version):
    response = _post(alice_api, version, pickle.dumps({"features": [1.0]}), "val.pkl")
    assert response.status_code == 400 and "pickle" in response.json()["detail"]
    object_npz = _npz(
        features=np.array([object()] * 3, dtype=object), item_id=np.zeros((3, 1), np.int64), label=np.zeros(3)
    )
    response = _post(alice_api, version, object_npz)
    assert response.status_code == 400 and "needs pickle" in response.json()["detail"]
    assert not VersionData.objects.exists()


def test_size_and_row_limits(alice_api, version, settings):
    settings.VERSION_DATA_MAX_ROWS = 10
    response = _post(alice_api, version, _npz(**_rows(20)))
    assert response.status_code == 400 and "20 rows is over the 10-row limit" in response.json()["detail"]
    settings.VERSION_DATA_MAX_MB = 0
    response = _post(alice_api, version, _npz(**_rows(5)))
    assert response.status_code == 413 and "VERSION_DATA_MAX_MB" in response.json()["detail"]
    assert not VersionData.objects.exists() and not _stored_npz()


def test_replacing_keeps_one_row_and_drops_the_old_file_and_delete_removes(alice_api, version):
    assert _post(alice_api, version, _npz(**_rows(30))).status_code == 201
    first = VersionData.objects.get(version=version).path
    assert _post(alice_api, version, _npz(**_rows(40, seed=2))).status_code == 201
    row = VersionData.objects.get(version=version)
    assert row.rows == 40 and row.path != first and not storage.absolute(first).exists()
    assert alice_api.delete(f"/api/v1/versions/{version.pk}/data/?kind=validation").status_code == 204
    assert not VersionData.objects.exists() and not storage.absolute(row.path).exists()
    assert alice_api.delete(f"/api/v1/versions/{version.pk}/data/?kind=validation").status_code == 404
    assert alice_api.delete(f"/api/v1/versions/{version.pk}/data/?kind=bogus").status_code == 400


def test_another_teams_version_is_a_404(api_for, bob, version):
    bob_api = api_for(bob)
    assert bob_api.get(f"/api/v1/versions/{version.pk}/data/").status_code == 404
    assert _post(bob_api, version, _npz(**_rows(5))).status_code == 404
    assert not VersionData.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_build_validates_and_benchmarks_on_the_attached_data_with_auc(alice, alice_api, version, settings):
    fast_build_settings(settings)
    assert _post(alice_api, version, _npz(**_rows(400, seed=5))).status_code == 201
    build, _ = build_services.build_start(user=alice, version=version)
    runner.run(build.pk, owner="test-worker:1")
    build.refresh_from_db()
    assert build.status == BuildStatus.SUCCEEDED, build.error
    validate = next(s for s in build.stages if s["name"] == "validate")
    assert "validating on 400 rows (the version's validation set)" in validate["log"]
    assert "synthetic" not in validate["log"] and "quality checks skipped" not in validate["log"]
    bench = next(s for s in build.stages if s["name"] == "benchmark")
    assert "benchmark inputs: the version's validation set" in bench["log"]
    for artifact in Artifact.objects.filter(build=build):
        assert artifact.validation["data"] == "validation set" and artifact.validation["quality_checks_skipped"] == {}
        assert 0.0 <= artifact.validation["original_auc"] <= 1.0 and artifact.validation["original_logloss"] > 0
        assert artifact.benchmark["data"] == "validation set"


def test_data_uploaded_with_the_version_and_refused_data_leaves_no_version(alice_api, team_a, tmp_path):
    from registry.models import ModelVersion

    factories.registered_model(team_a, name="with-data")
    onnx_bytes = small_table_ranker(tmp_path / "m.onnx").read_bytes()
    bad = _rows(10)
    bad.pop("item_id")
    response = alice_api.post(
        "/api/v1/models/with-data/versions/",
        {"file": _file(onnx_bytes, "m.onnx"), "validation_data": _file(_npz(**bad), "v.npz")},
        format="multipart",
    )
    assert response.status_code == 400 and response.json()["detail"].startswith(
        "validation_data: missing input(s) ['item_id']"
    ), response.json()
    assert response.json()["errors"] == {"validation_data": [response.json()["detail"]]}
    assert not ModelVersion.objects.exists() and not VersionData.objects.exists()
    assert not list((storage.root() / "sha256").rglob("*.onnx")) and not _stored_npz()
    response = alice_api.post(
        "/api/v1/models/with-data/versions/",
        {
            "file": _file(onnx_bytes, "m.onnx"),
            "validation_data": _file(_npz(**{("y" if k == "label" else k): v for k, v in _rows(25).items()}), "v.npz"),
            "label": "y",
            "input_example": _file(_npz(**{k: v[:2] for k, v in _rows(2).items() if k != "label"}), "e.npz"),
        },
        format="multipart",
    )
    assert response.status_code == 201, response.json()
    version = ModelVersion.objects.get()
    kinds = {d.kind: d for d in VersionData.objects.filter(version=version)}
    assert set(kinds) == {"validation", "example"} and kinds["validation"].rows == 25 and kinds["example"].rows == 2


@pytest.mark.django_db(transaction=True)
def test_the_input_example_logged_in_mlflow_is_what_the_build_runs_on(alice, alice_api, team_a, settings, tmp_path):
    import mlflow
    import onnx

    from kernel import mlflow as mlflow_config

    fast_build_settings(settings)
    settings.MLFLOW_TRACKING_URI = f"sqlite:///{tmp_path / 'mlflow.db'}"
    settings.MLFLOW_ARTIFACT_ROOT = str(tmp_path / "mlruns")
    mlflow_config.configure.cache_clear()
    mlflow_config.configure()
    example = {k: v for k, v in _rows(6, seed=9).items() if k != "label"}
    try:
        with mlflow.start_run(experiment_id=mlflow_config.experiment_id("data-test", team=team_a.name)) as run:
            mlflow.onnx.log_model(
                onnx.load(str(small_table_ranker(tmp_path / "m.onnx"))), name="model", input_example=example
            )
        factories.registered_model(team_a, name="from-mlflow")
        response = alice_api.post(
            "/api/v1/models/from-mlflow/versions/", {"source_uri": f"runs:/{run.info.run_id}/model"}, format="json"
        )
        assert response.status_code == 201, response.json()
        from registry.models import ModelVersion

        version = ModelVersion.objects.get(pk=response.json()["id"])
        build, _ = build_services.build_start(user=alice, version=version)
        runner.run(build.pk, owner="test-worker:1")
    finally:
        mlflow_config.configure.cache_clear()
    build.refresh_from_db()
    assert build.status == BuildStatus.SUCCEEDED, build.error
    canonicalize = next(s for s in build.stages if s["name"] == "canonicalize")
    assert "using the input example logged with the MLflow model (features, item_id)" in canonicalize["log"]
    validate = next(s for s in build.stages if s["name"] == "validate")
    assert "the version's input example" in validate["log"] and "synthetic" not in validate["log"]
    assert all(a.validation["data"] == "input example" for a in Artifact.objects.filter(build=build))


@pytest.mark.django_db(transaction=True)
def test_a_validation_dataset_logged_to_the_mlflow_run_is_validated_on_and_outside_files_are_not_read(
    alice, alice_api, team_a, settings, tmp_path
):
    import mlflow
    import onnx
    import pandas as pd

    from kernel import mlflow as mlflow_config

    fast_build_settings(settings)
    settings.MLFLOW_TRACKING_URI = f"sqlite:///{tmp_path / 'mlflow.db'}"
    settings.MLFLOW_ARTIFACT_ROOT = str(tmp_path / "mlruns")
    mlflow_config.configure.cache_clear()
    mlflow_config.configure()
    rows = _rows(120, seed=4)
    frame = pd.DataFrame(
        {"features": list(rows["features"]), "item_id": list(rows["item_id"]), "clicked": rows["label"]}
    )
    inside, outside = tmp_path / "val.parquet", tmp_path / "elsewhere.parquet"
    frame.to_parquet(inside)
    frame.to_parquet(outside)
    try:
        with mlflow.start_run(experiment_id=mlflow_config.experiment_id("data-test", team=team_a.name)) as run:
            mlflow.onnx.log_model(onnx.load(str(small_table_ranker(tmp_path / "m.onnx"))), name="model")
            mlflow.log_input(mlflow.data.from_pandas(frame, source=str(outside), name="not-ours"), context="validation")
            mlflow.log_artifact(str(inside), "data")
            uri = mlflow.get_artifact_uri("data/val.parquet")
            mlflow.log_input(
                mlflow.data.from_pandas(frame, source=uri, targets="clicked", name="val"), context="validation"
            )
        factories.registered_model(team_a, name="from-mlflow")
        response = alice_api.post(
            "/api/v1/models/from-mlflow/versions/", {"source_uri": f"runs:/{run.info.run_id}/model"}, format="json"
        )
        assert response.status_code == 201, response.json()
        from registry.models import ModelVersion

        build, _ = build_services.build_start(user=alice, version=ModelVersion.objects.get(pk=response.json()["id"]))
        runner.run(build.pk, owner="test-worker:1")
    finally:
        mlflow_config.configure.cache_clear()
    build.refresh_from_db()
    assert build.status == BuildStatus.SUCCEEDED, build.error
    canonicalize = next(s for s in build.stages if s["name"] == "canonicalize")["log"]
    assert "MLflow dataset 'not-ours' (validation) is not one of the run's artifacts; not read" in canonicalize
    assert "validating on the MLflow run's dataset: 120 rows, label 'clicked'" in canonicalize
    validate = next(s for s in build.stages if s["name"] == "validate")["log"]
    assert "validating on 120 rows (the version's validation set)" in validate
    fp32 = Artifact.objects.get(build=build, variant="onnx-fp32")
    assert fp32.validation["data"] == "validation set" and 0.0 <= fp32.validation["original_auc"] <= 1.0
