"""Datasets from the platform's own traffic on a small real run in the columnar store (chdb):
captured requests joined with their clicks inside the attribution window, split by time with
no label from after a training row's window, written as Parquet, registered with MLflow; a
version trained on it records the dataset. Bad input is refused and writes nothing."""

import io
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command

from experiments.models import Dataset
from experiments.reference import data as reference
from experiments.services.datasets import dataset_build
from kernel.errors import InvalidInput
from registry.models import ModelVersion
from tests.experiments.captured import WINDOW_S, inputs_json, traffic


@pytest.mark.django_db
def test_dataset_build_and_a_version_trained_on_it(column_store, served, deployer, mlflow_store, tmp_path, settings):
    settings.VAR_DIR = tmp_path
    endpoint, experiment = served
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=3)
    labelled = traffic(column_store, endpoint, experiment, start)
    end = start + timedelta(hours=1)
    dataset = dataset_build(
        user=deployer, endpoint=endpoint, experiment=experiment, start=start, end=end, name="ctr", store=column_store
    )
    stats = dataset.statistics
    assert stats["rows"] == 200 and stats["train_rows"] + stats["valid_rows"] <= 200
    assert stats["label_rate"] == pytest.approx(labelled / 200)  # the late click labels nothing
    assert set(stats["variant_mix"]) == {a.name for a in experiment.arms.all()}
    assert stats["feature_ranges"]["sparse"]["shape"] == [reference.N_SPARSE]
    import pandas as pd

    train = pd.read_parquet(f"{dataset.path}/train.parquet")
    valid = pd.read_parquet(f"{dataset.path}/valid.parquet")
    # no training row whose attribution window reaches past the split, where validation starts
    assert (train["t"] + WINDOW_S <= dataset.split_at.timestamp()).all()
    assert (valid["t"] >= dataset.split_at.timestamp()).all() and train["t"].max() < valid["t"].min()
    assert "q3" in set(train["request_id"]) | set(valid["request_id"])
    run = mlflow_store.get_run(dataset.mlflow_run_id)
    assert run.inputs.dataset_inputs[0].dataset.name == "ctr-v1"
    assert run.data.tags["modelplane.lineage.endpoint"] == endpoint.name

    out = io.StringIO()
    call_command(
        "train_reference_model",
        "--dataset", dataset.public_id, "--register", "ds-model", "--user", deployer.username,
        "--epochs", "1", "--vocab", "500", "--emb-dim", "4", "--mlp", "16", "--cross-layers", "1",
        stdout=out,
    )  # fmt: skip
    version = ModelVersion.objects.get(model__name="ds-model")
    assert version.tags["dataset"] == dataset.public_id
    assert 0.0 <= version.metrics["auc"] <= 1.0


@pytest.mark.django_db
def test_bad_windows_and_mixed_inputs_write_nothing(column_store, served, deployer, tmp_path, settings):
    settings.VAR_DIR = tmp_path
    endpoint, experiment = served
    now = datetime.now(UTC)
    start = now - timedelta(hours=3)
    traffic(column_store, endpoint, experiment, start, n=40)
    cases = [
        (now - timedelta(hours=1), now - timedelta(seconds=WINDOW_S - 1), "attribution_open"),
        (now - timedelta(days=40), now - timedelta(hours=1), "window_too_long"),
        (now - timedelta(hours=8), now - timedelta(hours=7), "no_captures"),
    ]
    for s, e, code in cases:
        with pytest.raises(InvalidInput) as exc:
            dataset_build(
                user=deployer, endpoint=endpoint, start=s, end=e, name="bad", experiment=experiment, store=column_store
            )
        assert exc.value.code == code, exc.value.detail
    log = reference.generate(1, seed=9)
    column_store.write_captures(
        [
            {
                "team": endpoint.team_id, "endpoint": endpoint.name, "experiment": experiment.pk, "variant": "x",
                "propensity": 0.5, "request_id": "odd", "unit": "u", "time": start + timedelta(minutes=30),
                "signature": "dense:FP32:[13];ids:INT64:[26]", "inputs": inputs_json(log, 0, sparse_name="ids"),
            }
        ]
    )  # fmt: skip
    with pytest.raises(InvalidInput) as exc:
        dataset_build(
            user=deployer,
            endpoint=endpoint,
            start=start,
            end=start + timedelta(hours=1),
            name="bad",
            experiment=experiment,
            store=column_store,
        )
    assert exc.value.code == "mixed_signatures"
    assert not Dataset.objects.exists() and not (tmp_path / "datasets").exists()
