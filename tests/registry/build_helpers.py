"""Shared setup for the artifact-factory tests: small, fast build settings and tiny graphs."""

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from registry import storage
from registry.models import Framework, ModelVersion, VersionSource
from registry.services.catalog import version_create_from_upload

FAST_BUILD = {
    "BUILD_BENCH_SECONDS": 0.02,
    "BUILD_BENCH_BATCHES": "1,8",
    "BUILD_VALIDATION_ROWS": 512,
}


def fast_build_settings(settings) -> None:
    for key, value in FAST_BUILD.items():
        setattr(settings, key, value)


def fast_build_env() -> dict:
    return {key: str(value) for key, value in FAST_BUILD.items()}


def upload_version(user, model, path: Path) -> ModelVersion:
    data = path.read_bytes()
    return version_create_from_upload(user=user, model=model, filename=path.name, chunks=[data], size=len(data))


def raw_version(model, path: Path, **fields) -> ModelVersion:
    """A version row over a stored file without the upload checks (for graphs the
    upload check would already refuse, to see the build refuse them too)."""
    sha = storage.sha256_of(path)
    tmp = storage.tmp_dir() / f"copy-{sha}"
    tmp.write_bytes(path.read_bytes())
    rel = storage.put_file(tmp, sha, ".onnx")
    last = model.versions.order_by("-version").first()
    return ModelVersion.objects.create(
        model=model,
        version=(last.version + 1 if last else 1),
        source=VersionSource.UPLOAD,
        framework=Framework.ONNX,
        file_path=rel,
        file_sha256=sha,
        file_size=path.stat().st_size,
        original_filename=path.name,
        **fields,
    )


def _save(model: onnx.ModelProto, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def nan_variant_onnx(path: Path) -> Path:
    """A "variant" with the tiny CTR signature that outputs NaN: ctr = sqrt(dense[:, :1] - 10)."""
    nodes = [
        helper.make_node("Slice", ["dense", "starts", "ends", "axes"], ["first"]),
        helper.make_node("Sub", ["first", "ten"], ["shifted"]),
        helper.make_node("Sqrt", ["shifted"], ["ctr"]),
    ]
    inits = [numpy_helper.from_array(np.array([10.0], dtype=np.float32), "ten")] + [
        numpy_helper.from_array(np.array(v, dtype=np.int64), n)
        for n, v in (("starts", [0]), ("ends", [1]), ("axes", [1]))
    ]
    graph = helper.make_graph(
        nodes,
        "nan_variant",
        [
            helper.make_tensor_value_info("dense", TensorProto.FLOAT, ["batch", 13]),
            helper.make_tensor_value_info("sparse", TensorProto.INT64, ["batch", 26]),
        ],
        [helper.make_tensor_value_info("ctr", TensorProto.FLOAT, ["batch", 1])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return _save(model, path)


def custom_op_onnx(path: Path) -> Path:
    nodes = [helper.make_node("FancyScore", ["x"], ["y"], domain="com.example.ops", name="fancy")]
    graph = helper.make_graph(
        nodes,
        "custom",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example.ops", 1)]
    )
    model.ir_version = 8
    return _save(model, path)


def constant_of_shape_onnx(path: Path, side: int = 65536) -> Path:
    """The memory bomb: a few hundred bytes that ask for a [side, side] float tensor
    (16 GiB at 65536) — y = sum(x, axis 1) + mean(ConstantOfShape([side, side], 1.0))."""
    nodes = [
        helper.make_node(
            "ConstantOfShape", ["shape"], ["big"], value=numpy_helper.from_array(np.array([1.0], dtype=np.float32))
        ),
        helper.make_node("ReduceMean", ["big"], ["level"], keepdims=0),
        helper.make_node("ReduceSum", ["x", "axis"], ["row_sum"], keepdims=1),
        helper.make_node("Add", ["row_sum", "level"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array([side, side], dtype=np.int64), "shape"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "axis"),
    ]
    graph = helper.make_graph(
        nodes,
        "bomb",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return _save(model, path)


def row_sum_onnx(path: Path, *, scale: float = 1.0, shift: float = 0.0, sqrt: bool = False) -> Path:
    """y = scale * |sum(x, axis 1)| + shift, optionally sqrt'ed: scale 0 makes a constant
    model, sqrt with a negative shift a NaN model, a tiny scale near-zero probabilities."""
    nodes = [
        helper.make_node("ReduceSum", ["x", "axis"], ["row_sum"], keepdims=1),
        helper.make_node("Abs", ["row_sum"], ["size"]),
        helper.make_node("Mul", ["size", "scale"], ["scaled"]),
        helper.make_node("Add", ["scaled", "shift"], ["z" if sqrt else "y"]),
    ]
    if sqrt:
        nodes.append(helper.make_node("Sqrt", ["z"], ["y"]))
    inits = [
        numpy_helper.from_array(np.array([1], dtype=np.int64), "axis"),
        numpy_helper.from_array(np.array(scale, dtype=np.float32), "scale"),
        numpy_helper.from_array(np.array(shift, dtype=np.float32), "shift"),
    ]
    graph = helper.make_graph(
        nodes,
        "row_sum",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return _save(model, path)
