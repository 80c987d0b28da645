"""Offline AUC of versions on a dataset's validation split, each scored by its served ONNX
artifact: the versions the experiment served and the one trained on the dataset, side by side."""

import io
import json
from datetime import UTC, datetime, timedelta

import numpy as np
import onnx
import pandas as pd
import pytest
from django.core.management import call_command
from onnx import TensorProto, helper

from experiments.reference import data as reference
from experiments.services.datasets import dataset_build
from harness import factories
from registry.models import ModelVersion
from tests.experiments.captured import serve, traffic


def _onnx(path, weight: float):
    """A reference-shaped model: ctr = sigmoid(weight * sum(dense)), sparse read and ignored."""
    nodes = [
        helper.make_node("ReduceSum", ["dense", "axes"], ["s"], keepdims=1),
        helper.make_node("Mul", ["s", "w"], ["z"]),
        helper.make_node("Sigmoid", ["z"], ["ctr"]),
    ]
    graph = helper.make_graph(
        nodes,
        "ref",
        [
            helper.make_tensor_value_info("dense", TensorProto.FLOAT, [None, reference.N_DENSE]),
            helper.make_tensor_value_info("sparse", TensorProto.INT64, [None, reference.N_SPARSE]),
        ],
        [helper.make_tensor_value_info("ctr", TensorProto.FLOAT, [None, 1])],
        initializer=[
            helper.make_tensor("axes", TensorProto.INT64, [1], [1]),
            helper.make_tensor("w", TensorProto.FLOAT, [], [weight]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.mark.django_db
def test_versions_side_by_side_on_the_later_window(column_store, team_a, deployer, tmp_path, settings, mlflow_store):
    settings.VAR_DIR = tmp_path
    up, down = _onnx(tmp_path / "up.onnx", 1.0), _onnx(tmp_path / "down.onnx", -1.0)

    def made(team, onnx_file, model_name):
        return factories.artifact(team, onnx_file, tmp_path, model_name=model_name)

    endpoint, experiment = serve(team_a, deployer, lambda t, model_name: made(t, up, model_name), name="ev-ep")
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=3)
    traffic(column_store, endpoint, experiment, start, n=300)
    dataset = dataset_build(
        user=deployer, endpoint=endpoint, experiment=experiment, start=start, end=start + timedelta(hours=1),
        name="ev", store=column_store,
    )  # fmt: skip
    trained = made(team_a, down, "ev-ep").version  # stands for a v3 trained on the dataset
    ModelVersion.objects.filter(pk=trained.pk).update(tags={"dataset": dataset.public_id, "version_tag": "v3"})

    out = io.StringIO()
    call_command("evaluate_dataset", dataset.public_id, "--user", deployer.username, "--json", stdout=out)
    rows = json.loads(out.getvalue())
    assert [r["number"] for r in rows] == [1, 2, 3] and [r["trained_on_it"] for r in rows] == [False, False, True]
    valid = np.asarray(pd.read_parquet(f"{dataset.path}/valid.parquet")["label"])
    assert all(r["rows"] == len(valid) for r in rows)
    # the same graph with its sign flipped ranks every pair the other way: AUCs sum to 1
    assert rows[0]["auc"] == pytest.approx(rows[1]["auc"]) and rows[0]["auc"] + rows[2]["auc"] == pytest.approx(1.0)

    text = io.StringIO()
    call_command("evaluate_dataset", dataset.public_id, "--user", deployer.username, stdout=text)
    assert "ev-ep v3 (v3): AUC" in text.getvalue() and "trained on this dataset" in text.getvalue()
