"""A model whose outputs are constant or NaN ends in a
failed validation with the reason — never "internal error: IntegrityError … JSON_VALID"
(NaN stored in a JSONField) — and an undefined AUC is stored as null, not NaN."""

import json
import math

import numpy as np
import pytest

from harness import factories
from registry.factory import numerics, runner
from registry.models import Artifact, BuildStatus
from registry.services import builds as build_services
from tests.registry.build_helpers import fast_build_settings, row_sum_onnx, upload_version

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fast(settings):
    fast_build_settings(settings)


def _build(user, team, path, name):
    model = factories.registered_model(team, name=name)
    build, _ = build_services.build_start(user=user, version=upload_version(user, model, path))
    runner.run(build.pk, owner="degenerate-test")
    build.refresh_from_db()
    return build


def test_constant_scores_fail_validation_with_the_reason(alice, team_a, tmp_path):
    build = _build(alice, team_a, row_sum_onnx(tmp_path / "constant.onnx", scale=0.0, shift=0.25), "constant")
    assert build.status == BuildStatus.FAILED
    assert build.error.startswith("validate: model outputs are constant (0.25 on every row)"), build.error
    assert "AUC undefined" in build.error and "internal error" not in build.error
    assert [s["name"] for s in build.stages if s["status"] == "failed"] == ["validate"]


def test_nan_outputs_fail_validation_with_the_reason(alice, team_a, tmp_path):
    build = _build(alice, team_a, row_sum_onnx(tmp_path / "nan.onnx", shift=-1e6, sqrt=True), "nan")
    assert build.status == BuildStatus.FAILED
    assert build.error.startswith("validate: model outputs contain NaN/Inf"), build.error
    assert "internal error" not in build.error


def test_one_class_labels_leave_auc_undefined_and_stored_as_null(alice, team_a, tmp_path):
    """Scores near 0 draw no positive label: the variants are judged by their errors, and
    nothing NaN reaches the database."""
    build = _build(alice, team_a, row_sum_onnx(tmp_path / "tiny.onnx", scale=1e-9), "tiny")
    assert build.status == BuildStatus.SUCCEEDED, build.error
    assert "AUC is undefined" in build.stages[3]["log"]
    for artifact in Artifact.objects.filter(build=build):
        text = json.dumps(artifact.validation, allow_nan=False)  # raises on NaN/Inf
        assert "auc_delta" not in artifact.validation, text


def test_json_safe_replaces_nan_and_inf():
    value = {"auc": float("nan"), "deltas": [1.0, float("inf"), np.float32(2.5)], "n": np.int64(3), "ok": True}
    safe = numerics.json_safe(value)
    assert safe == {"auc": None, "deltas": [1.0, None, 2.5], "n": 3, "ok": True}
    json.dumps(safe, allow_nan=False)
    assert not math.isnan(numerics.json_safe(0.5))


def test_degenerate_names_what_is_wrong():
    assert numerics.degenerate(np.array([[0.1], [0.2]]), classifier=True) is None
    assert (
        numerics.degenerate(np.array([[0.3], [0.3], [0.3]]), classifier=True)
        == "model outputs are constant (0.3 on every row): AUC undefined"
    )
    assert (
        numerics.degenerate(np.array([[1.0], [np.nan]]), classifier=False)
        == "model outputs contain NaN/Inf (1 of 2 values)"
    )
