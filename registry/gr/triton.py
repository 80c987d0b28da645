"""The Triton model directory that serves a generative recommender variant (the one owner of
its layout and config): a python-backend model (platform/triton/gr_adapter/model.py) over the
variant's graphs and one catalog version, reached through KServe v2 `/infer`.

    {repo}/{triton_name}/config.pbtxt        written from Triton's protobuf (model_config_pb2)
    {repo}/{triton_name}/1/model.py          the adapter
    {repo}/{triton_name}/1/gr_runtime.py     registry/gr/runtime.py (the gates' beam search)
    {repo}/{triton_name}/1/{encode,extend,decode}.onnx   the variant's graphs
    {repo}/{triton_name}/1/items.npz, trie.npz           the catalog version's files
    {repo}/{triton_name}/1/serving.json      levels, codes_per_level, max_history, catalog

Inputs: user_id (TYPE_STRING [1]), history (TYPE_INT64 [-1]), top_k and beam_width
(TYPE_INT32 [1], optional). Outputs: items (TYPE_INT64 [-1]), scores (TYPE_FP32 [-1]),
cache (TYPE_STRING [1]). One instance per replica: its prefix cache is the replica's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from registry.gr import catalog_files
from registry.gr.runtime import GRAPH_FILES

ROOT = Path(__file__).resolve().parents[2]
ADAPTER = ROOT / "platform" / "triton" / "gr_adapter" / "model.py"
RUNTIME = Path(__file__).resolve().parent / "runtime.py"
INPUTS = (
    ("user_id", mc.TYPE_STRING, [1], False),
    ("history", mc.TYPE_INT64, [-1], False),
    ("top_k", mc.TYPE_INT32, [1], True),
    ("beam_width", mc.TYPE_INT32, [1], True),
)
OUTPUTS = (("items", mc.TYPE_INT64, [-1]), ("scores", mc.TYPE_FP32, [-1]), ("cache", mc.TYPE_STRING, [1]))
# The version's signature in the registry's form (numpy dtype names; what the gateway checks
# requests against when no config.pbtxt is at hand).
SIGNATURE = {
    "inputs": [
        {"name": "user_id", "dtype": "string", "shape": [1]},
        {"name": "history", "dtype": "int64", "shape": [-1]},
        {"name": "top_k", "dtype": "int32", "shape": [1], "optional": True},
        {"name": "beam_width", "dtype": "int32", "shape": [1], "optional": True},
    ],
    "outputs": [
        {"name": "items", "dtype": "int64", "shape": [-1]},
        {"name": "scores", "dtype": "float32", "shape": [-1]},
        {"name": "cache", "dtype": "string", "shape": [1]},
    ],
}
DEFAULTS = {
    "cache_max_bytes": 64 << 20,
    "default_beam_width": 32,
    "max_beam_width": 128,
    "default_top_k": 10,
    "max_request_history": 256,
    "intra_op_threads": 1,
}


def gr_config(name: str, **parameters) -> mc.ModelConfig:
    """The ModelConfig of a GR variant served by the adapter (see the module docstring)."""
    unknown = set(parameters) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"unknown GR serving parameter(s) {sorted(unknown)}")
    config = mc.ModelConfig(name=name, backend="python", max_batch_size=0)
    for input_name, data_type, dims, optional in INPUTS:
        config.input.add(name=input_name, data_type=data_type, dims=dims, optional=optional)
    for output_name, data_type, dims in OUTPUTS:
        config.output.add(name=output_name, data_type=data_type, dims=dims)
    config.instance_group.add(count=1, kind=mc.ModelInstanceGroup.KIND_CPU)
    for key, value in {**DEFAULTS, **parameters}.items():
        config.parameters[key].string_value = str(value)
    return config


def write_gr_model(
    repo: Path, triton_name: str, *, graphs: dict, catalog_dir: Path, serving: dict, **parameters
) -> Path:
    """Write the model directory `repo/triton_name` (see the module docstring); `graphs` maps
    each role of GRAPH_FILES to the variant's file."""
    path = Path(repo) / triton_name
    version = path / "1"
    version.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ADAPTER, version / "model.py")
    shutil.copyfile(RUNTIME, version / "gr_runtime.py")
    for role, filename in GRAPH_FILES.items():
        shutil.copyfile(graphs[role], version / filename)
    for filename in (catalog_files.ITEMS, catalog_files.TRIE):
        shutil.copyfile(Path(catalog_dir) / filename, version / filename)
    (version / "serving.json").write_text(json.dumps(serving, indent=2, sort_keys=True))
    (path / "config.pbtxt").write_text(text_format.MessageToString(gr_config(triton_name, **parameters)))
    return path


def request_body(user_id: str, history: list[int], *, top_k: int | None = None, beam_width: int | None = None) -> dict:
    """A KServe v2 JSON request for a GR model (what clients, the bench and the tests send)."""
    inputs = [
        {"name": "user_id", "shape": [1], "datatype": "BYTES", "data": [user_id]},
        {"name": "history", "shape": [len(history)], "datatype": "INT64", "data": list(history)},
    ]
    for name, value in (("top_k", top_k), ("beam_width", beam_width)):
        if value is not None:
            inputs.append({"name": name, "shape": [1], "datatype": "INT32", "data": [value]})
    return {"inputs": inputs, "outputs": [{"name": "items"}, {"name": "scores"}, {"name": "cache"}]}
