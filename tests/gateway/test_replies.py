"""KServe v2 shapes of the gateway's replies (gateway/kserve/replies.py): its own errors are
{"error": …} (+ a stable code), a reply names the endpoint and the registry version
instead of the internal Triton model, binary-tensor replies keep a consistent
Inference-Header-Content-Length, Triton's errors and metadata name the endpoint too."""

import json

import numpy as np
import pytest
import tritonclient.http as triton_http

from gateway.kserve.replies import public_metadata, public_reply, rename_error, reply_prefixes
from gateway.table.routes import compile_table
from gateway.wire.httpserver import error_bytes
from gateway.wire.responses import error_body

TRITON = "ctr-ranker__v12__onnx-int8"


def triton_reply(scores) -> bytes:
    return json.dumps(
        {
            "model_name": TRITON,
            "model_version": "1",
            "outputs": [{"name": "ctr", "datatype": "FP32", "shape": [len(scores), 1], "data": scores}],
        },
        separators=(",", ":"),
    ).encode()


def test_own_errors_are_kserve_error_objects():
    assert json.loads(error_body("unknown_endpoint", "unknown endpoint 'x'")) == {
        "error": "unknown endpoint 'x'",
        "code": "unknown_endpoint",
    }
    head, _, body = error_bytes(413, "body_too_large", "body over 8 MiB").partition(b"\r\n\r\n")
    assert json.loads(body) == {"error": "body over 8 MiB", "code": "body_too_large"}


def test_reply_names_the_endpoint_and_registry_version():
    reply_from, reply_to = reply_prefixes("ctr-ranker", TRITON, "12")
    body = triton_reply([0.25, 0.75])
    out, grew = public_reply(body, None, reply_from, reply_to)
    doc = json.loads(out)
    assert doc["model_name"] == "ctr-ranker" and doc["model_version"] == "12"
    assert doc["outputs"] == json.loads(body)["outputs"] and grew == len(out) - len(body)
    assert public_reply(b'{"error":"x"}', None, reply_from, reply_to) is None  # not Triton's reply shape: untouched
    assert public_reply(body, "gzip", reply_from, reply_to) is None  # compressed: passed as is


def test_binary_tensor_reply_stays_decodable():
    """Triton's binary extension: JSON header of IHCL bytes, then raw tensor bytes. After
    the rename, tritonclient decodes the result with the moved header length."""
    scores = np.array([[0.125], [0.5], [0.875]], dtype=np.float32)
    header = json.dumps(
        {
            "model_name": TRITON,
            "model_version": "1",
            "outputs": [
                {"name": "ctr", "datatype": "FP32", "shape": [3, 1], "parameters": {"binary_data_size": scores.nbytes}}
            ],
        },
        separators=(",", ":"),
    ).encode()
    reply_from, reply_to = reply_prefixes("ctr-ranker", TRITON, "12")
    out, grew = public_reply(header + scores.tobytes(), None, reply_from, reply_to)
    result = triton_http.InferResult.from_response_body(out, header_length=len(header) + grew)
    assert result.get_response()["model_name"] == "ctr-ranker"
    assert np.array_equal(result.as_numpy("ctr"), scores)


def test_triton_errors_and_metadata_name_the_endpoint():
    error = b"{\"error\":\"unexpected shape for input 'dense' for model '" + TRITON.encode() + b"'\"}"
    assert rename_error(error, None, TRITON.encode(), b"ctr-ranker") == error.replace(TRITON.encode(), b"ctr-ranker")
    table = compile_table(
        {
            "version": "t1",
            "endpoints": [
                {
                    "name": "ctr-ranker",
                    "timeout_ms": 1000,
                    "variants": [
                        {
                            "name": "v12-onnx-int8",
                            "model_version": "12",
                            "triton_model": TRITON,
                            "role": "stable",
                            "weight_bp": 10000,
                            "replicas": ["http://127.0.0.1:1"],
                        }
                    ],
                }
            ],
        },
        {},
    )
    stable = table.endpoints["ctr-ranker"].stable
    meta = json.dumps(
        {"name": TRITON, "versions": ["1"], "platform": "onnxruntime_onnx", "inputs": [], "outputs": []}
    ).encode()
    assert json.loads(public_metadata(meta, 200, "ctr-ranker", stable)) == {
        "name": "ctr-ranker",
        "versions": ["12"],
        "platform": "onnxruntime_onnx",
        "inputs": [],
        "outputs": [],
    }
    assert stable.reply_from == reply_prefixes("ctr-ranker", TRITON, "12")[0]  # compiled once per table


@pytest.mark.parametrize("bad", [b"", b"not json", b"[1, 2]"])
def test_metadata_that_is_not_an_object_passes_untouched(bad):
    table = compile_table(
        {
            "version": "t1",
            "endpoints": [
                {
                    "name": "e",
                    "timeout_ms": 1000,
                    "variants": [
                        {
                            "name": "v1",
                            "model_version": "1",
                            "triton_model": "m",
                            "role": "stable",
                            "weight_bp": 10000,
                            "replicas": ["http://127.0.0.1:1"],
                        }
                    ],
                }
            ],
        },
        {},
    )
    assert public_metadata(bad, 200, "e", table.endpoints["e"].stable) == bad


@pytest.mark.parametrize(
    "request_id",
    ["abc", 'x"1', '","model_name":"' + TRITON + '","model_version":"9', "\\", "é€"],
    ids=["plain", "quote", "forged pair", "backslash", "unicode"],
)
def test_a_reply_with_the_request_id_first_is_renamed(request_id):
    """Triton writes `id` first when the request had one (tritonclient's request_id): the
    pair after it is swapped, and an id shaped like the pair (escaped in JSON) is left alone."""
    reply_from, reply_to = reply_prefixes("ctr-ranker", TRITON, "12")
    body = json.dumps(
        {"id": request_id, **json.loads(triton_reply([0.5]))}, separators=(",", ":"), ensure_ascii=False
    ).encode()
    out, grew = public_reply(body, None, reply_from, reply_to)
    doc = json.loads(out)
    assert (doc["id"], doc["model_name"], doc["model_version"]) == (request_id, "ctr-ranker", "12")
    assert grew == len(out) - len(body) and TRITON.encode() not in out.replace(
        json.dumps(request_id)[1:-1].encode(), b""
    )


def test_a_reply_in_another_key_order_is_renamed():
    reply_from, reply_to = reply_prefixes("ctr-ranker", TRITON, "12")
    body = json.dumps({"outputs": [], "model_version": "1", "model_name": TRITON}).encode()
    out, _ = public_reply(body, None, reply_from, reply_to)
    assert json.loads(out) == {"outputs": [], "model_version": "12", "model_name": "ctr-ranker"}
    other = json.dumps({"outputs": [], "model_name": "someone-else__v1__onnx"}).encode()
    assert public_reply(other, None, reply_from, reply_to) is None  # another model's reply is not claimed
