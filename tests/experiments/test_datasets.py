"""Datasets from the platform's own traffic on a small real run in the columnar store (chdb):
captured requests joined with their clicks inside the attribution window, split by time with
no label from after a training row's window, written as Parquet, registered with MLflow; a
version trained on it records the dataset. Bad input is refused and writes nothing."""

import io
import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command

from experiments.models import Dataset, Experiment
from experiments.reference import data as reference
from experiments.services import online as services
from experiments.services.datasets import dataset_build
from experiments.store import columnar_store
from harness import factories
from kernel.errors import InvalidInput
from registry.models import ModelVersion

WINDOW_S = 600


@pytest.fixture
def column_store():
    store = columnar_store("chdb", db=f"t_{uuid.uuid4().hex[:12]}")
    yield store
    store.drop()


def _inputs(log, i, *, sparse_name="sparse"):
    return json.dumps(
        [
            {"name": "dense", "shape": [1, reference.N_DENSE], "datatype": "FP32", "data": log.dense[i].tolist()},
            {
                "name": sparse_name,
                "shape": [1, reference.N_SPARSE],
                "datatype": "INT64",
                "data": log.sparse[i].tolist(),
            },
        ]
    )


def _traffic(store, endpoint, experiment, start, n=200, clicks_every=3):
    """n captured requests over an hour from `start`, with clicks on every third (one of them
    after its window: late, no label), and a click of another team on the same request id."""
    log = reference.generate(n, seed=3)
    arms = list(experiment.arms.all())
    rows, events = [], []
    for i in range(n):
        t = start + timedelta(seconds=i * 3600 / n)
        rows.append(
            {
                "team": endpoint.team_id,
                "endpoint": endpoint.name,
                "experiment": experiment.pk,
                "variant": arms[i % 2].name,
                "propensity": 0.5,
                "request_id": f"q{i}",
                "unit": f"u{i}",
                "time": t,
                "signature": "dense:FP32:[13];sparse:INT64:[26]",
                "inputs": _inputs(log, i),
            }
        )
        if i % clicks_every == 0:
            delay = WINDOW_S + 60 if i == 3 else 5
            events.append(
                {"event_id": f"c{i}", "type": "click", "request_id": f"q{i}", "time": t + timedelta(seconds=delay)}
            )
    store.write_captures(rows)
    store.write_exposures(
        [
            {
                "request_id": r["request_id"],
                "experiment": experiment.pk,
                "arm": arms[i % 2].pk,
                "unit_key": r["unit"],
                "time": r["time"],
            }
            for i, r in enumerate(rows)
        ]
    )
    store.write_feedback(team=endpoint.team, endpoint_name=endpoint.name, experiments=[experiment], events=events)
    return len([e for i, e in enumerate(events) if e["event_id"] != "c3"])


@pytest.fixture
def served(team_a, deployer, artifact_factory):
    pool = factories.pool(team_a, ready_replicas=1)
    stable, candidate = artifact_factory(team_a, model_name="ds"), artifact_factory(team_a, model_name="ds")
    endpoint = factories.endpoint(pool, stable, name="ds-ep", public=True)
    experiment = services.experiment_create(
        user=deployer, endpoint=endpoint, name="ds", candidates=[candidate], attribution_window_s=WINDOW_S
    )
    Experiment.objects.filter(pk=experiment.pk).update(state="running")
    experiment.refresh_from_db()
    return endpoint, experiment


@pytest.mark.django_db
def test_dataset_build_and_a_version_trained_on_it(column_store, served, deployer, mlflow_store, tmp_path, settings):
    settings.VAR_DIR = tmp_path
    endpoint, experiment = served
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=3)
    labelled = _traffic(column_store, endpoint, experiment, start)
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
    _traffic(column_store, endpoint, experiment, start, n=40)
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
                "signature": "dense:FP32:[13];ids:INT64:[26]", "inputs": _inputs(log, 0, sparse_name="ids"),
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
