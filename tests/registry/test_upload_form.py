"""The dashboard's upload form takes training metrics (a JSON object of name -> number) and a
labelled validation set (the API's parsers and checks); a bad value is shown on its own
field and registers nothing; the version page prints metrics rounded."""

import io
import json

import numpy as np
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from harness import factories
from registry.models import ModelVersion, VersionData
from tests.registry.model_families import small_table_ranker

pytestmark = pytest.mark.django_db


@pytest.fixture
def web(alice):
    client = Client()
    client.force_login(alice)
    return client


@pytest.fixture
def onnx_bytes(tmp_path) -> bytes:
    return small_table_ranker(tmp_path / "small.onnx").read_bytes()


def _npz(rows: int = 50, **override) -> bytes:
    rng = np.random.default_rng(0)
    arrays = {
        "features": rng.standard_normal((rows, 8)).astype(np.float32),
        "item_id": rng.integers(0, 500, (rows, 1)),
        "label": (rng.random(rows) < 0.3).astype(np.int64),
        **override,
    }
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _post(web, onnx_bytes, **fields):
    data = {"file": SimpleUploadedFile("ranker.onnx", onnx_bytes), **fields}
    return web.post("/models/ranker/versions/new/", data)


def test_upload_with_metrics_and_validation_data(web, team_a, onnx_bytes):
    factories.registered_model(team_a, name="ranker")
    response = _post(
        web,
        onnx_bytes,
        metrics=json.dumps({"auc": 0.7412345678, "logloss": 0.4, "rows": 120000}),
        validation_data=SimpleUploadedFile("val.npz", _npz()),
    )
    assert response.status_code == 302, response.context["form"].errors
    version = ModelVersion.objects.get()
    assert version.metrics == {"auc": 0.7412345678, "logloss": 0.4, "rows": 120000}
    data = VersionData.objects.get(version=version)
    assert (data.kind, data.rows, data.format, data.label) == ("validation", 50, "npz", "label")
    page = web.get(response["Location"]).content.decode()
    assert "auc=0.7412<" in page and "rows=120000<" in page and "0.7412345678<" not in page


@pytest.mark.parametrize(
    "fields, field, says",
    [
        ({"metrics": "{auc: 1}"}, "metrics", "Not JSON"),
        ({"metrics": "[1, 2]"}, "metrics", "give a JSON object of name -> number"),
        ({"metrics": '{"auc": "high"}'}, "metrics", "'auc' is 'high', not a finite number"),
        ({"metrics": '{"auc": true}'}, "metrics", "not a finite number"),
        ({"validation_data": b"not a data file"}, "validation_data", "not NPZ, Parquet or JSON lines"),
        ({"validation_data": "no-label"}, "validation_data", "label"),
    ],
)
def test_a_bad_field_is_shown_on_it_and_registers_nothing(web, team_a, onnx_bytes, fields, field, says):
    factories.registered_model(team_a, name="ranker")
    if fields.get("validation_data") == "no-label":
        fields = {"validation_data": SimpleUploadedFile("val.npz", _no_label())}
    elif isinstance(fields.get("validation_data"), bytes):
        fields = {"validation_data": SimpleUploadedFile("val.npz", fields["validation_data"])}
    response = _post(web, onnx_bytes, **fields)
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert list(errors) == [field] and says in errors[field][0], errors
    assert f'id="error-{field}"' in response.content.decode()
    assert not ModelVersion.objects.exists() and not VersionData.objects.exists()


def _no_label() -> bytes:
    rng = np.random.default_rng(1)
    buffer = io.BytesIO()
    np.savez(buffer, features=rng.standard_normal((20, 8)).astype(np.float32), item_id=rng.integers(0, 500, (20, 1)))
    return buffer.getvalue()


def test_the_api_checks_metrics_the_same_way(alice_api, team_a, onnx_bytes):
    factories.registered_model(team_a, name="ranker")
    response = alice_api.post(
        "/api/v1/models/ranker/versions/",
        {"file": SimpleUploadedFile("ranker.onnx", onnx_bytes), "metrics": '{"auc": "high"}'},
        format="multipart",
    )
    assert response.status_code == 400
    assert "'auc' is 'high', not a finite number" in response.json()["detail"]
    assert not ModelVersion.objects.exists()
