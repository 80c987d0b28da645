"""Models the factory was not written around, generated here (seeded, nothing downloaded):

- two_tower: a PyTorch two-tower ranker, user_id [B, 1] (1,000-row table), item_id
  [B, 1] (50 rows), item_tags [B, 3] (7 rows) and user_dense [B, 4] -> score [B, 1],
  exported with torch.onnx (TorchScript exporter).
- gbt: a scikit-learn gradient-boosted tree ensemble on 6 float features, converted with
  skl2onnx to ai.onnx.ml TreeEnsembleClassifier: label int64 [B], probabilities [B, 2].
- two_outputs: a sequence model, seq float [B, T, 4] with T dynamic -> score [B, 1] (mean
  over T) and per_step [B, T, 2], built node by node.
"""

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def two_tower(path: Path) -> Path:
    import torch
    from torch import nn

    torch.manual_seed(11)

    class TwoTower(nn.Module):
        def __init__(self):
            super().__init__()
            self.users, self.items, self.tags = nn.Embedding(1000, 8), nn.Embedding(50, 8), nn.Embedding(7, 8)
            self.user_mlp = nn.Sequential(nn.Linear(8 + 4, 16), nn.ReLU(), nn.Linear(16, 8))
            self.item_mlp = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 8))

        def forward(self, user_id, item_id, item_tags, user_dense):
            user = self.user_mlp(torch.cat([self.users(user_id[:, 0]), user_dense], dim=1))
            item = self.item_mlp(torch.cat([self.items(item_id[:, 0]), self.tags(item_tags).mean(dim=1)], dim=1))
            return torch.sigmoid((user * item).sum(dim=1, keepdim=True))

    args = (
        torch.zeros(2, 1, dtype=torch.long),
        torch.zeros(2, 1, dtype=torch.long),
        torch.zeros(2, 3, dtype=torch.long),
        torch.zeros(2, 4),
    )
    names = ["user_id", "item_id", "item_tags", "user_dense"]
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(
        TwoTower().eval(),
        args,
        str(path),
        input_names=names,
        output_names=["score"],
        dynamic_axes={n: {0: "batch"} for n in names + ["score"]},
        opset_version=17,
        dynamo=False,
    )
    return path


def gbt(path: Path) -> Path:
    from skl2onnx import to_onnx
    from sklearn.ensemble import GradientBoostingClassifier

    rng = np.random.default_rng(5)
    x = rng.standard_normal((400, 6)).astype(np.float32)
    y = ((x[:, 0] + 0.5 * x[:, 1] * x[:, 2] + 0.3 * rng.standard_normal(400)) > 0).astype(np.int64)
    model = GradientBoostingClassifier(n_estimators=25, max_depth=3, random_state=0).fit(x, y)
    onx = to_onnx(model, x[:1], options={"zipmap": False}, target_opset={"": 17, "ai.onnx.ml": 3})
    onx.graph.input[0].name = "features"  # skl2onnx calls it "X"
    for node in onx.graph.node:
        node.input[:] = ["features" if n == "X" else n for n in node.input]
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(onx, str(path))
    return path


def two_outputs(path: Path) -> Path:
    rng = np.random.default_rng(13)
    nodes = [
        helper.make_node("MatMul", ["seq", "w_step"], ["step_logits"]),
        helper.make_node("Tanh", ["step_logits"], ["per_step"]),
        helper.make_node("ReduceMean", ["seq"], ["pooled"], axes=[1], keepdims=0),
        helper.make_node("MatMul", ["pooled", "w_score"], ["logit"]),
        helper.make_node("Sigmoid", ["logit"], ["score"]),
    ]
    graph = helper.make_graph(
        nodes,
        "two_outputs",
        [helper.make_tensor_value_info("seq", TensorProto.FLOAT, ["batch", "steps", 4])],
        [
            helper.make_tensor_value_info("score", TensorProto.FLOAT, ["batch", 1]),
            helper.make_tensor_value_info("per_step", TensorProto.FLOAT, ["batch", "steps", 2]),
        ],
        initializer=[
            numpy_helper.from_array(rng.normal(0, 0.5, (4, 2)).astype(np.float32), "w_step"),
            numpy_helper.from_array(rng.normal(0, 0.5, (4, 1)).astype(np.float32), "w_score"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="modelplane-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


FAMILIES = {"two-tower": two_tower, "gbt": gbt, "two-outputs": two_outputs}


def small_table_ranker(path, *, rows=500, between=None):
    """The issue's user model: features float [B, 8] and item_id int64 [B, 1] indexing an
    embedding of `rows` rows; `between` = an op put between the id and the lookup."""
    rng = np.random.default_rng(3)
    pre = [] if between is None else [between]
    ids = "item_id" if between is None else between.output[0]
    nodes = pre + [
        helper.make_node("Gather", ["item_table", ids], ["emb3"], name="item_embedding"),
        helper.make_node("Squeeze", ["emb3", "one"], ["emb"]),
        helper.make_node("Concat", ["features", "emb"], ["x"], axis=1),
        helper.make_node("MatMul", ["x", "w"], ["logit"]),
        helper.make_node("Sigmoid", ["logit"], ["score"]),
    ]
    graph = helper.make_graph(
        nodes,
        "small_table_ranker",
        [
            helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", 8]),
            helper.make_tensor_value_info("item_id", TensorProto.INT64, ["batch", 1]),
        ],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["batch", 1])],
        initializer=[
            numpy_helper.from_array(rng.normal(0, 0.3, (rows, 4)).astype(np.float32), "item_table"),
            numpy_helper.from_array(rng.normal(0, 0.3, (12, 1)).astype(np.float32), "w"),
            numpy_helper.from_array(np.array([1], np.int64), "one"),
            numpy_helper.from_array(np.array([1], np.int64), "axis1"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path
