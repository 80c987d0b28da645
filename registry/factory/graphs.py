"""ONNX graph helpers for the build: load and check, offline ORT optimization, the
embedding-gather fusion, seeded inputs and sessions. No Django imports."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import helper, numpy_helper

STANDARD_DOMAINS = {"", "ai.onnx", "ai.onnx.ml"}
ORT_DOMAINS = {"com.microsoft", "com.microsoft.nchwc", "com.ms.internal.nhwc"}


class GraphError(Exception):
    """A graph problem a person can act on; `code` is stable for the API."""

    def __init__(self, message: str, code: str = "invalid_graph"):
        super().__init__(message)
        self.code = code


def load(path: Path) -> onnx.ModelProto:
    try:
        model = onnx.load(str(path))
    except (DecodeError, RuntimeError, ValueError, OSError) as exc:
        raise GraphError(
            f"the ONNX file does not parse (truncated or corrupt): {str(exc)[:300]}", "corrupt_onnx"
        ) from exc
    if not model.graph.node or not model.graph.output:
        raise GraphError("the ONNX file has no graph (no nodes or outputs)", "corrupt_onnx")
    return model


def check(model: onnx.ModelProto) -> None:
    """onnx.checker plus: every op must exist in its (standard) domain."""
    unknown = []
    for node in model.graph.node:
        if node.domain in STANDARD_DOMAINS:
            if not onnx.defs.has(node.op_type, node.domain or ""):
                unknown.append(f"{node.op_type} (node {node.name or node.output[0]!r})")
        elif node.domain not in ORT_DOMAINS:
            unknown.append(f"{node.domain}::{node.op_type} (node {node.name or node.output[0]!r})")
    if unknown:
        raise GraphError(f"unsupported operator(s): {', '.join(sorted(set(unknown))[:5])}", "unsupported_op")
    try:
        onnx.checker.check_model(model, full_check=False)
    except onnx.checker.ValidationError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "invalid model"
        raise GraphError(f"ONNX checker refused the graph: {first}", "invalid_graph") from exc


def default_opset(model: onnx.ModelProto) -> int:
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def pin_opset(model: onnx.ModelProto, opset: int) -> tuple[onnx.ModelProto, str]:
    current = default_opset(model)
    if current == opset:
        return model, f"opset {opset} (already pinned)"
    try:
        converted = onnx.version_converter.convert_version(model, opset)
    except Exception as exc:  # the converter raises plain RuntimeErrors with C++ text
        raise GraphError(
            f"cannot convert from opset {current} to the pinned opset {opset}: {str(exc)[:300]}", "opset_conversion"
        ) from exc
    return converted, f"opset {current} -> {opset}"


def session_options(*, threads: int = 1, level: str = "all"):
    """Sequential execution on `threads` intra-op threads, ORT's graph optimizer at `level`."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    options.graph_optimization_level = {
        "none": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[level]
    return options


def session(path_or_bytes, *, threads: int = 1, level: str = "all", optimized_out: Path | None = None, providers=None):
    import onnxruntime as ort

    options = session_options(threads=threads, level=level)
    if optimized_out is not None:
        options.optimized_model_filepath = str(optimized_out)
    source = str(path_or_bytes) if isinstance(path_or_bytes, Path) else path_or_bytes
    try:
        return ort.InferenceSession(source, options, providers=providers or ["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises its own exception types for graph problems
        text = str(exc)
        code = (
            "unsupported_op"
            if ("implementation" in text or "not a registered function/op" in text or "No Op registered" in text)
            else "ort_refused"
        )
        raise GraphError(f"ONNX Runtime cannot load the graph: {text.strip().splitlines()[0][:400]}", code) from exc


def ort_offline(src: Path, dest: Path, level: str) -> onnx.ModelProto:
    """Run ORT's graph optimizer at `level` and save the optimized graph to `dest`."""
    session(src, level=level, optimized_out=dest)
    return onnx.load(str(dest))


def _const_value(model: onnx.ModelProto, name: str, producers: dict) -> np.ndarray | None:
    for init in model.graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    node = producers.get(name)
    if node is not None and node.op_type == "Constant":
        for attr in node.attribute:
            if attr.name == "value":
                return numpy_helper.to_array(attr.t)
    return None


def _lookup_chain(model, name: str, producers: dict, consumers: dict, inits: dict) -> tuple | None:
    """(Unsqueeze, table Gather, column Gather, column index) when the Concat input `name` is one
    embedding lookup of the pattern fuse_embedding_gathers fuses, each node used only there; else None."""
    unsq = producers.get(name)
    if unsq is None or unsq.op_type != "Unsqueeze" or len(consumers.get(unsq.output[0], [])) != 1:
        return None
    axes = _const_value(model, unsq.input[1], producers) if len(unsq.input) > 1 else None
    if axes is None or axes.reshape(-1).tolist() != [1]:
        return None
    lookup = producers.get(unsq.input[0])
    if (
        lookup is None
        or lookup.op_type != "Gather"
        or lookup.input[0] not in inits
        or len(consumers.get(lookup.output[0], [])) != 1
    ):
        return None
    if any(a.name == "axis" and helper.get_attribute_value(a) != 0 for a in lookup.attribute):
        return None
    column = producers.get(lookup.input[1])
    if column is None or column.op_type != "Gather" or len(consumers.get(column.output[0], [])) != 1:
        return None
    if next((helper.get_attribute_value(a) for a in column.attribute if a.name == "axis"), 0) != 1:
        return None
    col_index = _const_value(model, column.input[1], producers)
    if col_index is None or col_index.ndim != 0:
        return None
    return unsq, lookup, column, int(col_index)


def _fused_group(prefix: str, ids_name: str, chain: list, tables: list, output: str) -> tuple[list, list]:
    """(initializers, nodes) of one fused lookup: the concatenated table, each table's row
    offset and the id columns, read by one Gather that writes the Concat's `output`."""
    offsets = np.cumsum([0] + [t.shape[0] for t in tables[:-1]]).astype(np.int64).reshape(1, -1)
    inits = [
        numpy_helper.from_array(np.concatenate(tables, axis=0), f"{prefix}_table"),
        numpy_helper.from_array(offsets, f"{prefix}_offsets"),
        numpy_helper.from_array(np.array([c[3] for c in chain], dtype=np.int64), f"{prefix}_cols"),
    ]
    nodes = [
        helper.make_node("Gather", [ids_name, f"{prefix}_cols"], [f"{prefix}_ids"], axis=1, name=f"{prefix}_select"),
        helper.make_node(
            "Cast", [f"{prefix}_ids"], [f"{prefix}_ids64"], to=onnx.TensorProto.INT64, name=f"{prefix}_cast"
        ),
        helper.make_node("Add", [f"{prefix}_ids64", f"{prefix}_offsets"], [f"{prefix}_rows"], name=f"{prefix}_offset"),
        helper.make_node("Gather", [f"{prefix}_table", f"{prefix}_rows"], [output], axis=0, name=f"{prefix}_gather"),
    ]
    return inits, nodes


def _rebuilt(model: onnx.ModelProto, groups: list, drop_inits: set, new_inits: list) -> onnx.ModelProto:
    """`model` with each group's nodes replaced by its fused ones, the tables no node reads
    any more dropped (as initializers and as listed inputs) and the fused tables added."""
    graph = model.graph
    out = onnx.ModelProto()
    out.CopyFrom(model)
    # Each group's new nodes go where its first removed node was: its ids input is
    # produced before that point and its output is consumed only after the Concat.
    ordered, emitted = [], set()
    for node in graph.node:
        for n, (removed, nodes) in enumerate(groups):
            if id(node) in removed:
                if n not in emitted:
                    ordered += nodes
                    emitted.add(n)
                break
        else:
            ordered.append(node)
    del out.graph.node[:]
    out.graph.node.extend(ordered)
    still_used = {name for n in out.graph.node for name in n.input}
    kept_inits = [i for i in graph.initializer if not (i.name in drop_inits and i.name not in still_used)]
    del out.graph.initializer[:]
    out.graph.initializer.extend(kept_inits + new_inits)
    # Inputs that were listed for the old initializers (IR<4 style) must go too.
    kept_inputs = [v for v in graph.input if v.name not in drop_inits or v.name in still_used]
    del out.graph.input[:]
    out.graph.input.extend(kept_inputs)
    del out.graph.value_info[:]
    onnx.checker.check_model(out)
    return out


def fuse_embedding_gathers(model: onnx.ModelProto, *, min_tables: int = 2) -> tuple[onnx.ModelProto, int]:
    """Fuse per-feature embedding lookups into one Gather over a concatenated table.

    Pattern (what torch.onnx.export emits for `stack([emb_i(ids[:, i]) ...], dim=1)`):
        col_i = Gather(ids, const i, axis=1); e_i = Gather(W_i, col_i); u_i = Unsqueeze(e_i, [1])
        out = Concat(u_0..u_n, axis=1)                      -> [B, n, D]
    becomes
        out = Gather(concat(W_0..W_n), Gather(ids, cols, axis=1) + row_offsets)
    Exact (the same rows are read), so the fp32 variant stays bit-identical. Returns the
    new model and the number of lookups fused (0 when the pattern is absent).
    """
    graph = model.graph
    producers = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    inits = {init.name: init for init in graph.initializer}
    fused_total = 0
    groups = []  # (ids of removed nodes, new nodes)
    new_inits, drop_inits = [], set()
    for concat in graph.node:
        if concat.op_type != "Concat" or len(concat.input) < min_tables:
            continue
        axis = next((helper.get_attribute_value(a) for a in concat.attribute if a.name == "axis"), None)
        if axis != 1:
            continue
        chain = []
        for name in concat.input:
            link = _lookup_chain(model, name, producers, consumers, inits)
            if link is None:
                break
            chain.append(link)
        if len(chain) != len(concat.input):
            continue
        ids_names = {c[2].input[0] for c in chain}
        tables = [numpy_helper.to_array(inits[c[1].input[0]]) for c in chain]
        if len(ids_names) != 1 or len({t.shape[1:] for t in tables}) != 1 or len({t.dtype for t in tables}) != 1:
            continue
        ids_name = ids_names.pop()
        prefix = f"fused_emb_{len(groups)}"
        inits_, nodes = _fused_group(prefix, ids_name, chain, tables, concat.output[0])
        new_inits += inits_
        removed = {id(concat)}
        for unsq, lookup, column, _ in chain:
            removed |= {id(unsq), id(lookup), id(column)}
            drop_inits.add(lookup.input[0])
        groups.append((removed, nodes))
        fused_total += len(chain)
    if not fused_total:
        return model, 0
    return _rebuilt(model, groups, drop_inits, new_inits), fused_total


_NP = {
    "float32": np.float32,
    "float64": np.float64,
    "float16": np.float16,
    "int64": np.int64,
    "int32": np.int32,
    "bool": np.bool_,
}


def numpy_dtype(name: str):
    return _NP.get(name, np.float32)


def seeded_inputs(
    signature: dict, rows: int, *, seed: int = 20240611, int_high: int = 1_000_000
) -> dict[str, np.ndarray]:
    """Seeded sample inputs from a signature: floats ~ N(0, 1), integers ~ U[0, int_high)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in signature["inputs"]:
        shape = [
            rows if (i == 0 and d in (-1, None)) else (d if d and d > 0 else 1) for i, d in enumerate(spec["shape"])
        ]
        dtype = _NP.get(spec["dtype"], np.float32)
        if np.issubdtype(dtype, np.integer):
            feeds[spec["name"]] = rng.integers(0, int_high, size=shape, dtype=dtype)
        elif dtype is np.bool_:
            feeds[spec["name"]] = rng.random(shape) < 0.5
        else:
            feeds[spec["name"]] = rng.standard_normal(shape).astype(dtype)
    return feeds


def slice_rows(feeds: dict[str, np.ndarray], start: int, stop: int) -> dict[str, np.ndarray]:
    return {k: np.ascontiguousarray(v[start:stop]) for k, v in feeds.items()}


def is_probability(values: np.ndarray) -> bool:
    finite = values[np.isfinite(values)]
    return (
        finite.size > 0
        and float(finite.min()) >= 0.0
        and float(finite.max()) <= 1.0
        and values.reshape(values.shape[0], -1).shape[1] == 1
    )
