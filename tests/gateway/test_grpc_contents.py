"""gRPC typed contents checked like JSON `data` (gateway/v2/grpc/convert.py): protobuf carries
INT8/INT16 in int32 and UINT8/UINT16 in uint32 fields, so a value outside the datatype's
range is refused with INVALID_ARGUMENT naming the input and the value, in the JSON path's
words; values at the bounds and wider datatypes (whose field is their own range) pass.
Pure functions, no processes."""

import json

import pytest
from tritonclient.grpc import service_pb2 as pb

from gateway.kserve.contents import RANGE
from gateway.kserve.tensors import Parsed, parse_request
from gateway.v2.grpc.convert import grpc_code, parse_infer
from gateway.wire.faults import Problem

FIELD = {"INT8": "int_contents", "INT16": "int_contents", "UINT8": "uint_contents", "UINT16": "uint_contents"}


def grpc_request(datatype: str, values: list, field: str | None = None) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="ep")
    tensor = request.inputs.add(name="feats", datatype=datatype, shape=[1, len(values)])
    getattr(tensor.contents, field or FIELD[datatype]).extend(values)
    return request


def json_refusal(datatype: str, values: list) -> str:
    body = {"inputs": [{"name": "feats", "datatype": datatype, "shape": [1, len(values)], "data": values}]}
    parsed = parse_request(json.dumps(body).encode(), None)
    return parsed[2] if isinstance(parsed, Problem) else ""


@pytest.mark.parametrize(
    "datatype, values, bad_index",
    [
        ("INT8", [1, 128], 1),
        ("INT8", [-129, 0], 0),
        ("INT8", [5, 2**31 - 1, 3], 1),
        ("INT16", [2**15], 0),
        ("INT16", [0, 1, -(2**15) - 1], 2),
        ("UINT8", [0, 255, 256], 2),
        ("UINT8", [2**32 - 1], 0),
        ("UINT16", [2**16], 0),
        ("UINT16", [7, 65536, 8], 1),
    ],
)
def test_out_of_range_values_are_refused_naming_the_input(datatype, values, bad_index):
    problem = parse_infer(grpc_request(datatype, values))
    assert isinstance(problem, Problem), problem
    status, code, detail = problem
    assert grpc_code(status).name == "INVALID_ARGUMENT" and code == "bad_request"
    low, high = RANGE[datatype]
    field = FIELD[datatype]
    assert detail == (
        f"input 'feats': contents.{field}[{bad_index}] = {values[bad_index]} is outside {datatype}'s range {low}..{high}"
    )
    # the JSON path refuses the same values, naming the same value and range
    assert f"= {values[bad_index]} is outside {datatype}'s range {low}..{high}" in json_refusal(datatype, values)


@pytest.mark.parametrize("datatype", sorted(FIELD))
def test_values_at_the_bounds_pass(datatype):
    low, high = RANGE[datatype]
    assert isinstance(parse_infer(grpc_request(datatype, [low, 0, high])), Parsed)
    assert json_refusal(datatype, [low, 0, high]) == ""


@pytest.mark.parametrize(
    "datatype, field, values",
    [("INT32", "int_contents", [-(2**31), 2**31 - 1]), ("UINT32", "uint_contents", [0, 2**32 - 1])],
)
def test_datatypes_as_wide_as_their_field_take_its_whole_range(datatype, field, values):
    assert isinstance(parse_infer(grpc_request(datatype, values, field)), Parsed)


def test_an_empty_tensor_has_nothing_to_check():
    request = pb.ModelInferRequest(model_name="ep")
    request.inputs.add(name="feats", datatype="UINT8", shape=[1, 0])
    assert isinstance(parse_infer(request), Parsed)
