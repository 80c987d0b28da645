"""KServe v2 inference requests checked before they reach Triton.

`parse_request` reads the JSON part of a request (the whole body, or its first
`Inference-Header-Content-Length` bytes) with orjson (`contents.loads`) and checks what
needs no model: each input has a name, a known datatype and a shape of non-negative
integers, its data (JSON `data`, or `binary_data_size` bytes of the binary tensor
extension) holds exactly as many elements as the shape declares, JSON values are what the
datatype takes, laid out as the shape (`contents.data_problem`), and the binary sizes add
up to the body. `Signature.check` (signature.py) then compares the inputs with the
variant's signature.

Every problem is a `Problem(status, code, detail)` naming the input and what is wrong;
nothing here raises on client input. Costs: one orjson parse plus, per input, a few
comparisons and one C-level pass over its JSON values (contents.py); the layout is
checked by lists' lengths before any value is looked at, so a declared shape of
[2147483648, 13] with 13 values is caught without allocating anything.
"""

from __future__ import annotations

import zlib

from gateway.kserve.contents import data_problem
from gateway.kserve.contents import loads as _loads
from gateway.wire.faults import Problem

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


def bad_request(detail: str) -> Problem:
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


def quoted(name: str) -> str:
    """An input's name as messages show it (repr when it holds what does not print)."""
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
        return bad_request(f"the body does not inflate as {encoding}: {exc}")
    if len(data) > limit or inflater.unconsumed_tail:
        return Problem(413, "body_too_large", f"the body inflates to more than {limit} bytes")
    return data


def parse_request(body, ihcl: str | None):
    """A Parsed request, or the Problem with it (model-independent checks). One pass over the
    inputs; an input's values (`_data`), the framing and the outputs are read by helpers."""
    split = _json_part(body, ihcl)
    if type(split) is Problem:
        return split
    header, binary_bytes = split
    document = _document(header)
    if type(document) is Problem:
        return document
    raw_inputs = document["inputs"]
    inputs = []
    seen = set()
    binary_total = 0
    for i, item in enumerate(raw_inputs):
        if type(item) is not dict:
            return bad_request(f"inputs[{i}] must be an object with name, shape, datatype and data")
        name = item.get("name")
        if type(name) is not str or not name or len(name) > 256 or name in seen:
            return name_problem(i, name, seen)
        seen.add(name)
        datatype = item.get("datatype")
        if type(datatype) is not str or datatype not in DATATYPE_SIZE:
            return datatype_problem(name, datatype)
        shape = item.get("shape")
        if type(shape) is not list or len(shape) > MAX_RANK:
            return bad_request(
                f"input {quoted(name)}: 'shape' must be a list of at most {MAX_RANK} non-negative integers"
            )
        elements = 1
        for dim in shape:
            if type(dim) is not int or dim < 0:
                return bad_request(
                    f"input {quoted(name)}: shape {str(shape)[:80]} has {str(dim)[:20]!r}; "
                    "dimensions are non-negative integers"
                )
            elements *= dim
        binary_size = _data(name, item, datatype, shape, elements)
        if type(binary_size) is Problem:
            return binary_size
        inputs.append((name, datatype, shape))
        binary_total += binary_size
    if binary_total != binary_bytes:
        return _binary_total_problem(binary_total, binary_bytes, ihcl)
    outputs = _outputs(document.get("outputs"))
    if type(outputs) is Problem:
        return outputs
    return Parsed(inputs, outputs, raw_inputs)


def _json_part(body, ihcl: str | None):
    """(the JSON header, the binary bytes after it), or the Problem with IHCL."""
    if ihcl is None:
        return body, 0
    if not (ihcl.isascii() and ihcl.isdigit()) or len(ihcl) > 12:
        return bad_request(f"{IHCL} must be a non-negative integer, got {ihcl[:40]!r}")
    n = int(ihcl)
    size = len(body)
    if n > size:
        return bad_request(f"{IHCL} is {n} but the body has {size} bytes")
    if n:
        return memoryview(body)[:n], size - n
    return body, 0


def _document(header):
    """The request's JSON object with a non-empty `inputs` list, or the Problem."""
    if not header:
        return Problem(400, "malformed_json", "empty request body: expected a KServe v2 inference request (JSON)")
    try:
        document = _loads(header)
    except ValueError as exc:
        return Problem(400, "malformed_json", f"request body is not valid JSON: {exc}")
    if type(document) is not dict:
        return bad_request("request body must be a JSON object with an 'inputs' list (KServe v2)")
    raw_inputs = document.get("inputs")
    if type(raw_inputs) is not list or not raw_inputs:
        return bad_request("request body must be a JSON object with a non-empty 'inputs' list (KServe v2)")
    return document


def name_problem(i: int, name, seen: set) -> Problem:
    """The Problem with input i's name, which is not a non-empty string of at most 256
    characters given once (both protocols; the fast check is the caller's)."""
    if type(name) is str and name in seen:
        return bad_request(f"input {quoted(name)} appears twice")
    return bad_request(f"inputs[{i}] needs a 'name' (a non-empty string of at most 256 characters)")


def datatype_problem(name: str, datatype) -> Problem:
    return bad_request(
        f"input {quoted(name)}: datatype {str(datatype)[:20]!r} is not a KServe v2 datatype "
        f"({', '.join(DATATYPE_SIZE)})"
    )


def binary_size_problem(name: str, datatype: str, shape, elements: int, size: int, given: str) -> Problem | None:
    """The Problem when `size` binary bytes cannot hold the shape's elements of the datatype
    (BYTES: at least a 4-byte length prefix each); `given` says where the size came from."""
    element_size = DATATYPE_SIZE[datatype]
    if element_size:
        if size != elements * element_size:
            return bad_request(
                f"input {quoted(name)}: shape {shape} of {datatype} is {elements * element_size} bytes but {given}"
            )
    elif size < 4 * elements:
        return bad_request(
            f"input {quoted(name)}: {elements} BYTES elements need at least {4 * elements} bytes but {given}"
        )
    return None


def _data(name: str, item: dict, datatype: str, shape: list, elements: int):
    """The input's binary bytes (0 when its values are JSON `data`), or the Problem with them."""
    data = item.get("data")
    parameters = item.get("parameters")
    binary_size = None
    if parameters is not None:
        if type(parameters) is not dict:
            return bad_request(f"input {quoted(name)}: 'parameters' must be an object")
        binary_size = parameters.get("binary_data_size")
    if binary_size is not None:
        if type(binary_size) is not int or binary_size < 0:
            return bad_request(f"input {quoted(name)}: binary_data_size must be a non-negative integer")
        if data is not None:
            return bad_request(f"input {quoted(name)} has both 'data' and binary_data_size")
        given = f"binary_data_size is {binary_size}"
        return binary_size_problem(name, datatype, shape, elements, binary_size, given) or binary_size
    if type(data) is list:
        problem = data_problem(data, datatype, shape, elements)
        return 0 if problem is None else bad_request(f"input {quoted(name)}: {problem}")
    if data is None:
        return bad_request(f"input {quoted(name)} has no 'data' (nor binary_data_size)")
    return bad_request(f"input {quoted(name)}: 'data' must be a list")


def _binary_total_problem(binary_total: int, binary_bytes: int, ihcl: str | None) -> Problem:
    if ihcl is None or not binary_bytes and binary_total:
        return bad_request(
            f"binary_data_size given ({binary_total} bytes) without binary data after the JSON header; send {IHCL}"
        )
    return bad_request(
        f"the binary tensors' binary_data_size add up to {binary_total} bytes but {binary_bytes} bytes "
        f"follow the {IHCL} header"
    )


def _outputs(raw_outputs) -> list | Problem:
    """The requested output names, or the Problem with `outputs`."""
    outputs = []
    if raw_outputs is None:
        return outputs
    if type(raw_outputs) is not list:
        return bad_request("'outputs' must be a list")
    for i, item in enumerate(raw_outputs):
        if type(item) is not dict or type(item.get("name")) is not str:
            return bad_request(f"outputs[{i}] must be an object with a 'name'")
        outputs.append(item["name"])
    return outputs
