"""Builds of models the factory was not written around, with no data attached: the
validate and benchmark stages run on inputs derived from the graph."""

import pytest
from onnx import helper

from harness import factories
from registry.factory import runner
from registry.models import Artifact, Build, BuildStatus, Event
from registry.services import builds as build_services
from tests.registry.build_helpers import fast_build_settings, upload_version
from tests.registry.model_families import small_table_ranker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fast(settings):
    fast_build_settings(settings)


def _build(user, version) -> Build:
    build, _ = build_services.build_start(user=user, version=version)
    runner.run(build.pk, owner="test-worker:1")
    build.refresh_from_db()
    return build


def test_a_model_with_a_small_embedding_table_builds_on_synthetic_inputs_and_says_so(alice, team_a, tmp_path):
    model = factories.registered_model(team_a, name="small-ranker")
    version = upload_version(alice, model, small_table_ranker(tmp_path / "small.onnx"))
    build = _build(alice, version)

    assert build.status == BuildStatus.SUCCEEDED, build.error
    validate = next(s for s in build.stages if s["name"] == "validate")
    assert "synthetic inputs derived from the graph" in validate["log"]
    assert "item_id: ids in [0, 500) bounded by Gather 'item_embedding' (table of 500 rows)" in validate["log"]
    assert "quality checks skipped: AUC and logloss" in validate["log"]
    bench = next(s for s in build.stages if s["name"] == "benchmark")
    assert "benchmark inputs: synthetic" in bench["log"]
    for artifact in Artifact.objects.filter(build=build):
        assert artifact.status == "servable", artifact.status_reason
        assert artifact.validation["data"] == "synthetic"
        assert set(artifact.validation["quality_checks_skipped"]) == {"auc", "logloss"}
        assert "original_auc" not in artifact.validation
        assert any(line.startswith("item_id: ids in [0, 500)") for line in artifact.validation["synthetic_inputs"])
        assert artifact.benchmark["data"] == "synthetic"


def test_a_model_whose_ids_cannot_be_bounded_fails_asking_for_data(alice, team_a, tmp_path):
    model = factories.registered_model(team_a, name="odd-ranker")
    cumsum = helper.make_node("CumSum", ["item_id", "axis1"], ["running_id"], name="running")
    version = upload_version(alice, model, small_table_ranker(tmp_path / "odd.onnx", between=cumsum))
    build = _build(alice, version)

    assert build.status == BuildStatus.FAILED
    failed = Event.objects.get(object_type="registry.build", object_id=str(build.pk), to_state="failed")
    assert failed.data["code"] == "inputs_unbounded", build.error
    assert "input 'item_id'" in build.error and "CumSum 'running'" in build.error
    assert f"POST /api/v1/versions/{version.pk}/data/" in build.error
    assert "Gather" not in build.error.split("cannot follow")[-1]  # no ONNX Runtime text after the advice
    assert "idx=" not in build.error and "out of" not in build.error
    assert not Artifact.objects.filter(build=build).exists()


def test_a_tree_ensemble_builds_with_int8_skipped_and_both_outputs_checked(alice, team_a, tmp_path):
    from tritonclient.grpc import model_config_pb2 as mc

    from registry import storage, triton_config
    from tests.registry.model_families import gbt

    model = factories.registered_model(team_a, name="gbt")
    build = _build(alice, upload_version(alice, model, gbt(tmp_path / "gbt.onnx")))
    assert build.status == BuildStatus.SUCCEEDED, build.error
    artifacts = {a.variant: a for a in Artifact.objects.filter(build=build)}
    assert (
        artifacts["onnx-int8"].status == "skipped"
        and "ai.onnx.ml operators (TreeEnsembleClassifier)" in artifacts["onnx-int8"].status_reason
    )
    fp32 = artifacts["onnx-fp32"]
    assert fp32.status == "servable" and fp32.validation["primary_output"] == "probabilities"
    assert fp32.validation["outputs"]["label"]["equal_share"] == 1.0 and fp32.validation["max_abs_error"] <= 1e-5
    config = triton_config.parse((storage.absolute(fp32.path) / "config.pbtxt").read_text())
    label = next(o for o in config.output if o.name == "label")
    assert (
        list(label.dims) == [1]
        and label.HasField("reshape")
        and list(label.reshape.shape) == []
        and label.data_type == mc.TYPE_INT64
    )


def test_two_outputs_and_a_dynamic_dimension_are_validated_on_every_output(alice, team_a, tmp_path, settings):
    from tests.registry.model_families import two_outputs

    settings.BUILD_DYNAMIC_DIM_SIZE = 3
    model = factories.registered_model(team_a, name="seq")
    build = _build(alice, upload_version(alice, model, two_outputs(tmp_path / "seq.onnx")))
    assert build.status == BuildStatus.SUCCEEDED, build.error
    assert (
        "2 outputs: variants judged on 'score', the others checked too"
        in next(s for s in build.stages if s["name"] == "validate")["log"]
    )
    for artifact in Artifact.objects.filter(build=build):
        assert artifact.status == "servable", artifact.status_reason
        per_step = artifact.validation["outputs"]["per_step"]
        assert per_step["values"] == artifact.validation["rows"] * 3 * 2 and per_step["nan_count"] == 0
    assert (
        Artifact.objects.get(build=build, variant="onnx-fp32").validation["outputs"]["per_step"]["max_abs_error"]
        <= 1e-5
    )
