"""manage.py train_gr_model: the reference generative recommender trained (tiny preset), logged
to MLflow (params, HR@10 against the oracle, the bundle) and registered with its catalog."""

import mlflow
import pytest
from django.core.management import call_command

from registry import storage
from registry.gr.bundle import inspect_bundle
from registry.models import ItemCatalogVersion, ModelVersion

pytestmark = pytest.mark.django_db


@pytest.fixture
def mlflow_store(tmp_path, settings):
    from kernel import mlflow as mlflow_config

    settings.MLFLOW_TRACKING_URI = f"sqlite:///{tmp_path / 'mlflow.db'}"
    settings.MLFLOW_ARTIFACT_ROOT = str(tmp_path / "mlruns")
    mlflow_config.configure.cache_clear()
    yield
    mlflow_config.configure.cache_clear()


def test_train_log_and_register_twice_reuses_the_catalog_version(alice, team_a, mlflow_store, capsys):
    for _ in range(2):
        call_command("train_gr_model", "--tiny", "--register", "recs", "--user", "alice", "--epochs", "1")
    out = capsys.readouterr().out
    assert "HR@10" in out and "oracle" in out and "registered recs v2" in out

    versions = ModelVersion.objects.filter(model__name="recs").order_by("version")
    assert [v.version for v in versions] == [1, 2] and versions[0].model.task == "generative_rec"
    assert ItemCatalogVersion.objects.count() == 1  # the same items: one catalog version, named by both
    assert {v.gr.catalog_version.version for v in versions} == {1}
    latest = versions[1]
    assert 0 < latest.metrics["hr_at_10"] <= latest.metrics["oracle_hr_at_10"] <= 1
    assert latest.metrics["illegal_ids"] == 0
    assert inspect_bundle(storage.absolute(latest.file_path)).levels == 3
    run = mlflow.get_run(latest.tags["mlflow_run_id"])
    assert run.data.metrics["oracle_hr_at_10"] == pytest.approx(latest.metrics["oracle_hr_at_10"])
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id, "bundle")}
    assert {"bundle/encode.onnx", "bundle/decode.onnx", "bundle/codebook.npz", "bundle/manifest.json"} <= artifacts
