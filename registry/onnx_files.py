"""Inspect an ONNX file without executing anything from it.

ONNX is a protobuf: parsing it runs no code. Files that are not ONNX (pickles, zip
archives such as torch.save output, truncated or empty files) are refused with a
reason a person can act on. Nothing here ever unpickles.
"""

from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx import helper

from kernel.errors import InvalidInput

PICKLE_PROTOCOLS = {2, 3, 4, 5}


def _sniff(head: bytes) -> str | None:
    if not head:
        return "the file is empty"
    if head[:1] == b"\x80" and len(head) > 1 and head[1] in PICKLE_PROTOCOLS:
        return "the file is a Python pickle; pickles are never loaded, export the model to ONNX"
    if head[:4] == b"PK\x03\x04":
        return "the file is a zip archive (e.g. torch.save output), not ONNX; export it with torch.onnx.export"
    if head[:8] == b"\x89HDF\r\n\x1a\n":
        return "the file is HDF5 (e.g. a Keras model), not ONNX"
    return None


def _tensor_spec(value_info) -> dict:
    tensor_type = value_info.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor_type.shape.dim]
    try:
        dtype = helper.tensor_dtype_to_np_dtype(tensor_type.elem_type).name
    except (KeyError, ValueError):
        dtype = onnx.TensorProto.DataType.Name(tensor_type.elem_type).lower()
    return {"name": value_info.name, "dtype": dtype, "shape": dims}


def signature_of(model: onnx.ModelProto) -> dict:
    initializers = {init.name for init in model.graph.initializer}
    return {
        "inputs": [_tensor_spec(v) for v in model.graph.input if v.name not in initializers],
        "outputs": [_tensor_spec(v) for v in model.graph.output],
        "opset": max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0),
        "ir_version": model.ir_version,
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
    }


def inspect(path: Path, *, field: str = "file") -> dict:
    """Check the file is a valid ONNX model and return its signature; raise InvalidInput."""
    with open(path, "rb") as fh:
        head = fh.read(16)
    reason = _sniff(head)
    if reason:
        raise InvalidInput(f"Not an ONNX model: {reason}.", code="not_onnx", field=field)
    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, RuntimeError, ValueError, OSError) as exc:
        raise InvalidInput(
            f"Not an ONNX model: the protobuf does not parse (truncated or corrupt file): {exc}",
            code="not_onnx",
            field=field,
        ) from exc
    if not model.graph.node or not model.graph.output or model.ir_version == 0:
        raise InvalidInput("Not an ONNX model: it has no graph (no nodes or outputs).", code="not_onnx", field=field)
    try:
        onnx.checker.check_model(str(path))
    except onnx.checker.ValidationError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else "invalid model"
        raise InvalidInput(f"ONNX checker refused the model: {first_line}", code="onnx_invalid", field=field) from exc
    return signature_of(model)
