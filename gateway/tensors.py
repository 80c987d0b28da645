"""KServe v2 inference requests checked before they reach Triton.

`parse_request` reads the JSON part of a request (the whole body, or its first
`Inference-Header-Content-Length` bytes) with orjson (`contents.loads`) and checks what
needs no model: each input has a name, a known datatype and a shape of non-negative
integers, its data (JSON `data`, or `binary_data_size` bytes of the binary tensor
extension) holds exactly as many elements as the shape declares, JSON values are what the
datatype takes, laid out as the shape (`contents.data_problem`), and the binary sizes add
up to the body.
`Signature.check` then compares the inputs with the variant's signature from the route
table: names (unknown, missing, duplicated), datatypes, rank, fixed dimensions, batch
size against `max_batch_size`, one batch size for all inputs, known output names.

Every problem is a `Problem(status, code, detail)` naming the input and what is wrong;
nothing here raises on client input. Costs: one orjson parse plus, per input, a few
comparisons and one C-level pass over its JSON values (contents.py); the layout is
checked by lists' lengths before any value is looked at, so a declared shape of
[2147483648, 13] with 13 values is caught without allocating anything.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from .contents import data_problem
from .contents import loads as _loads

# Bytes per element of each KServe v2 datatype; BYTES elements are length-prefixed (4 + n).
DATATYPE_SIZE = {
    "BOOL": 1,
    "UINT8": 1,
    "UINT16": 2,
    "UINT32": 4,
    "UINT64": 8,
    "INT8": 1,
    "INT16": 2,
    "INT32": 4,
    "INT64": 8,
    "FP16": 2,
    "FP32": 4,
    "FP64": 8,
    "BF16": 2,
    "BYTES": 0,
}
IHCL = "Inference-Header-Content-Length"
MAX_RANK = 32


class Problem(tuple):
    """(status, code, detail) of a request the gateway refuses."""

    __slots__ = ()

    def __new__(cls, status: int, code: str, detail: str):
        return super().__new__(cls, (status, code, detail))


def _bad(detail: str) -> Problem:
    return Problem(400, "bad_request", detail)


class Parsed:
    """A request that passed the model-independent checks: its inputs as
    (name, datatype, shape) tuples, the batch size (first dim of the first input, or
    None), and the requested output names. `source`: what the inputs were read from (the
    JSON body's `inputs` list, or the gRPC request), for the few values routing reads
    (affinity.input_value); None when nothing needs them."""

    __slots__ = ("inputs", "outputs", "source")

    def __init__(self, inputs: list, outputs: list, source=None):
        self.inputs = inputs
        self.outputs = outputs
        self.source = source


def _label(name: str) -> str:
    return f"'{name}'" if name.isprintable() else repr(name)


def inflate(body: bytes, encoding: str, limit: int):
    """The body without its Content-Encoding (gzip/deflate), at most `limit` bytes; a Problem otherwise."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "deflate"):
        return Problem(
            415, "unsupported_encoding", f"Content-Encoding {encoding[:40]!r} is not supported (gzip, deflate)"
        )
    inflater = zlib.decompressobj(47 if encoding == "gzip" else 15)
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        return _bad(f"the body does not inflate as {encoding}: {exc}")
    if len(data) > limit or inflater.unconsumed_tail:
        return Problem(413, "body_too_large", f"the body inflates to more than {limit} bytes")
    return data


def parse_request(body, ihcl: str | None):  # noqa: C901 - one pass read top to bottom; split when next changed
    """A Parsed request, or the Problem with it (model-independent checks)."""
    size = len(body)
    header = body
    binary_bytes = 0
    if ihcl is not None:
        if not (ihcl.isascii() and ihcl.isdigit()) or len(ihcl) > 12:
            return _bad(f"{IHCL} must be a non-negative integer, got {ihcl[:40]!r}")
        n = int(ihcl)
        if n > size:
            return _bad(f"{IHCL} is {n} but the body has {size} bytes")
        if n:
            header = memoryview(body)[:n]
            binary_bytes = size - n
    if not header:
        return Problem(400, "malformed_json", "empty request body: expected a KServe v2 inference request (JSON)")
    try:
        document = _loads(header)
    except ValueError as exc:
        return Problem(400, "malformed_json", f"request body is not valid JSON: {exc}")
    if type(document) is not dict:
        return _bad("request body must be a JSON object with an 'inputs' list (KServe v2)")
    raw_inputs = document.get("inputs")
    if type(raw_inputs) is not list or not raw_inputs:
        return _bad("request body must be a JSON object with a non-empty 'inputs' list (KServe v2)")
    inputs = []
    seen = set()
    binary_total = 0
    sizes = DATATYPE_SIZE
    for i, item in enumerate(raw_inputs):
        if type(item) is not dict:
            return _bad(f"inputs[{i}] must be an object with name, shape, datatype and data")
        name = item.get("name")
        if type(name) is not str or not name or len(name) > 256 or name in seen:
            if type(name) is str and name in seen:
                return _bad(f"input {_label(name)} appears twice")
            return _bad(f"inputs[{i}] needs a 'name' (a non-empty string of at most 256 characters)")
        seen.add(name)
        datatype = item.get("datatype")
        if datatype not in sizes:
            return _bad(
                f"input {_label(name)}: datatype {str(datatype)[:20]!r} is not a KServe v2 datatype "
                f"({', '.join(sizes)})"
            )
        shape = item.get("shape")
        if type(shape) is not list or len(shape) > MAX_RANK:
            return _bad(f"input {_label(name)}: 'shape' must be a list of at most {MAX_RANK} non-negative integers")
        elements = 1
        for dim in shape:
            if type(dim) is not int or dim < 0:
                return _bad(
                    f"input {_label(name)}: shape {str(shape)[:80]} has {str(dim)[:20]!r}; "
                    "dimensions are non-negative integers"
                )
            elements *= dim
        data = item.get("data")
        parameters = item.get("parameters")
        binary_size = None
        if parameters is not None:
            if type(parameters) is not dict:
                return _bad(f"input {_label(name)}: 'parameters' must be an object")
            binary_size = parameters.get("binary_data_size")
        if binary_size is not None:
            if type(binary_size) is not int or binary_size < 0:
                return _bad(f"input {_label(name)}: binary_data_size must be a non-negative integer")
            if data is not None:
                return _bad(f"input {_label(name)} has both 'data' and binary_data_size")
            element_size = sizes[datatype]
            if element_size:
                if binary_size != elements * element_size:
                    return _bad(
                        f"input {_label(name)}: shape {shape} of {datatype} is {elements * element_size} bytes "
                        f"but binary_data_size is {binary_size}"
                    )
            elif binary_size < 4 * elements:
                return _bad(
                    f"input {_label(name)}: {elements} BYTES elements need at least {4 * elements} bytes "
                    f"but binary_data_size is {binary_size}"
                )
            binary_total += binary_size
        elif type(data) is list:
            problem = data_problem(data, datatype, shape, elements)
            if problem is not None:
                return _bad(f"input {_label(name)}: {problem}")
        elif data is None:
            return _bad(f"input {_label(name)} has no 'data' (nor binary_data_size)")
        else:
            return _bad(f"input {_label(name)}: 'data' must be a list")
        inputs.append((name, datatype, shape))
    if binary_total != binary_bytes:
        if ihcl is None or not binary_bytes and binary_total:
            return _bad(
                f"binary_data_size given ({binary_total} bytes) without binary data after the JSON header; send {IHCL}"
            )
        return _bad(
            f"the binary tensors' binary_data_size add up to {binary_total} bytes but {binary_bytes} bytes "
            f"follow the {IHCL} header"
        )
    outputs = []
    raw_outputs = document.get("outputs")
    if raw_outputs is not None:
        if type(raw_outputs) is not list:
            return _bad("'outputs' must be a list")
        for i, item in enumerate(raw_outputs):
            if type(item) is not dict or type(item.get("name")) is not str:
                return _bad(f"outputs[{i}] must be an object with a 'name'")
            outputs.append(item["name"])
    return Parsed(inputs, outputs, raw_inputs)


@dataclass(frozen=True)
class InputSpec:
    name: str
    datatype: str
    shape: tuple  # full request shape; -1 = any size (the batch dimension first when batched)
    optional: bool = False


class Signature:
    """What a variant's model accepts (route table `signature`)."""

    __slots__ = ("inputs", "required", "outputs", "max_batch_size", "names", "fixed")

    def __init__(self, inputs: list[InputSpec], outputs: list[str] | None, max_batch_size: int):
        self.inputs = {spec.name: spec for spec in inputs}
        start = 1 if max_batch_size > 0 else 0
        # per input: (datatype, rank, ((axis, size) of each fixed dimension past the batch))
        self.fixed = {
            spec.name: (
                spec.datatype,
                len(spec.shape),
                tuple((axis, size) for axis, size in enumerate(spec.shape) if axis >= start and size != -1),
            )
            for spec in inputs
        }
        self.required = [spec.name for spec in inputs if not spec.optional]
        self.outputs = frozenset(outputs) if outputs else None
        self.max_batch_size = max_batch_size
        self.names = ", ".join(spec.name for spec in inputs)

    @classmethod
    def from_document(cls, document: dict) -> Signature:
        inputs = [
            InputSpec(i["name"], i["datatype"], tuple(i["shape"]), bool(i.get("optional", False)))
            for i in document["inputs"]
        ]
        outputs = [o["name"] for o in document.get("outputs", ())] or None
        return cls(inputs, outputs, int(document.get("max_batch_size", 0)))

    def check(self, parsed: Parsed):  # noqa: C901 - one pass read top to bottom; split when next changed
        """None when the request fits this signature, else the Problem."""
        fixed = self.fixed
        batch = None
        max_batch = self.max_batch_size
        for name, datatype, shape in parsed.inputs:
            expected = fixed.get(name)
            if expected is None:
                return _bad(f"unknown input {_label(name)}: the model's inputs are {self.names}")
            want_type, rank, dims = expected
            if datatype != want_type:
                return _bad(f"input {_label(name)}: datatype {datatype} but the model takes {want_type}")
            if len(shape) != rank:
                return _bad(
                    f"input {_label(name)}: shape {shape} has rank {len(shape)} but the model takes "
                    f"{list(self.inputs[name].shape)}"
                )
            if max_batch > 0:
                n = shape[0]
                if n < 1 or n > max_batch:
                    return _bad(
                        f"input {_label(name)}: batch size {n} is outside 1..{max_batch} (the model's max_batch_size)"
                    )
                if batch is None:
                    batch = n
                elif n != batch:
                    return _bad(f"input {_label(name)}: batch size {n} differs from the other inputs' {batch}")
            for axis, size in dims:
                if shape[axis] != size:
                    return _bad(
                        f"input {_label(name)}: shape {shape} does not match the model's "
                        f"{list(self.inputs[name].shape)} (dimension {axis})"
                    )
        # every given name is known and unique by now: all are there when the counts match
        if len(parsed.inputs) != len(fixed):
            given = {i[0] for i in parsed.inputs}
            missing = [name for name in self.required if name not in given]
            if missing:
                return _bad(
                    f"missing input{'s' if len(missing) > 1 else ''} {', '.join(missing)}: the model needs {self.names}"
                )
        if parsed.outputs and self.outputs is not None:
            for name in parsed.outputs:
                if name not in self.outputs:
                    return _bad(
                        f"unknown output {_label(name)}: the model's outputs are {', '.join(sorted(self.outputs))}"
                    )
        return None
