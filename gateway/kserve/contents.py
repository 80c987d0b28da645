"""What a JSON tensor holds, checked against its declared datatype and shape.

`data_problem` is called by `tensors.parse_request` for every input sent as JSON `data`:
the values must be laid out as the shape says — flat (row-major) or nested exactly as the
shape, every list at one depth as long as the shape's dimension there (no ragged rows,
no partial or deeper nesting) — and each value must be what Triton's JSON reader takes for
the datatype: numbers (integers or not) for FP32/FP64; integers within the datatype's
range for INT*/UINT* (`numpy.iinfo`: Triton reads a JSON 300 into a UINT8 as 44 without a
word, and answers 500 for 2**63 in an INT64); true/false for BOOL; strings for BYTES. FP16
and BF16 cannot be sent as JSON at all (Triton refuses them: the binary extension carries
them). NaN and the infinities are numbers: the model's business.

Why here and not left to Triton: Triton answers most of these with a 500 ("Unable to parse
'data': ..."), which would read as the model's failure (a canary rolled back by anonymous
garbage); some it takes silently and wrong (out-of-range integers wrap).

Cost: lists are flattened level by level (`itertools.chain`, their lengths compared as
sets), then one pass in C over the values (`operator.countOf(map(type, values), float)`,
~12 ns a value), plus `max` (INT64), `min` (UINT64) or both (narrower integers); nothing is
converted. A loop in Python runs only once something is wrong, to name the first bad value.

`loads` is the JSON reader for request bodies: orjson, and for the few bodies it refuses
because they hold NaN, Infinity or -Infinity (which Triton's reader takes) the standard
library's, told to read numbers as orjson and Triton do (integers beyond 64 bits and
numbers past the double range are not silently rounded to infinity).
"""

from __future__ import annotations

import json
import math
from itertools import chain
from operator import countOf

import numpy as np

try:
    from orjson import loads as _fast_loads
except ImportError:  # pragma: no cover - orjson is a declared dependency
    _fast_loads = json.loads

_NUMBERS = frozenset((int, float))
# what each datatype's values may be in JSON (Triton's reader: AsDouble, AsInt/AsUInt, AsBool, AsString)
ALLOWED = {
    "FP32": _NUMBERS,
    "FP64": _NUMBERS,
    "BOOL": frozenset((bool,)),
    "BYTES": frozenset((str,)),
    **{name: frozenset((int,)) for name in ("INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64")},
}
RANGE = {name: (int(np.iinfo(name.lower()).min), int(np.iinfo(name.lower()).max)) for name in ALLOWED if "INT" in name}
WANTS = {"FP32": "numbers", "FP64": "numbers", "BOOL": "true or false", "BYTES": "strings"}
_JSON_NAMES = {
    str: "a string",
    bool: "a boolean",
    type(None): "null",
    dict: "an object",
    list: "a list",
    float: "a number",
    int: "a number",
}
_NON_FINITE = (b"NaN", b"Infinity")
PRIMARY = {name: float if allowed is _NUMBERS else next(iter(allowed)) for name, allowed in ALLOWED.items()}
JSON_INT_MIN, JSON_INT_MAX = -(1 << 63), (1 << 64) - 1  # the ints JSON values are read as (`loads`)


def _render(value) -> str:
    text = json.dumps(value, allow_nan=True)
    return text if len(text) <= 40 else text[:37] + "..."


def _where(index: int, shape: list, nested: bool) -> str:
    if not nested:
        return f"data[{index}]"
    return "data" + "".join(f"[{int(i)}]" for i in np.unravel_index(index, shape))


def _layout_problem(data: list, shape: list, elements: int):
    """(the values in row-major order, None) or (None, what is wrong with the layout)."""
    if not data or type(data[0]) is not list or not shape:  # flat (a rank-0 tensor is one value)
        if len(data) != elements:
            return None, f"shape {str(shape)[:80]} declares {elements} elements but 'data' has {len(data)}"
        return data, None
    if len(data) != shape[0]:
        return (
            None,
            f"'data' has {len(data)} lists where shape {shape} has {shape[0]} (send it flat or nested as the shape)",
        )
    level = data
    for depth in range(1, len(shape)):
        if not level:
            break
        kinds = set(map(type, level))
        if kinds != {list}:
            if list in kinds:
                return None, f"'data' mixes lists and values at depth {depth}"
            return (
                None,
                f"'data' is nested {depth} deep but shape {shape} has rank {len(shape)} (send it flat or nested as the shape)",
            )
        lengths = set(map(len, level))
        if lengths != {shape[depth]}:
            found = ", ".join(map(str, sorted(lengths)[:5]))
            return None, f"'data' has lists of length {found} at depth {depth} where shape {shape} has {shape[depth]}"
        level = list(chain.from_iterable(level))
    return level, None


def _range_problem(values: list, datatype: str, shape: list, nested: bool):
    """Integers outside the datatype's range. JSON integers are read as ints only within
    [-2**63, 2**64) (orjson, and `_json_int`: beyond, a double), so INT64 needs only `max`
    and UINT64 only `min`. Only ints reach here (`data_problem` checked the types first)."""
    bounds = RANGE.get(datatype)
    if bounds is None or not values:
        return None
    low, high = bounds
    # 8/16-bit values: the set of them is at most the range's size, and building it is cheaper than min + max
    seen = set(values) if high - low <= 0xFFFF else values
    if (low <= JSON_INT_MIN or min(seen) >= low) and (high >= JSON_INT_MAX or max(seen) <= high):
        return None
    index = next(i for i, v in enumerate(values) if not low <= v <= high)
    return f"{_where(index, shape, nested)} = {values[index]} is outside {datatype}'s range {low}..{high}"


def contents_range_problem(values, datatype: str, field: str):
    """gRPC typed contents (`field`, e.g. "contents.int_contents") of `datatype` outside its
    range, in the JSON path's words, or None. Protobuf carries INT8/INT16 as int32 and
    UINT8/UINT16 as uint32, so only those can be out of range; wider ones fit their field."""
    low, high = RANGE[datatype]
    # the set of 8/16-bit values is at most the range's size, and cheaper to build than min + max
    seen = set(values)
    if not seen or (min(seen) >= low and max(seen) <= high):
        return None
    index = next(i for i, v in enumerate(values) if not low <= v <= high)
    return f"{field}[{index}] = {values[index]} is outside {datatype}'s range {low}..{high}"


def _value_problem(values: list, datatype: str, shape: list, nested: bool, kinds: set) -> str:
    """The first value that is not of a type `datatype` takes, in words."""
    if list in kinds:
        if kinds == {list}:
            return f"'data' is nested deeper than its shape {shape}"
        return "'data' mixes lists and values"
    allowed = ALLOWED[datatype]
    index = next(i for i, v in enumerate(values) if type(v) not in allowed)
    value = values[index]
    where = _where(index, shape, nested)
    if datatype in WANTS:
        return f"{where} is {_JSON_NAMES.get(type(value), 'a value')} ({_render(value)}) but {datatype} takes {WANTS[datatype]}"
    low, high = RANGE[datatype]
    if type(value) is float and value.is_integer() and not low < value < high:  # an integer past 64 bits: a double
        return f"{where} = {_render(value)} is outside {datatype}'s range {low}..{high}"
    found = "a number with a fraction or exponent" if type(value) is float else _JSON_NAMES.get(type(value), "a value")
    return f"{where} is {found} ({_render(value)}) but {datatype} takes integers"


def data_problem(data: list, datatype: str, shape: list, elements: int):
    """None when JSON `data` holds `elements` values of `datatype` laid out as `shape`, else what is wrong."""
    values, problem = _layout_problem(data, shape, elements)
    if problem is not None:
        return problem
    allowed = ALLOWED.get(datatype)
    if allowed is None:  # FP16, BF16
        return f"{datatype} values cannot be sent as JSON 'data' (Triton refuses them): send them binary (binary_data_size)"
    nested = values is not data
    # the common case in one identity count; the set of types only when it is not all one type
    if countOf(map(type, values), PRIMARY[datatype]) != len(values):
        kinds = set(map(type, values))
        if not kinds <= allowed:
            return _value_problem(values, datatype, shape, nested, kinds)
    return _range_problem(values, datatype, shape, nested)


def _json_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {text[:24]} is too big to be stored in a double")
    return value


def _json_int(text: str):
    value = int(text)  # the interpreter's own digit limit bounds this
    if JSON_INT_MIN <= value <= JSON_INT_MAX:
        return value
    return _json_float(text)  # as orjson and Triton's reader (rapidjson) take it: a double


def loads(document):
    """The JSON value of `document` (bytes or memoryview); ValueError when it is not JSON
    that Triton would read."""
    try:
        return _fast_loads(document)
    except ValueError as exc:
        raw = bytes(document)
        if not any(word in raw for word in _NON_FINITE):
            raise
        try:
            return json.loads(raw.decode("utf-8"), parse_float=_json_float, parse_int=_json_int)
        except (ValueError, RecursionError):
            raise exc from None
