"""A KServe v2 gRPC inference request checked like an HTTP one, and the gateway's answers
as gRPC statuses.

`parse_infer` reads a `ModelInferRequest` into the same `tensors.Parsed` the HTTP path
builds from JSON, so one `Signature.check` serves both protocols, with the same
model-independent checks first: each input a unique name (1-256 characters), a KServe v2
datatype, a shape of at most 32 non-negative dimensions, and its data either in the typed
`contents` field that datatype uses (`fp32_contents` for FP32, `int_contents` for
INT8/16/32, …; FP16 and BF16 have none) holding exactly the shape's element count (and, for
INT8/INT16/UINT8/UINT16, which protobuf carries as int32/uint32, values within the
datatype's range, in the JSON path's words: `contents.contents_range_problem`), or in
`raw_input_contents` (then one entry per input, none in `contents`) of exactly elements x
the datatype's size bytes (BYTES: at least 4 per element, each a length prefix) — the
binary sizes are checked as the HTTP binary extension's `binary_data_size` is, before a
byte is forwarded. Shared-memory inputs and outputs are refused: a replica's shared memory
is not the client's. The messages are the HTTP path's.

`grpc_code` maps the gateway's HTTP statuses (kept for metrics, so both protocols count
alike) to gRPC codes.
"""

from __future__ import annotations

import grpc

from gateway.kserve.contents import contents_range_problem
from gateway.kserve.tensors import (
    DATATYPE_SIZE,
    MAX_RANK,
    Parsed,
    bad_request,
    binary_size_problem,
    datatype_problem,
    name_problem,
    quoted,
)
from gateway.wire.faults import Problem

# the typed field of InferTensorContents each datatype's values go in (None: raw only)
CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
    "FP16": None,
    "BF16": None,
}
ALL_FIELDS = tuple(sorted({f for f in CONTENTS_FIELD.values() if f}))
NARROW = frozenset(("INT8", "INT16", "UINT8", "UINT16"))  # carried in a wider protobuf field: range checked
SHARED_MEMORY = "shared_memory_region"

HTTP_TO_GRPC = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    408: grpc.StatusCode.DEADLINE_EXCEEDED,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    415: grpc.StatusCode.INVALID_ARGUMENT,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    499: grpc.StatusCode.CANCELLED,
    500: grpc.StatusCode.INTERNAL,
    501: grpc.StatusCode.UNIMPLEMENTED,
    502: grpc.StatusCode.UNAVAILABLE,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}
# Triton's gRPC codes as the HTTP statuses its HTTP port answers (metrics, fault, breaker)
GRPC_TO_HTTP = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 503,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.CANCELLED: 499,
}


def grpc_code(status: int) -> grpc.StatusCode:
    if status in HTTP_TO_GRPC:
        return HTTP_TO_GRPC[status]
    return grpc.StatusCode.INVALID_ARGUMENT if 400 <= status < 500 else grpc.StatusCode.INTERNAL


def http_status(code: grpc.StatusCode) -> int:
    return GRPC_TO_HTTP.get(code, 500)


def _shared_memory(parameters) -> bool:
    return SHARED_MEMORY in parameters


def parse_infer(request):
    """A Parsed request, or the Problem with it (model-independent checks)."""
    raw = request.raw_input_contents
    inputs_pb = request.inputs
    if not inputs_pb:
        return bad_request("the request needs at least one input (KServe v2)")
    if raw and len(raw) != len(inputs_pb):
        return bad_request(f"raw_input_contents has {len(raw)} entries for {len(inputs_pb)} inputs: give one per input")
    inputs = []
    seen = set()
    for i, item in enumerate(inputs_pb):
        checked = _input(i, item, raw, seen)
        if type(checked) is Problem:
            return checked
        inputs.append(checked)
    outputs = []
    for item in request.outputs:
        if _shared_memory(item.parameters):
            return bad_request(f"output {quoted(item.name)}: shared memory outputs cannot go through the gateway")
        outputs.append(item.name)
    return Parsed(inputs, outputs, request)


def _input(i: int, item, raw, seen: set):
    """(name, datatype, shape) of input i, or the Problem with it."""
    name = item.name
    if not name or len(name) > 256 or name in seen:
        return name_problem(i, name, seen)
    seen.add(name)
    datatype = item.datatype
    if datatype not in DATATYPE_SIZE:
        return datatype_problem(name, datatype)
    shape = list(item.shape)
    if len(shape) > MAX_RANK:
        return bad_request(f"input {quoted(name)}: 'shape' must be a list of at most {MAX_RANK} non-negative integers")
    elements = 1
    for dim in shape:
        if dim < 0:
            return bad_request(f"input {quoted(name)}: shape {shape} has {dim}; dimensions are non-negative integers")
        elements *= dim
    if _shared_memory(item.parameters):
        return bad_request(f"input {quoted(name)}: shared memory inputs cannot go through the gateway; send the data")
    contents = item.contents if item.HasField("contents") else None
    if raw:
        if contents is not None and any(len(getattr(contents, f)) for f in ALL_FIELDS):
            return bad_request(f"input {quoted(name)} has both contents and raw_input_contents")
        size = len(raw[i])
        problem = binary_size_problem(name, datatype, shape, elements, size, f"its raw_input_contents has {size}")
    else:
        problem = _contents_problem(name, datatype, shape, elements, contents)
    return (name, datatype, shape) if problem is None else problem


def _contents_problem(name: str, datatype: str, shape: list, elements: int, contents) -> Problem | None:
    """The Problem with an input's values in the typed `contents` field, or None."""
    field = CONTENTS_FIELD[datatype]
    if field is None:
        return bad_request(f"input {quoted(name)}: {datatype} has no typed contents field; send raw_input_contents")
    count = len(getattr(contents, field)) if contents is not None else 0
    others = [f for f in ALL_FIELDS if f != field and contents is not None and len(getattr(contents, f))]
    if others:
        return bad_request(f"input {quoted(name)}: {datatype} values go in contents.{field}, not {others[0]}")
    if count != elements:
        return bad_request(f"input {quoted(name)}: shape {shape} declares {elements} elements but contents has {count}")
    if datatype in NARROW and contents is not None:
        problem = contents_range_problem(getattr(contents, field), datatype, f"contents.{field}")
        if problem is not None:
            return bad_request(f"input {quoted(name)}: {problem}")
    return None


def metadata_dict(pairs):
    """The request's metadata as the lower-case str dict the key check and routing read
    (the first of duplicates; binary `-bin` entries left out), each value trimmed of the
    spaces and tabs around it as an HTTP parser trims a header's (`x-user-id: " u3"` is
    "u3" on both protocols), or a Problem when a field the gateway reads comes twice."""
    out = {}
    for key, value in pairs or ():
        if key.endswith("-bin"):
            continue
        if key in out:
            if key in SINGLETONS:
                return Problem(400, "bad_header", f"duplicate {key} metadata")
            continue
        out[key] = value.strip(" \t")
    return out


SINGLETONS = frozenset(("authorization", "x-api-key", "x-request-id"))
