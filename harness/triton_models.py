"""Model directories for the gateway's tests and benchmark, written the platform's way:
config.pbtxt from Triton's protobuf (model_config_pb2 + text_format), python backend.

- `ctr_model`: the tiny CTR ONNX (harness/onnx.py) served by the platform's ONNX
  Runtime adapter (platform/triton/onnxruntime_adapter/model.py).
- `behaviour_model`: a python-backend model with the same inputs/outputs that answers
  after `sleep_ms` or fails every request (`fail`): the slow shadow and the erroring
  canary of the tests. Real Triton models, only their model.py is tiny.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from harness.onnx import N_DENSE, N_SPARSE
from harness.onnx import write as write_onnx

# The KServe signature of `ctr_model` (what the route table and the gateway check requests against).
SIGNATURE = {
    "max_batch_size": 64,
    "inputs": [
        {"name": "dense", "datatype": "FP32", "shape": [-1, N_DENSE]},
        {"name": "sparse", "datatype": "INT64", "shape": [-1, N_SPARSE]},
    ],
    "outputs": [{"name": "ctr", "datatype": "FP32", "shape": [-1, 1]}],
}

ROOT = Path(__file__).resolve().parents[1]
ADAPTER = ROOT / "platform" / "triton" / "onnxruntime_adapter" / "model.py"

BEHAVIOUR_PY = """
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"]).get("parameters", {})
        self.sleep_s = float(params.get("sleep_ms", {}).get("string_value", "0")) / 1000.0
        self.fail = params.get("fail", {}).get("string_value", "") == "1"

    def execute(self, requests):
        if self.sleep_s:
            time.sleep(self.sleep_s)
        responses = []
        for request in requests:
            if self.fail:
                responses.append(pb_utils.InferenceResponse(
                    output_tensors=[], error=pb_utils.TritonError("behaviour model: failing on purpose")))
                continue
            dense = pb_utils.get_input_tensor_by_name(request, "dense").as_numpy()
            out = np.full((dense.shape[0], 1), 0.5, dtype=np.float32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("ctr", out)]))
        return responses
"""


def _config(name: str, instances: int, params: dict[str, str]) -> str:
    config = mc.ModelConfig(name=name, backend="python", max_batch_size=64)
    config.input.add(name="dense", data_type=mc.TYPE_FP32, dims=[N_DENSE])
    config.input.add(name="sparse", data_type=mc.TYPE_INT64, dims=[N_SPARSE])
    config.output.add(name="ctr", data_type=mc.TYPE_FP32, dims=[1])
    config.instance_group.add(count=instances, kind=mc.ModelInstanceGroup.KIND_CPU)
    for key, value in params.items():
        config.parameters[key].string_value = value
    return text_format.MessageToString(config)


def ctr_model(repo: Path, name: str, *, instances: int = 1, seed: int = 7) -> Path:
    path = repo / name
    (path / "1").mkdir(parents=True, exist_ok=True)
    (path / "config.pbtxt").write_text(_config(name, instances, {}))
    shutil.copy2(ADAPTER, path / "1" / "model.py")
    write_onnx(path / "1" / "model.onnx", seed=seed)
    return path


def behaviour_model(repo: Path, name: str, *, sleep_ms: int = 0, fail: bool = False, instances: int = 1) -> Path:
    path = repo / name
    (path / "1").mkdir(parents=True, exist_ok=True)
    params = {"sleep_ms": str(sleep_ms), "fail": "1" if fail else "0"}
    (path / "config.pbtxt").write_text(_config(name, instances, params))
    (path / "1" / "model.py").write_text(BEHAVIOUR_PY)
    return path


def infer_body(batch: int = 1, *, seed: int = 0) -> bytes:
    """A KServe v2 JSON request for the CTR models."""
    dense = [[float((seed + i + j) % 7) / 7 for j in range(N_DENSE)] for i in range(batch)]
    sparse = [[(seed * 31 + i * 17 + j) % 1000 for j in range(N_SPARSE)] for i in range(batch)]
    return json.dumps(
        {
            "inputs": [
                {"name": "dense", "shape": [batch, N_DENSE], "datatype": "FP32", "data": dense},
                {"name": "sparse", "shape": [batch, N_SPARSE], "datatype": "INT64", "data": sparse},
            ],
            "outputs": [{"name": "ctr"}],
        }
    ).encode()


TYPES_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("y", np.zeros(1, dtype=np.float32))])
            for _ in requests
        ]
"""
# one optional rank-1 input per datatype: the tensor-contents tests send one at a time
TYPES_INPUTS = {
    "i8": "INT8",
    "u8": "UINT8",
    "i16": "INT16",
    "i32": "INT32",
    "u64": "UINT64",
    "flag": "BOOL",
    "text": "BYTES",
    "half": "FP16",
    "f64": "FP64",
}


def types_model(repo: Path, name: str) -> Path:
    """A python-backend model taking any one of TYPES_INPUTS (all optional), answering y = [0]."""
    path = repo / name
    (path / "1").mkdir(parents=True, exist_ok=True)
    config = mc.ModelConfig(name=name, backend="python", max_batch_size=0)
    for input_name, datatype in TYPES_INPUTS.items():
        kind = getattr(mc, "TYPE_" + ("STRING" if datatype == "BYTES" else datatype))
        config.input.add(name=input_name, data_type=kind, dims=[-1], optional=True)
    config.output.add(name="y", data_type=mc.TYPE_FP32, dims=[1])
    config.instance_group.add(count=1, kind=mc.ModelInstanceGroup.KIND_CPU)
    (path / "config.pbtxt").write_text(text_format.MessageToString(config))
    (path / "1" / "model.py").write_text(TYPES_PY)
    return path
