"""The in-tree reference CTR model: synthetic clicks with a learnable signal, training,
MLflow logging and registration, and a build of the registered PyTorch version."""

import numpy as np
import pytest
import torch
from django.core.management import call_command

from experiments.reference.data import generate
from experiments.reference.model import ReferenceConfig, ReferenceCTR
from experiments.reference.train import train

TINY = ReferenceConfig(vocab=500, emb_dim=4, cross_layers=1, mlp=[32])


@pytest.fixture(scope="module")
def mlflow_db(tmp_path_factory):
    """One MLflow sqlite store for this module (creating its tables takes seconds)."""
    path = tmp_path_factory.mktemp("mlflow")
    return f"sqlite:///{path / 'mlflow.db'}", str(path / "mlruns")


@pytest.fixture
def mlflow_store(mlflow_db, settings):
    from kernel import mlflow as mlflow_config

    settings.MLFLOW_TRACKING_URI, settings.MLFLOW_ARTIFACT_ROOT = mlflow_db
    settings.BUILD_BENCH_SECONDS, settings.BUILD_BENCH_BATCHES, settings.BUILD_VALIDATION_ROWS = 0.02, "1,8", 2000
    mlflow_config.configure.cache_clear()
    yield
    mlflow_config.configure.cache_clear()


def test_click_log_is_seeded_and_hashed():
    a, b = generate(1000, seed=3), generate(1000, seed=3)
    assert np.array_equal(a.sparse, b.sparse) and np.array_equal(a.label, b.label)
    assert a.dense.shape == (1000, 13) and a.sparse.shape == (1000, 26) and a.sparse.dtype == np.int64
    assert a.sparse.max() > 1_000_000  # raw hashed ids; the model buckets them
    assert 0.05 < a.label.mean() < 0.6
    other_world = generate(1000, seed=3, signal_seed=99)
    assert not np.array_equal(a.label, other_world.label)


@pytest.mark.parametrize("interaction", ["dcn", "deepfm"])
def test_training_learns_the_signal(interaction):
    config = ReferenceConfig(**{**TINY.as_dict(), "interaction": interaction})
    result = train(config, rows=20_000, valid_rows=4_000, epochs=2, threads=1)
    assert result.metrics["auc"] > 0.65, result.metrics  # an untrained model scores ~0.5 (below)
    assert 0 < result.metrics["logloss"] < 0.69
    out = result.model(torch.from_numpy(result.validation.dense[:5]), torch.from_numpy(result.validation.sparse[:5]))
    assert out.shape == (5, 1) and bool(((out > 0) & (out < 1)).all())


def test_untrained_model_is_near_chance():
    model = ReferenceCTR(TINY).eval()
    valid = generate(4000, seed=5)
    from experiments.reference.train import predict
    from registry.quality import auc

    assert abs(auc(valid.label, predict(model, valid)) - 0.5) < 0.1


@pytest.mark.django_db(transaction=True)
def test_train_log_register_and_build_the_reference_model(alice, team_a, mlflow_store):
    """manage.py train_reference_model --register, then an in-process build of the
    registered MLflow PyTorch version (export, fusion, validation on the labelled set)."""
    from registry.factory import runner
    from registry.models import ModelVersion
    from registry.services import builds as build_services

    call_command(
        "train_reference_model",
        "--rows",
        "12000",
        "--valid-rows",
        "2000",
        "--epochs",
        "1",
        "--vocab",
        "500",
        "--emb-dim",
        "4",
        "--cross-layers",
        "1",
        "--mlp",
        "32",
        "--threads",
        "1",
        "--version-tag",
        "v-test",
        "--register",
        "ref-ctr",
        "--user",
        "alice",
        "--team",
        "team-a",
    )
    version = ModelVersion.objects.get(model__name="ref-ctr")
    assert version.framework == "pytorch" and version.source == "mlflow"
    assert version.metrics["auc"] > 0.6 and "logloss" in version.metrics
    assert version.tags["version_tag"] == "v-test" and version.tags["validation_set"].endswith(".npz")
    assert [s["name"] for s in version.signature["inputs"]] == ["dense", "sparse"]

    build, _ = build_services.build_start(user=alice, version=version)
    assert runner.run(build.pk, owner="reference-test") == "published"
    build.refresh_from_db()
    assert build.status == "succeeded", build.error
    logs = {s["name"]: s["log"] for s in build.stages}
    assert "export fidelity vs PyTorch eager" in logs["canonicalize"]
    assert "fused 26 embedding lookups" in logs["optimize"]
    artifacts = {a.variant: a for a in build.artifacts.all()}
    assert {v: a.status for v, a in artifacts.items()} == {"onnx-fp32": "servable", "onnx-int8": "servable"}
    for artifact in artifacts.values():
        assert artifact.validation["inputs"] == "validation set"  # real labels, not pseudo-labels
        assert "auc_delta" in artifact.validation and artifact.validation["original_auc"] > 0.6
        assert (
            set(artifact.benchmark["speedup_vs_eager"]) == {"1", "8"} and artifact.benchmark["eager"]["1"]["p50_ms"] > 0
        )


@pytest.mark.django_db(transaction=True)
def test_build_of_an_mlflow_uri_that_no_longer_resolves_fails(alice, team_a, mlflow_store):
    from harness import factories
    from registry.factory import runner
    from registry.models import Artifact, ModelVersion
    from registry.services import builds as build_services

    model = factories.registered_model(team_a, name="gone")
    version = ModelVersion.objects.create(
        model=model, version=1, source="mlflow", source_uri="models:/gone-model/3", framework="pytorch"
    )
    build, _ = build_services.build_start(user=alice, version=version)
    assert runner.run(build.pk, owner="test") == "failed"
    build.refresh_from_db()
    assert build.status == "failed"
    assert build.error.startswith("canonicalize: MLflow model URI 'models:/gone-model/3' does not resolve")
    assert not Artifact.objects.exists()
