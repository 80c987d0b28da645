"""What the data plane must know about an artifact to check requests before they reach
Triton: its signature as KServe v2 datatypes and shapes (gateway/contracts/route_table.schema.json,
variant `signature`). Read from the artifact's own config.pbtxt (what Triton enforces),
falling back to the version's stored signature when the files cannot be read."""

from __future__ import annotations

from kernel.errors import InvalidInput
from registry import storage, triton_config
from registry.models import Artifact

# numpy dtype names (registry signatures) -> KServe v2 datatypes
_NUMPY_DATATYPES = {
    "bool": "BOOL",
    "uint8": "UINT8",
    "uint16": "UINT16",
    "uint32": "UINT32",
    "uint64": "UINT64",
    "int8": "INT8",
    "int16": "INT16",
    "int32": "INT32",
    "int64": "INT64",
    "float16": "FP16",
    "float32": "FP32",
    "float64": "FP64",
    "object": "BYTES",
    "str": "BYTES",
    "string": "BYTES",
}

_CONFIG_SIGNATURES: dict[
    tuple, dict | None
] = {}  # (artifact pk, sha256): artifacts are content-addressed, never edited


def _config_signature(artifact: Artifact) -> dict | None:
    key = (artifact.pk, artifact.sha256)
    if key not in _CONFIG_SIGNATURES:
        try:
            config = triton_config.parse((storage.artifact_model_dir(artifact) / "config.pbtxt").read_text())
        except (OSError, InvalidInput, triton_config.ConfigError):
            return None  # not cached: the files may appear once the artifact is published
        if len(_CONFIG_SIGNATURES) > 4096:
            _CONFIG_SIGNATURES.clear()
        _CONFIG_SIGNATURES[key] = triton_config.kserve_signature(config)
    return _CONFIG_SIGNATURES[key]


def _version_signature(artifact: Artifact) -> dict | None:
    """From the registry's signature of the version ({"inputs": [{"name", "dtype", "shape"}]}):
    shapes as stored, no batch limit."""
    raw = artifact.version.signature or {}

    def tensors(items):
        out = []
        for t in items or ():
            datatype = _NUMPY_DATATYPES.get(str(t.get("dtype", "")).lower())
            shape = t.get("shape")
            if datatype is None or not t.get("name") or not isinstance(shape, list):
                return None
            out.append(
                {"name": t["name"], "datatype": datatype, "shape": [int(d) if d and d > 0 else -1 for d in shape]}
            )
        return out

    try:
        inputs = tensors(raw.get("inputs"))
        outputs = tensors(raw.get("outputs")) if inputs else None
    except (AttributeError, TypeError, ValueError):  # a stored signature of another shape: unknown, not an error
        return None
    if not inputs:
        return None
    return {"max_batch_size": 0, "inputs": inputs, **({"outputs": outputs} if outputs else {})}


def artifact_serving_signature(artifact: Artifact) -> dict | None:
    """The signature the gateway checks requests against for this artifact; None when
    neither its config nor its version says (the gateway then checks shapes and data only)."""
    if artifact.path:
        signature = _config_signature(artifact)
        if signature is not None:
            return signature
    return _version_signature(artifact)
