"""Write the small, fixed ONNX model the tests use (run: python -m harness.onnx OUT).

A miniature CTR ranker built node by node with onnx.helper, so its origin is this
script and not a binary blob: 13 dense float features and 26 hashed categorical ids,
one embedding table per feature (gathered), a linear layer and a sigmoid. Seeded, so
every run writes the same bytes.
"""

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

N_DENSE = 13
N_SPARSE = 26
VOCAB = 100
EMB_DIM = 4


def build(seed: int = 7) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    table = rng.normal(0, 0.1, size=(N_SPARSE * VOCAB, EMB_DIM)).astype(np.float32)
    offsets = (np.arange(N_SPARSE, dtype=np.int64) * VOCAB).reshape(1, N_SPARSE)
    weight = rng.normal(0, 0.3, size=(N_DENSE + N_SPARSE * EMB_DIM, 1)).astype(np.float32)
    bias = np.array([-1.0], dtype=np.float32)
    vocab = np.array(VOCAB, dtype=np.int64)
    flat_shape = np.array([-1, N_SPARSE * EMB_DIM], dtype=np.int64)

    nodes = [
        helper.make_node("Mod", ["sparse", "vocab"], ["sparse_mod"]),
        helper.make_node("Add", ["sparse_mod", "offsets"], ["sparse_idx"]),
        helper.make_node("Gather", ["table", "sparse_idx"], ["emb"], axis=0),
        helper.make_node("Reshape", ["emb", "flat_shape"], ["emb_flat"]),
        helper.make_node("Concat", ["dense", "emb_flat"], ["features"], axis=1),
        helper.make_node("MatMul", ["features", "weight"], ["logit_raw"]),
        helper.make_node("Add", ["logit_raw", "bias"], ["logit"]),
        helper.make_node("Sigmoid", ["logit"], ["ctr"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_ctr",
        inputs=[
            helper.make_tensor_value_info("dense", TensorProto.FLOAT, ["batch", N_DENSE]),
            helper.make_tensor_value_info("sparse", TensorProto.INT64, ["batch", N_SPARSE]),
        ],
        outputs=[helper.make_tensor_value_info("ctr", TensorProto.FLOAT, ["batch", 1])],
        initializer=[
            numpy_helper.from_array(table, "table"),
            numpy_helper.from_array(offsets, "offsets"),
            numpy_helper.from_array(weight, "weight"),
            numpy_helper.from_array(bias, "bias"),
            numpy_helper.from_array(vocab, "vocab"),
            numpy_helper.from_array(flat_shape, "flat_shape"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="modelplane-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def write(path: Path, seed: int = 7) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(build(seed), str(path))
    return path


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "tiny_ctr.onnx")
    print(write(out))
