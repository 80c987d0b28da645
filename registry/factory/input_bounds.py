"""Safe synthetic inputs derived from an ONNX graph itself (no Django imports).

When a version carries no data, the build still has to run the model. Random integers
are not safe: an id input that indexes an embedding table of 1,000 rows fails on any
id >= 1,000. So each input's range is derived from what the graph does with it:

- Every tensor carries an interval [lo, hi] (inclusive) and the set of graph inputs it
  came from, propagated forward in node order through the ops the analysis follows:
  shape/copy ops (Identity, Cast, Reshape, (Un)Squeeze, Flatten, Transpose, Slice,
  Expand, Tile, Split, Concat, Gather/GatherElements/GatherND on their data input),
  integer arithmetic with constants or other tracked tensors (Add, Sub, Mul, Div, Mod,
  Neg, Abs, Min, Max, Clip), and reductions that keep values (ReduceMax/ReduceMin).
  A Mod by a positive constant bounds its output by that constant whatever came in
  (the hashing trick: `emb(ids % vocab)`).
- Index sites are the indices of Gather/GatherElements/GatherND/ScatterElements/
  ScatterND: valid indices are [-N, N-1] with N the table's size on the gathered axis
  (an initializer's shape, else the inferred shape).
- An op the analysis does not follow turns its integer outputs "unknown" (with the op
  named); an unknown interval reaching an index site, or an input reaching a shape-like
  operand (Reshape's shape, Range, Tile's repeats, ...), cannot be bounded: the caller
  must ask for data (InputsUnbounded says which input, which op, and where).
- Each integer input's upper bound is the largest H in [1, int_high] for which every
  index site it reaches is in range with the input drawn from [0, H) (binary search;
  the propagation is monotone in H). Float inputs are N(0, 1) clipped to [-3, 3]; bool
  inputs fair coins; string inputs are refused. Dynamic non-batch dimensions get a small
  concrete size.

Why this is one long module: the op table, the interval arithmetic, the forward pass and
the per-input search are one analysis, read together when a model is not followed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

INF = math.inf
FLOAT_CLIP = 3.0
INT_TYPES = {
    onnx.TensorProto.INT8,
    onnx.TensorProto.INT16,
    onnx.TensorProto.INT32,
    onnx.TensorProto.INT64,
    onnx.TensorProto.UINT8,
    onnx.TensorProto.UINT16,
    onnx.TensorProto.UINT32,
    onnx.TensorProto.UINT64,
}
FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}
# Ops whose first input's values pass to every output unchanged (other inputs are shapes/axes).
COPY_OPS = {
    "Identity",
    "Reshape",
    "Unsqueeze",
    "Squeeze",
    "Flatten",
    "Transpose",
    "Slice",
    "Expand",
    "Tile",
    "Split",
    "ReduceMax",
    "ReduceMin",
    "Dropout",
}
GATHER_OPS = {"Gather": 0, "GatherElements": 0, "GatherND": 0}  # op -> index of the data input
SCATTER_OPS = {"ScatterElements", "ScatterND", "Scatter"}
# Operands that are shapes, counts or positions: a tracked value there cannot be bounded safely.
SHAPE_OPERANDS = {
    "Reshape": {1},
    "Expand": {1},
    "Tile": {1},
    "Range": {0, 1, 2},
    "ConstantOfShape": {0},
    "OneHot": {1},
    "TopK": {1},
    "Slice": {1, 2, 3, 4},
    "Pad": {1, 2},
    "Resize": {1, 2, 3},
    "Upsample": {1},
    "Unsqueeze": {1},
    "Squeeze": {1},
    "Split": {1},
    "ReduceSum": {1},
    "ReduceMax": {1},
    "ReduceMin": {1},
    "ReduceMean": {1},
}
# Value-free or value-ending consumers of integers: their outputs carry no index risk.
SINK_OPS = {
    "Shape",
    "Size",
    "Equal",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
    "Not",
    "IsNaN",
    "IsInf",
    "OneHot",
}


class InputsUnbounded(Exception):
    """The graph's inputs cannot be bounded; `input_name` is the input at fault (or None)."""

    code = "inputs_unbounded"

    def __init__(self, message: str, input_name: str | None = None):
        super().__init__(message)
        self.input_name = input_name


@dataclass(frozen=True)
class Interval:
    lo: float
    hi: float
    sources: frozenset = frozenset()
    lost: str = ""  # the op that made it unknown

    @property
    def unknown(self) -> bool:
        return self.lo == -INF or self.hi == INF


@dataclass
class InputPlan:
    """How to synthesize one input: `kind` index | integer | float | bool, ints drawn from [low, high)."""

    name: str
    dtype: str
    shape: list  # -1 for the batch dimension
    kind: str
    low: int = 0
    high: int = 0
    bounded_by: list = field(default_factory=list)  # "Gather 'emb' (table of 1000 rows)" ...

    def describe(self) -> str:
        if self.kind == "index":
            return f"{self.name}: ids in [0, {self.high}) bounded by {', '.join(self.bounded_by[:3])}"
        if self.kind == "integer":
            return f"{self.name}: integers in [0, {self.high}) (never used as an index)"
        if self.kind == "bool":
            return f"{self.name}: random booleans"
        return f"{self.name}: floats ~ N(0, 1) clipped to [-{FLOAT_CLIP:g}, {FLOAT_CLIP:g}]"


def _attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


class _Graph:
    def __init__(self, model: onnx.ModelProto):
        try:
            model = onnx.shape_inference.infer_shapes(model)
        except Exception:  # inference is best effort; initializer shapes still work
            pass
        self.model = model
        graph = model.graph
        self.consts = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
        for node in graph.node:
            if node.op_type == "Constant" and _attr(node, "value") is not None:
                self.consts[node.output[0]] = numpy_helper.to_array(_attr(node, "value"))
        self.types, self.shapes = {}, {}
        for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
            tt = vi.type.tensor_type
            self.types[vi.name] = tt.elem_type
            self.shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        for name, value in self.consts.items():
            self.shapes[name] = list(value.shape)
        init_names = {i.name for i in graph.initializer}
        self.inputs = [vi for vi in graph.input if vi.name not in init_names]


def _const_interval(value: np.ndarray) -> Interval:
    if value.size == 0 or not np.issubdtype(value.dtype, np.number):
        return Interval(-INF, INF, lost="an empty or non-numeric constant")
    return Interval(float(np.min(value)), float(np.max(value)))


def _arith(op: str, a: Interval, b: Interval, node, g: _Graph) -> Interval:
    sources = a.sources | b.sources
    if a.unknown or b.unknown:
        return Interval(-INF, INF, sources, a.lost or b.lost)
    if op == "Add":
        return Interval(a.lo + b.lo, a.hi + b.hi, sources)
    if op == "Sub":
        return Interval(a.lo - b.hi, a.hi - b.lo, sources)
    if op == "Mul":
        products = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi]
        return Interval(min(products), max(products), sources)
    if op == "Div":
        if b.lo <= 0 <= b.hi:
            return Interval(-INF, INF, sources, f"Div {node.name!r} by a value that may be 0")
        quotients = [math.trunc(x / y) for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
        return Interval(min(quotients), max(quotients), sources)
    if op == "Mod":
        if b.lo <= 0:
            return Interval(-INF, INF, sources, f"Mod {node.name!r} by a value that may be <= 0")
        top = b.hi - 1
        if a.lo >= 0:  # a non-negative dividend: at most itself, below the divisor
            return Interval(0, min(a.hi, top), sources)
        if _attr(node, "fmod", 0):  # C fmod keeps the dividend's sign
            return Interval(-top, top, sources)
        return Interval(0, top, sources)  # Python-style remainder of a positive divisor
    if op == "Max":
        return Interval(max(a.lo, b.lo), max(a.hi, b.hi), sources)
    if op == "Min":
        return Interval(min(a.lo, b.lo), min(a.hi, b.hi), sources)
    raise AssertionError(op)


def _table_size(node, g: _Graph, data_name: str, indices_name: str) -> int | None:
    shape = g.shapes.get(data_name)
    if not shape:
        return None
    rank = len(shape)
    if node.op_type == "GatherND":
        depth = (g.shapes.get(indices_name) or [None])[-1]
        batch_dims = _attr(node, "batch_dims", 0)
        dims = shape[batch_dims : batch_dims + depth] if depth else shape[batch_dims:]
        return None if not dims or any(d is None for d in dims) else int(min(dims))
    axis = _attr(node, "axis", 0)
    axis = axis + rank if axis < 0 else axis
    return shape[axis] if 0 <= axis < rank else None


def _note_uses(g: _Graph, node, ins: list, env: dict, sites: list, hazards: list) -> None:
    """Where tracked values reach `node` in a way that matters: a subgraph reading them, an index
    into a table (a site) or an operand that sets a shape (a hazard)."""
    for name in _captured(node):  # If/Loop/Scan bodies read outer tensors without listing them
        if name in env and env[name].sources:
            hazards.append((node, "a subgraph", env[name]))
    op = node.op_type
    if op in GATHER_OPS or op in SCATTER_OPS:
        idx_pos = 1
        if len(node.input) > idx_pos and ins[idx_pos] is not None and ins[idx_pos].sources:
            sites.append((node, _table_size(node, g, node.input[0], node.input[1]), ins[idx_pos]))
    for pos in SHAPE_OPERANDS.get(op, ()):
        if pos < len(ins) and ins[pos] is not None and ins[pos].sources:
            hazards.append((node, pos, ins[pos]))


def _transfer(g: _Graph, node, ins: list, sources: frozenset) -> Interval | None:
    """The interval of `node`'s outputs from its inputs' (`sources`: the graph inputs they come
    from); None where nothing is tracked past it (sinks, scatters, a copy of an untracked value)."""
    op = node.op_type
    out: Interval | None
    if op in COPY_OPS:
        out = ins[0] if ins[0] is not None and ins[0].sources else None
    elif op in GATHER_OPS:
        # Gathering from tracked data keeps its values; from a constant table, the table's.
        data = ins[0]
        out = None if data is None else (data if data.sources else Interval(data.lo, data.hi, sources, data.lost))
    elif op == "Cast":
        out = Interval(0, 1, sources) if _attr(node, "to") == onnx.TensorProto.BOOL else ins[0]
    elif op == "Concat":
        parts = [iv for iv in ins if iv is not None]
        if len(parts) < len(ins):
            out = Interval(-INF, INF, sources, f"Concat {node.name!r} with a computed operand")
        else:
            lost = next((p.lost for p in parts if p.unknown), "")
            out = Interval(min(p.lo for p in parts), max(p.hi for p in parts), sources, lost)
    elif op in {"Add", "Sub", "Mul", "Div", "Mod", "Max", "Min"} and len(ins) >= 2:
        if any(iv is None for iv in ins):
            out = Interval(-INF, INF, sources, f"{op} {node.name!r} with a computed operand")
        else:
            out = ins[0]
            for other in ins[1:]:
                out = _arith(op, out, other, node, g)
    elif op == "Neg":
        out = Interval(-ins[0].hi, -ins[0].lo, sources, ins[0].lost)
    elif op == "Abs":
        a = ins[0]
        out = Interval(
            0 if a.lo <= 0 <= a.hi else min(abs(a.lo), abs(a.hi)), max(abs(a.lo), abs(a.hi)), sources, a.lost
        )
    elif op == "Clip":
        a = ins[0]
        lo = ins[1].hi if len(ins) > 1 and ins[1] is not None and not ins[1].sources else -INF
        hi = ins[2].lo if len(ins) > 2 and ins[2] is not None and not ins[2].sources else INF
        out = Interval(
            max(a.lo, lo), min(a.hi, hi), sources, a.lost if max(a.lo, lo) == -INF or min(a.hi, hi) == INF else ""
        )
    elif op in SINK_OPS or op in SCATTER_OPS:
        out = None
    else:
        out = Interval(-INF, INF, sources, f"{op} {node.name or node.output[0]!r}")
    return out


def _propagate(g: _Graph, ranges: dict[str, Interval]) -> tuple[list[tuple], list[tuple]]:
    """Forward pass. Returns (index sites [(node, N, interval)], shape hazards [(node, interval)])."""
    env: dict[str, Interval] = dict(ranges)
    sites, hazards = [], []

    def val(name: str) -> Interval | None:
        if name in env:
            return env[name]
        if name in g.consts:
            return _const_interval(g.consts[name])
        return None

    for node in g.model.graph.node:
        ins = [val(n) if n else None for n in node.input]
        tracked = [iv for iv in ins if iv is not None and iv.sources]
        _note_uses(g, node, ins, env, sites, hazards)
        if not tracked:
            continue
        sources = frozenset().union(*(iv.sources for iv in tracked))
        out = _transfer(g, node, ins, sources)
        for name in node.output:
            if not name:
                continue
            if out is not None:
                env[name] = out
    return sites, hazards


def _captured(node) -> set[str]:
    """Names a node's subgraphs (If/Loop/Scan bodies) read, recursively."""
    names = set()
    for attr in node.attribute:
        for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
            for inner in sub.node:
                names.update(inner.input)
                names |= _captured(inner)
    return names


def _violations(sites, hazards, name: str) -> list[str]:
    found = []
    for node, size, iv in sites:
        if name not in iv.sources:
            continue
        where = f"{node.op_type} {node.name or node.output[0]!r}"
        if size is None:
            found.append(f"it indexes {where}, whose table size is not known from the graph")
        elif iv.unknown:
            found.append(f"it reaches the indices of {where} through {iv.lost}, which the analysis cannot follow")
        elif iv.lo < -size or iv.hi > size - 1:
            found.append(f"it indexes {where} (a table of {size} rows) with values in [{iv.lo:g}, {iv.hi:g}]")
    for node, pos, iv in hazards:
        if name in iv.sources:
            where = f"{node.op_type} {node.name or node.output[0]!r}"
            found.append(
                f"it is read inside a subgraph of {where}, which the analysis does not follow"
                if pos == "a subgraph"
                else f"it is used as operand {pos} (a shape, count or position) of {where}"
            )
    return found


def _initial(g: _Graph, name: str, high: int) -> Interval:
    elem = g.types.get(name)
    if elem in INT_TYPES:
        return Interval(0, high - 1, frozenset({name}))
    if elem in FLOAT_TYPES:
        return Interval(-FLOAT_CLIP, FLOAT_CLIP, frozenset({name}))
    return Interval(0, 1, frozenset({name}))  # bool


def _input_plan(g: _Graph, vi) -> InputPlan:
    """The plan of one graph input (its dtype, shape and kind), or InputsUnbounded for an input
    no synthetic data can stand for (not a tensor, strings, another element type)."""
    elem = vi.type.tensor_type.elem_type
    if not vi.type.HasField("tensor_type"):
        raise InputsUnbounded(
            f"input {vi.name!r} is not a tensor (a sequence or map); synthetic data cannot be made for it", vi.name
        )
    if elem == onnx.TensorProto.STRING:
        raise InputsUnbounded(
            f"input {vi.name!r} is a string tensor; synthetic strings would not mean anything to the model", vi.name
        )
    if elem not in INT_TYPES | FLOAT_TYPES | {onnx.TensorProto.BOOL}:
        raise InputsUnbounded(
            f"input {vi.name!r} has element type {onnx.TensorProto.DataType.Name(elem)}, which cannot be synthesized",
            vi.name,
        )
    dtype = helper.tensor_dtype_to_np_dtype(elem).name
    kind = "integer" if elem in INT_TYPES else ("float" if elem in FLOAT_TYPES else "bool")
    return InputPlan(vi.name, dtype, [d if d else -1 for d in g.shapes.get(vi.name, [])], kind)


def _bound(g: _Graph, p: InputPlan, base: dict, int_high: int) -> None:
    """The highest value integer input `p` may take, alone (the others at their base), with no
    index it reaches out of its table: set on `p` (and kind "index" with what it indexes)."""
    dtype_max = int(np.iinfo(np.dtype(p.dtype)).max)
    top = min(int_high, dtype_max)

    def ok(high: int, p=p) -> tuple[bool, list, list]:
        sites, hazards = _propagate(g, {**base, p.name: _initial(g, p.name, high)})
        return not _violations(sites, hazards, p.name), sites, hazards

    good, sites, hazards = ok(1)
    if not good:
        raise InputsUnbounded(f"input {p.name!r}: {_violations(sites, hazards, p.name)[0]} even when it is 0", p.name)
    reached = [
        f"{n.op_type} {n.name or n.output[0]!r} (table of {size} rows)" for n, size, iv in sites if p.name in iv.sources
    ]
    if ok(top)[0]:
        p.high = top
    else:
        lo, hi = 1, top  # ok(lo), not ok(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if ok(mid)[0] else (lo, mid)
        p.high = lo
    if reached:
        p.kind, p.bounded_by = "index", reached


def plan_inputs(model: onnx.ModelProto, *, int_high: int = 1_000_000) -> dict[str, InputPlan]:
    """A synthesis plan per graph input; raises InputsUnbounded when an input cannot be bounded."""
    g = _Graph(model)
    plans: dict[str, InputPlan] = {}
    for vi in g.inputs:
        plans[vi.name] = _input_plan(g, vi)
    ints = [p for p in plans.values() if p.kind == "integer"]
    base = {name: _initial(g, name, 1) for name in plans}
    # Floats and bools are fixed; their own hazards (a float cast to an index) are checked here.
    sites, hazards = _propagate(g, base)
    for p in plans.values():
        if p.kind != "integer":
            problems = _violations(sites, hazards, p.name)
            if problems:
                raise InputsUnbounded(f"input {p.name!r}: {problems[0]}", p.name)
    for p in ints:
        _bound(g, p, base, int_high)
    # Inputs that meet in one index (ids + offsets) were each bounded alone: shrink together.
    for _ in range(64):
        sites, hazards = _propagate(g, {n: _initial(g, n, plans[n].high or 1) for n in plans})
        bad = [p for p in ints if _violations(sites, hazards, p.name)]
        if not bad:
            break
        for p in bad:
            if p.high <= 1:
                raise InputsUnbounded(f"input {p.name!r}: {_violations(sites, hazards, p.name)[0]}", p.name)
            p.high = max(1, p.high // 2)
    return plans


def concrete_shape(shape: list, rows: int, dynamic_size: int = 4) -> list[int]:
    return [rows if i == 0 and d in (-1, None) else (d if d and d > 0 else dynamic_size) for i, d in enumerate(shape)]


def synthesize(
    plans: dict[str, InputPlan], rows: int, *, seed: int = 20240611, dynamic_size: int = 4
) -> dict[str, np.ndarray]:
    """Seeded inputs following `plans`: `rows` rows (the first dimension when it is dynamic)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for p in plans.values():
        shape = concrete_shape(p.shape, rows, dynamic_size)
        dtype = np.dtype(p.dtype)
        if p.kind in ("index", "integer"):
            feeds[p.name] = rng.integers(p.low, max(p.high, p.low + 1), size=shape, dtype=dtype)
        elif p.kind == "bool":
            feeds[p.name] = rng.random(shape) < 0.5
        else:
            feeds[p.name] = np.clip(rng.standard_normal(shape), -FLOAT_CLIP, FLOAT_CLIP).astype(dtype)
    return feeds
