"""Requests checked against the model before they reach Triton (gateway/kserve/tensors.py):
model-independent checks (JSON shape, data length vs declared shape, binary extension
offsets) and the variant's signature (names, datatypes, ranks, dims, batch). Models here
are not the CTR one the code was first written around: an image model with a fixed
3x224x224 input, a text model with BYTES and an optional input, an unbatched scalar
model. Pure functions, no processes."""

import gzip
import json
import struct
import zlib

import numpy as np
import pytest

from gateway.kserve.signature import Signature
from gateway.kserve.tensors import inflate, parse_request
from gateway.wire.faults import Problem
from harness.hostile_json import variants

IMAGE = Signature.from_document(
    {
        "max_batch_size": 8,
        "inputs": [
            {"name": "pixels", "datatype": "UINT8", "shape": [-1, 3, 224, 224]},
        ],
        "outputs": [{"name": "logits", "datatype": "FP32", "shape": [-1, 1000]}],
    }
)
TEXT = Signature.from_document(
    {
        "max_batch_size": 0,
        "inputs": [
            {"name": "text", "datatype": "BYTES", "shape": [-1]},
            {"name": "lang", "datatype": "BYTES", "shape": [1], "optional": True},
            {"name": "temperature", "datatype": "FP32", "shape": [1]},
        ],
    }
)
CTR = Signature.from_document(
    {
        "max_batch_size": 64,
        "inputs": [
            {"name": "dense", "datatype": "FP32", "shape": [-1, 13]},
            {"name": "sparse", "datatype": "INT64", "shape": [-1, 26]},
        ],
        "outputs": [{"name": "ctr", "datatype": "FP32", "shape": [-1, 1]}],
    }
)


def body(*inputs, outputs=None):
    doc = {"inputs": list(inputs)}
    if outputs is not None:
        doc["outputs"] = outputs
    return json.dumps(doc).encode()


def tensor(name, datatype, shape, data=None, **params):
    out = {"name": name, "datatype": datatype, "shape": shape}
    if data is not None:
        out["data"] = data
    if params:
        out["parameters"] = params
    return out


def ctr(batch=2, nested=True):
    dense = [[0.5] * 13 for _ in range(batch)]
    sparse = [[7] * 26 for _ in range(batch)]
    if not nested:
        dense, sparse = sum(dense, []), sum(sparse, [])
    return body(
        tensor("dense", "FP32", [batch, 13], dense),
        tensor("sparse", "INT64", [batch, 26], sparse),
        outputs=[{"name": "ctr"}],
    )


def problem(raw, ihcl=None, signature=None):
    parsed = parse_request(raw, ihcl)
    if isinstance(parsed, Problem):
        return parsed
    return signature.check(parsed) if signature else None


@pytest.mark.parametrize("nested", [True, False])
def test_a_valid_request_passes_nested_or_flat(nested):
    assert problem(ctr(3, nested), signature=CTR) is None


def test_the_C2_request_is_refused_without_allocating():
    """Issue 10's C2: shape [2147483648, 13] with 13 values (Triton aborted with bad_alloc)."""
    raw = body(tensor("dense", "FP32", [2147483648, 13], [0.5] * 13), tensor("sparse", "INT64", [1, 26], [1] * 26))
    status, code, detail = problem(raw)  # caught even without a signature
    assert (
        (status, code) == (400, "bad_request")
        and "'dense'" in detail
        and "27917287424 elements" in detail
        and "13" in detail
    )
    # a signature adds the batch limit on top, for requests whose data does add up
    raw = body(
        tensor("dense", "FP32", [100, 13], [[0.5] * 13] * 100), tensor("sparse", "INT64", [100, 26], [[1] * 26] * 100)
    )
    assert "batch size 100 is outside 1..64" in problem(raw, signature=CTR)[2]


@pytest.mark.parametrize(
    "raw, signature, expected",
    [
        (b"", None, "empty request body"),
        (b"{", None, "not valid JSON"),
        (b"[]", None, "JSON object"),
        (b'{"inputs": []}', None, "non-empty 'inputs'"),
        (b'{"inputs": [1]}', None, "inputs[0] must be an object"),
        (body({"datatype": "FP32", "shape": [1], "data": [1]}), None, "needs a 'name'"),
        (body(tensor("a", "FP32", [1], [1]), tensor("a", "FP32", [1], [1])), None, "'a' appears twice"),
        (body(tensor("a", "FLOAT", [1], [1])), None, "'FLOAT' is not a KServe v2 datatype"),
        (body(tensor("a", "FP32", "13", [1])), None, "'shape' must be a list"),
        (body(tensor("a", "FP32", [1, -1], [1])), None, "dimensions are non-negative integers"),
        (body(tensor("a", "FP32", [1, 2.5], [1])), None, "dimensions are non-negative integers"),
        (body(tensor("a", "FP32", [1, True], [1])), None, "dimensions are non-negative integers"),
        (body(tensor("a", "FP32", [1] * 40, [1])), None, "at most 32"),
        (body(tensor("a", "FP32", [2])), None, "has no 'data'"),
        (body(tensor("a", "FP32", [2], "12")), None, "'data' must be a list"),
        (
            body(tensor("a", "FP32", [2, 2], [[1, 2], [3]])),
            None,
            "lists of length 1, 2 at depth 1 where shape [2, 2] has 2",
        ),
        (body(tensor("a", "FP32", [2], [[[1]], [[2]]])), None, "nested deeper than its shape"),
        (body(tensor("a", "FP32", [2, 1], [[1], 2])), None, "mixes lists and values"),
        (body(tensor("a", "FP32", [1], [1], binary_data_size=4)), None, "both 'data' and binary_data_size"),
        (body(tensor("a", "FP32", [1], binary_data_size=-4)), None, "binary_data_size must be a non-negative integer"),
        (body(tensor("a", "FP32", [1], binary_data_size=4)), None, "without binary data"),
        (body({**tensor("a", "FP32", [1], [1]), "parameters": []}), None, "'parameters' must be an object"),
        (body(tensor("a", "FP32", [1], [1]), outputs={}), None, "'outputs' must be a list"),
        (
            body(tensor("a", "FP32", [1], [1]), outputs=[{"nom": "x"}]),
            None,
            "outputs[0] must be an object with a 'name'",
        ),
        # against a signature
        (
            body(tensor("image", "UINT8", [1, 3, 224, 224], [0] * 150528)),
            IMAGE,
            "unknown input 'image': the model's inputs are pixels",
        ),
        (body(tensor("pixels", "FP32", [1, 3, 2, 2], [0] * 12)), IMAGE, "datatype FP32 but the model takes UINT8"),
        (body(tensor("pixels", "UINT8", [3, 2, 2], [0] * 12)), IMAGE, "rank 3 but the model takes [-1, 3, 224, 224]"),
        (
            body(tensor("pixels", "UINT8", [1, 3, 2, 2], [0] * 12)),
            IMAGE,
            "does not match the model's [-1, 3, 224, 224] (dimension 2)",
        ),
        (body(tensor("pixels", "UINT8", [0, 3, 224, 224], [])), IMAGE, "batch size 0 is outside 1..8"),
        (
            body(tensor("temperature", "FP32", [1], [0.7])),
            TEXT,
            "missing input text: the model needs text, lang, temperature",
        ),
        (body(tensor("text", "BYTES", [1], ["hi"]), tensor("temperature", "FP32", [2], [1, 2])), TEXT, "dimension 0"),
        (
            body(tensor("dense", "FP32", [1, 13], [[0.5] * 13]), tensor("sparse", "INT64", [2, 26], [[1] * 26] * 2)),
            CTR,
            "batch size 2 differs from the other inputs' 1",
        ),
        (
            body(
                tensor("dense", "FP32", [1, 13], [[0.5] * 13]),
                tensor("sparse", "INT64", [1, 26], [[1] * 26]),
                outputs=[{"name": "proba"}],
            ),
            CTR,
            "unknown output 'proba': the model's outputs are ctr",
        ),
    ],
)
def test_each_problem_is_a_400_naming_what_is_wrong(raw, signature, expected):
    result = problem(raw, signature=signature)
    assert isinstance(result, Problem), result
    assert result[0] == 400 and expected in result[2], result


def test_optional_inputs_may_be_left_out_and_any_length_dims_vary():
    assert (
        problem(
            body(tensor("text", "BYTES", [3], ["a", "b", "c"]), tensor("temperature", "FP32", [1], [0.2])),
            signature=TEXT,
        )
        is None
    )
    assert (
        problem(
            body(
                tensor("text", "BYTES", [1], ["a"]),
                tensor("lang", "BYTES", [1], ["fr"]),
                tensor("temperature", "FP32", [1], [0.2]),
            ),
            signature=TEXT,
        )
        is None
    )


def binary_request(arrays: dict, *, sizes: dict | None = None, extra: bytes = b""):
    """A binary-extension request as tritonclient builds it: JSON header, then raw tensors."""
    inputs, blobs = [], []
    for name, array in arrays.items():
        datatype = {"float32": "FP32", "int64": "INT64", "uint8": "UINT8", "object": "BYTES"}[array.dtype.name]
        if datatype == "BYTES":
            raw = b"".join(struct.pack("<I", len(s)) + s for s in array.ravel())
        else:
            raw = array.tobytes()
        blobs.append(raw)
        size = (sizes or {}).get(name, len(raw))
        inputs.append(
            {"name": name, "datatype": datatype, "shape": list(array.shape), "parameters": {"binary_data_size": size}}
        )
    header = json.dumps({"inputs": inputs}).encode()
    return header + b"".join(blobs) + extra, str(len(header))


def test_binary_extension_offsets_must_add_up():
    rng = np.random.default_rng(0)
    arrays = {"dense": rng.random((4, 13), dtype=np.float32), "sparse": rng.integers(0, 9, (4, 26), dtype=np.int64)}
    raw, ihcl = binary_request(arrays)
    assert problem(raw, ihcl, CTR) is None
    raw, ihcl = binary_request(arrays, extra=b"\0" * 8)  # 8 stray bytes after the tensors
    assert "add up to 1040 bytes but 1048 bytes follow" in problem(raw, ihcl)[2]
    raw, ihcl = binary_request(arrays, sizes={"dense": 200})
    assert "shape [4, 13] of FP32 is 208 bytes but binary_data_size is 200" in problem(raw, ihcl)[2]
    raw, ihcl = binary_request(arrays)
    assert "Inference-Header-Content-Length is 99999 but the body has" in problem(raw, "99999")[2]
    assert "must be a non-negative integer" in problem(raw, "-5")[2]
    assert "must be a non-negative integer" in problem(raw, "1" * 400)[2]
    assert "not valid JSON" in problem(raw, str(int(ihcl) - 3))[2]  # the header cut short
    texts = np.array([b"hello", b"", b"\xff\x00"], dtype=object)
    raw, ihcl = binary_request({"text": texts, "temperature": np.array([0.5], dtype=np.float32)})
    assert problem(raw, ihcl, TEXT) is None
    raw, ihcl = binary_request({"text": texts}, sizes={"text": 5})
    assert "3 BYTES elements need at least 12 bytes" in problem(raw, ihcl)[2]


def test_compressed_bodies_are_inflated_for_the_check_within_the_limit():
    raw = ctr(2)
    assert inflate(gzip.compress(raw), "gzip", 1 << 20) == raw
    assert inflate(zlib.compress(raw), "deflate", 1 << 20) == raw
    assert inflate(raw, "identity", 10) == raw
    bomb = gzip.compress(b"{" + b" " * (20 << 20) + b"}")
    assert inflate(bomb, "gzip", 8 << 20)[:2] == (413, "body_too_large")
    assert inflate(b"not gzip", "gzip", 100)[:2] == (400, "bad_request")
    assert inflate(raw, "br", 100)[:2] == (415, "unsupported_encoding")


def test_check_costs_a_bounded_multiple_of_the_parse():
    """A batch of 64 x 13 FP32 values and a [1, 3, 224, 224] image (150528 values): the
    layout is measured by list lengths, and each value costs one C-level pass
    (gateway/kserve/contents.py; ~5x the orjson parse of the image on this machine, ~13 ns a
    value): bounded by a multiple of the parse, never a Python loop over elements."""
    import time

    import orjson

    image = body(tensor("pixels", "UINT8", [1, 3, 224, 224], [[[[0] * 224] * 224] * 3]))
    # CPU time of this process, the best of five: other work on the machine does not count
    parse_time = min(_timed(lambda: orjson.loads(image)) for _ in range(5))
    check_time = min(_timed(lambda: problem(image, signature=IMAGE)) for _ in range(5))
    assert problem(image, signature=IMAGE) is None
    assert check_time < 10 * parse_time + 0.002, (check_time, parse_time)

    def _run():
        return problem(ctr(64), signature=CTR)

    assert _run() is None
    t0 = time.process_time()
    for _ in range(200):
        _run()
    per_request = (time.process_time() - t0) / 200
    assert per_request < 0.002, per_request  # ~0.1 ms on this machine; generous for a busy one


def _timed(fn):
    import time

    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def test_any_json_value_anywhere_is_a_problem_or_a_request_never_an_exception():
    """Every field of a valid request (names, datatypes, shapes, data, parameters, outputs, the
    id) given each kind of JSON value a client can send: the parser answers a Problem (a 400
    naming it) or a request, never raises (a list as `datatype` once raised TypeError: a 500)."""
    document = {
        "id": "r1",
        "parameters": {"binary_data_output": False},
        "inputs": [
            {"name": "dense", "shape": [1, 2], "datatype": "FP32", "data": [0.5, 1.5], "parameters": {}},
            {"name": "sparse", "shape": [1, 2], "datatype": "INT64", "data": [[1, 2]]},
        ],
        "outputs": [{"name": "score", "parameters": {"binary_data": False}}],
    }
    tried = 0
    for path, value, raw in variants(document):
        parsed = parse_request(raw, None)  # raises on a bug
        assert parsed is not None, (path, value)
        tried += 1
    assert tried > 200
