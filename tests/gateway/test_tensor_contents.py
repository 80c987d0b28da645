"""What JSON tensors hold (gateway/kserve/contents.py through tensors.parse_request): values of the
declared datatype, integers within its range, laid out flat or nested exactly as the shape.
Pure functions, no processes; the same cases against a real tritonserver are in
test_tensor_contents_live.py."""

import json

import numpy as np
import pytest

from gateway.kserve.contents import ALLOWED, RANGE, data_problem, loads
from gateway.kserve.tensors import parse_request
from gateway.wire.faults import Problem

INTEGER_TYPES = [name for name in ALLOWED if "INT" in name]


def refusal(datatype, shape, data):
    raw = json.dumps({"inputs": [{"name": "x", "datatype": datatype, "shape": shape, "data": data}]}).encode()
    parsed = parse_request(raw, None)
    return parsed[2] if isinstance(parsed, Problem) else None


@pytest.mark.parametrize(
    "datatype, shape, data, expected",
    [
        ("FP32", [1, 3], [["x", 0.5, 1.0]], 'data[0][0] is a string ("x") but FP32 takes numbers'),
        ("FP32", [3], [0.5, "1.5", 1.0], 'data[1] is a string ("1.5") but FP32 takes numbers'),
        ("FP32", [2], [0.5, True], "data[1] is a boolean (true) but FP32 takes numbers"),
        ("FP64", [2], [None, 1.0], "data[0] is null (null) but FP64 takes numbers"),
        ("FP32", [1], [{"a": 1}], "data[0] is an object"),
        ("INT64", [1, 2], [[1, 2**63]], f"data[0][1] = {2**63} is outside INT64's range {-(2**63)}..{2**63 - 1}"),
        ("INT64", [1], [2**64], "outside INT64's range"),  # read as a double, as Triton does
        ("INT64", [2], [1, 2.5], "data[1] is a number with a fraction or exponent (2.5) but INT64 takes integers"),
        ("INT32", [1], [2.0], "(2.0) but INT32 takes integers"),
        ("INT32", [1], [True], "data[0] is a boolean (true) but INT32 takes integers"),
        ("INT32", [1], [2**31], "outside INT32's range -2147483648..2147483647"),
        ("INT16", [1], [-(2**15) - 1], "outside INT16's range"),
        ("INT8", [2, 2], [[1, 2], [3, 128]], "data[1][1] = 128 is outside INT8's range -128..127"),
        ("UINT8", [3], [0, 255, 256], "data[2] = 256 is outside UINT8's range 0..255"),
        ("UINT8", [1], [-1], "outside UINT8's range"),
        ("UINT64", [1], [-1], "data[0] = -1 is outside UINT64's range 0..18446744073709551615"),
        ("UINT32", [1], ["7"], 'is a string ("7") but UINT32 takes integers'),
        ("BOOL", [2], [True, 1], "data[1] is a number (1) but BOOL takes true or false"),
        ("BOOL", [1], ["true"], "but BOOL takes true or false"),
        ("BYTES", [2], ["a", 1], "data[1] is a number (1) but BYTES takes strings"),
        ("BYTES", [1], [None], "is null (null) but BYTES takes strings"),
        ("FP16", [1], [0.5], "FP16 values cannot be sent as JSON 'data'"),
        ("BF16", [1], [0.5], "send them binary (binary_data_size)"),
        # layout
        ("FP32", [2, 2], [[1, 2, 3], [4]], "lists of length 1, 3 at depth 1 where shape [2, 2] has 2"),
        ("FP32", [2, 2], [[1, 2], [3]], "lists of length 1, 2 at depth 1"),
        ("FP32", [3, 2], [[1, 2], [3, 4]], "'data' has 2 lists where shape [3, 2] has 3"),
        ("FP32", [2, 2, 1], [[1, 2], [3, 4]], "'data' is nested 2 deep but shape [2, 2, 1] has rank 3"),
        ("FP32", [1, 2], [[[1], [2]]], "nested deeper than its shape [1, 2]"),
        ("FP32", [2, 1], [[1], 2], "mixes lists and values"),
        ("FP32", [2], [1, [2]], "mixes lists and values"),
        ("FP32", [2147483648, 13], [0.5] * 13, "declares 27917287424 elements but 'data' has 13"),
    ],
)
def test_each_content_problem_names_the_value_and_what_the_datatype_takes(datatype, shape, data, expected):
    detail = refusal(datatype, shape, data)
    assert detail is not None and detail.startswith("input 'x': ") and expected in detail, detail


@pytest.mark.parametrize(
    "datatype, shape, data",
    [
        ("FP32", [2, 2], [[1, 2.5], [3, 4]]),  # integers are numbers
        ("FP32", [4], [1, 2.5, 3, 4]),  # flat data for any shape
        ("FP32", [2, 2], [1e300, -1e300, 0.0, -0.0]),  # past FP32's range: Triton's rounding, the model's business
        ("FP64", [1], [1e308]),
        ("INT64", [2], [2**63 - 1, -(2**63)]),
        ("UINT64", [1], [2**64 - 1]),
        ("UINT8", [1, 3], [[0, 128, 255]]),
        ("INT8", [2], [-128, 127]),
        ("BOOL", [2], [True, False]),
        ("BYTES", [2], ["", "é"]),
        ("FP32", [0, 3], []),
        ("FP32", [2, 0], [[], []]),
        ("FP32", [], [1.5]),  # a rank-0 tensor: one value
    ],
)
def test_what_triton_reads_as_the_datatype_passes(datatype, shape, data):
    assert refusal(datatype, shape, data) is None


def test_every_integer_datatype_takes_its_bounds_and_refuses_one_past_them():
    for datatype in INTEGER_TYPES:
        info = np.iinfo(datatype.lower())
        assert RANGE[datatype] == (info.min, info.max)
        assert refusal(datatype, [2], [int(info.min), int(info.max)]) is None, datatype
        assert "outside" in refusal(datatype, [1], [int(info.max) + 1]), datatype
        assert "outside" in refusal(datatype, [1], [int(info.min) - 1]), datatype


def test_nan_and_infinities_are_numbers_the_model_gets():
    raw = b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [3], "data": [NaN, Infinity, -Infinity]}]}'
    parsed = parse_request(raw, None)
    assert not isinstance(parsed, Problem), parsed
    values = loads(raw)["inputs"][0]["data"]
    assert np.isnan(values[0]) and values[1:] == [float("inf"), float("-inf")]
    # ... but not in an integer tensor, and a literal past the double range is not rounded to infinity
    assert "INT32 takes integers" in refusal("INT32", [1], [float("nan")])
    for literal in (b"1e999", b"-1e400"):
        raw = b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "data": [NaN, %s]}]}' % literal
        assert parse_request(raw, None)[:2] == (400, "malformed_json")
    # integers read by the fallback reader as orjson reads them: beyond 64 bits a double
    assert loads(b"[NaN, 18446744073709551616, -9223372036854775809, 7]")[1:] == [2.0**64, -(2.0**63), 7]
    for bad in (b"[NaN, ]", b"[NaN" + b"[" * 5000 + b"]" * 5000 + b"]", b"\xff NaN"):
        with pytest.raises(ValueError):
            loads(bad)


def test_data_problem_runs_on_lists_without_a_request():
    assert data_problem([[1.0, 2.0]], "FP32", [1, 2], 2) is None
    assert "outside UINT16's range" in data_problem([70000], "UINT16", [1], 1)


def test_binary_tensors_are_sized_by_shape_and_datatype():
    header = {"inputs": [{"name": "x", "datatype": "INT64", "shape": [2, 3], "parameters": {"binary_data_size": 40}}]}
    raw = json.dumps(header).encode()
    problem = parse_request(raw + b"\0" * 40, str(len(raw)))
    assert (
        problem[:2] == (400, "bad_request")
        and "shape [2, 3] of INT64 is 48 bytes but binary_data_size is 40" in problem[2]
    )
    header["inputs"][0]["parameters"]["binary_data_size"] = 48
    raw = json.dumps(header).encode()
    assert not isinstance(parse_request(raw + b"\0" * 48, str(len(raw))), Problem)
