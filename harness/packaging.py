"""Triton model directories in the artifact factory's layout, for the pool tests.

`{model}__v{version}__{variant}/config.pbtxt` (written from Triton's protobuf),
`1/model.py` (the platform's ONNX Runtime python-backend adapter) and `1/model.onnx`.
"""

import shutil
from pathlib import Path

from django.conf import settings
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

ADAPTER = Path(settings.BASE_DIR) / "platform" / "triton" / "onnxruntime_adapter" / "model.py"


def model_config(name: str, *, onnx_file: str = "model.onnx") -> mc.ModelConfig:
    config = mc.ModelConfig(name=name, backend="python", max_batch_size=64)
    config.input.add(name="dense", data_type=mc.TYPE_FP32, dims=[13])
    config.input.add(name="sparse", data_type=mc.TYPE_INT64, dims=[26])
    config.output.add(name="ctr", data_type=mc.TYPE_FP32, dims=[1])
    config.dynamic_batching.preferred_batch_size.extend([8, 32])
    config.dynamic_batching.max_queue_delay_microseconds = 200
    config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
    config.parameters["onnx_file"].string_value = onnx_file
    return config


def write_model_dir(parent: Path, name: str, onnx_path: Path, *, broken: bool = False) -> Path:
    """A packaged model directory; `broken=True` ships an ONNX file that is not ONNX."""
    directory = parent / name
    (directory / "1").mkdir(parents=True, exist_ok=True)
    (directory / "config.pbtxt").write_text(text_format.MessageToString(model_config(name)))
    shutil.copy(ADAPTER, directory / "1" / "model.py")
    if broken:
        (directory / "1" / "model.onnx").write_bytes(b"this is not an onnx file")
    else:
        shutil.copy(onnx_path, directory / "1" / "model.onnx")
    return directory
