"""A second model for the rollback benchmark that is not the demo: a small two-tower
ranker built here (user id and item id into embedding tables of different sizes, a
float user-feature vector through a dense layer, the towers' dot product through a
sigmoid), with its Triton directory in the factory's layout and a request body.

Signature: user_id INT64 [-1, 1] (table of USERS rows), item_id INT64 [-1, 1] (ITEMS
rows), user_features FP32 [-1, FEATURES] → score FP32 [-1, 1].
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

USERS, ITEMS, DIM, FEATURES = 5000, 800, 16, 8
NAME = "twotower"


def build(seed: int = 11) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits = {
        "user_table": rng.normal(0, 0.2, size=(USERS, DIM)).astype(np.float32),
        "item_table": rng.normal(0, 0.2, size=(ITEMS, DIM)).astype(np.float32),
        "user_dense": rng.normal(0, 0.3, size=(FEATURES, DIM)).astype(np.float32),
        "axes1": np.array([1], dtype=np.int64),
    }
    nodes = [
        helper.make_node("Squeeze", ["user_id", "axes1"], ["uid"]),
        helper.make_node("Squeeze", ["item_id", "axes1"], ["iid"]),
        helper.make_node("Gather", ["user_table", "uid"], ["u_emb"], axis=0),
        helper.make_node("Gather", ["item_table", "iid"], ["i_emb"], axis=0),
        helper.make_node("MatMul", ["user_features", "user_dense"], ["u_dense"]),
        helper.make_node("Add", ["u_emb", "u_dense"], ["user_vec"]),
        helper.make_node("Mul", ["user_vec", "i_emb"], ["prod"]),
        helper.make_node("ReduceSum", ["prod", "axes1"], ["logit"], keepdims=1),
        helper.make_node("Sigmoid", ["logit"], ["score"]),
    ]
    graph = helper.make_graph(
        nodes,
        "bench_two_tower",
        inputs=[
            helper.make_tensor_value_info("user_id", TensorProto.INT64, ["batch", 1]),
            helper.make_tensor_value_info("item_id", TensorProto.INT64, ["batch", 1]),
            helper.make_tensor_value_info("user_features", TensorProto.FLOAT, ["batch", FEATURES]),
        ],
        outputs=[helper.make_tensor_value_info("score", TensorProto.FLOAT, ["batch", 1])],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="modelplane-bench")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def write(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(build(), str(path))
    return path


def write_model_dir(parent: Path, name: str, onnx_path: Path) -> Path:
    """Its Triton directory: config.pbtxt from Triton's protobuf, the platform's ONNX
    Runtime adapter, the model."""
    from django.conf import settings
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    config = mc.ModelConfig(name=name, backend="python", max_batch_size=64)
    config.input.add(name="user_id", data_type=mc.TYPE_INT64, dims=[1])
    config.input.add(name="item_id", data_type=mc.TYPE_INT64, dims=[1])
    config.input.add(name="user_features", data_type=mc.TYPE_FP32, dims=[FEATURES])
    config.output.add(name="score", data_type=mc.TYPE_FP32, dims=[1])
    config.dynamic_batching.max_queue_delay_microseconds = 200
    config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
    config.parameters["onnx_file"].string_value = "model.onnx"
    directory = parent / name
    (directory / "1").mkdir(parents=True, exist_ok=True)
    (directory / "config.pbtxt").write_text(text_format.MessageToString(config))
    shutil.copy(
        Path(settings.BASE_DIR) / "platform" / "triton" / "onnxruntime_adapter" / "model.py",
        directory / "1" / "model.py",
    )
    shutil.copy(onnx_path, directory / "1" / "model.onnx")
    return directory


def request_body(seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    return json.dumps(
        {
            "inputs": [
                {"name": "user_id", "shape": [1, 1], "datatype": "INT64", "data": [int(rng.integers(0, USERS))]},
                {"name": "item_id", "shape": [1, 1], "datatype": "INT64", "data": [int(rng.integers(0, ITEMS))]},
                {
                    "name": "user_features",
                    "shape": [1, FEATURES],
                    "datatype": "FP32",
                    "data": rng.normal(size=FEATURES).round(4).tolist(),
                },
            ]
        }
    )
