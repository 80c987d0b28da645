"""Body bounds per route (gateway/process/bodybounds.py), from a compiled route table: what each
signature can need, the LLM context bound, the routes that take no body, and no name oracle
(a request that may not call a closed endpoint is held to what an unknown name is)."""

from __future__ import annotations

from hashlib import sha256

import pytest

from gateway.process.bodybounds import HEAD_ALLOWANCE, JSON_BYTES_PER_ELEMENT, NO_BODY_ALLOWANCE, BodyBounds, llm_bytes
from gateway.table.routes import compile_table

MAX_BODY = 8 << 20
CTR = {
    "max_batch_size": 64,
    "inputs": [
        {"name": "dense", "datatype": "FP32", "shape": [-1, 13]},
        {"name": "sparse", "datatype": "INT64", "shape": [-1, 26]},
    ],
}
CTR_BYTES = HEAD_ALLOWANCE + 64 * (13 + 26) * JSON_BYTES_PER_ELEMENT
KEYS = {
    "mpk_ads_secret_one": ("ads-1", "ads"),
    "mpk_ads_secret_two": ("ads-2", "ads"),
    "mpk_rec_secret": ("rec-1", "rec"),
}


def variant(signature, name="v1", role="stable", weight=10000):
    doc = {
        "name": name,
        "model_version": "1",
        "triton_model": f"m__{name}",
        "role": role,
        "weight_bp": weight,
        "replicas": ["http://127.0.0.1:9000"],
    }
    if signature is not None:
        doc["signature"] = signature
    return doc


def llm(name, context_length, auth):
    backend = {"id": "b", "kind": "triton", "urls": ["http://127.0.0.1:9001"], "model": "m__v1__llm"}
    stable = {"name": "v1", "model_version": "1", "role": "stable", "weight_bp": 10000, "backends": [backend]}
    return {"name": name, "auth": auth, "context_length": context_length, "variants": [stable]}


def bounds() -> BodyBounds:
    document = {
        "version": "1",
        "keys": [
            {"id": kid, "team": team, "prefix": secret[:6], "sha256": sha256(secret.encode()).hexdigest()}
            for secret, (kid, team) in KEYS.items()
        ],
        "endpoints": [
            {"name": "ctr", "auth": {"public": True}, "variants": [variant(CTR)]},
            {"name": "closed", "team": "ads", "auth": {"keys": ["ads-1"]}, "variants": [variant(CTR)]},
            {
                "name": "seq",  # a dynamic dimension past the batch: the signature bounds nothing
                "auth": {"public": True},
                "variants": [
                    variant({"max_batch_size": 8, "inputs": [{"name": "t", "datatype": "INT64", "shape": [-1, -1]}]})
                ],
            },
            {
                "name": "text",
                "auth": {"public": True},
                "variants": [variant({"inputs": [{"name": "q", "datatype": "BYTES", "shape": [1]}]})],
            },
            {"name": "bare", "auth": {"public": True}, "variants": [variant(None)]},
            {
                "name": "split",  # the largest variant's need
                "auth": {"public": True},
                "variants": [
                    variant(CTR, "v1", "stable", 5000),
                    variant({**CTR, "max_batch_size": 128}, "v2", "canary", 5000),
                ],
            },
        ],
        "llm_endpoints": [
            llm("chat-small", 2048, {"public": True}),
            llm("chat-closed", 8192, {"keys": ["rec-1"]}),
        ],
    }
    table = compile_table(document, {}, {})
    assert not table.refusals, table.refusals
    return BodyBounds(table, MAX_BODY)


def bearer(secret):
    return {"authorization": f"Bearer {secret}"}


@pytest.mark.parametrize(
    "method,path,headers,expected",
    [
        (b"POST", "/v2/models/ctr/infer", {}, CTR_BYTES),
        (b"POST", "/v2/models/ctr/versions/1/infer", {}, CTR_BYTES),
        (b"POST", "/v2/models/split/infer", {}, HEAD_ALLOWANCE + 128 * 39 * JSON_BYTES_PER_ELEMENT),
        (b"POST", "/v2/models/seq/infer", {}, None),
        (b"POST", "/v2/models/text/infer", {}, None),
        (b"POST", "/v2/models/bare/infer", {}, None),
        (b"POST", "/v2/models/closed/infer", bearer("mpk_ads_secret_one"), CTR_BYTES),  # its key
        (b"POST", "/v2/models/closed/infer", bearer("mpk_ads_secret_two"), CTR_BYTES),  # its team (403)
        (b"POST", "/v2/models/closed/infer", {}, NO_BODY_ALLOWANCE),
        (b"POST", "/v2/models/closed/infer", bearer("mpk_rec_secret"), NO_BODY_ALLOWANCE),
        (b"POST", "/v2/models/closed/infer", {"x-api-key": "mpk_nope"}, NO_BODY_ALLOWANCE),
        (b"POST", "/v2/models/nosuch/infer", {}, NO_BODY_ALLOWANCE),
        (b"GET", "/v2/models/ctr", {}, NO_BODY_ALLOWANCE),
        (b"POST", "/v2/models/ctr/ready", {}, NO_BODY_ALLOWANCE),
        (b"POST", "/v2/feedback", {}, 64 << 10),  # no key: one user's feedback
        (b"POST", "/v2/feedback", {"x-api-key": "mpk_nope"}, 64 << 10),
        (b"POST", "/v2/feedback", bearer("mpk_ads_secret_one"), 1 << 20),  # a team's batch
        (b"POST", "/v1/chat/completions", {}, llm_bytes(2048)),
        (b"POST", "/v1/completions", bearer("mpk_rec_secret"), llm_bytes(8192)),
        (b"POST", "/v1/chat/completions", bearer("mpk_ads_secret_one"), llm_bytes(2048)),
        (b"GET", "/v1/models", {}, NO_BODY_ALLOWANCE),
        (b"POST", "/metrics", {}, NO_BODY_ALLOWANCE),
        (b"POST", "/anything", {}, NO_BODY_ALLOWANCE),
    ],
)
def test_bounds(method, path, headers, expected):
    got = bounds().limit(method, path, headers)
    assert (got[0] if got is not None else None) == expected


def test_a_seven_megabyte_body_for_a_thirteen_float_model_is_far_past_its_bound():
    assert CTR_BYTES < 300_000 < 7_000_000


def test_no_name_oracle():
    """An unknown name and a closed endpoint the request may not call: the same bound, the same words."""
    b = bounds()
    for headers in ({}, bearer("mpk_rec_secret")):
        assert b.limit(b"POST", "/v2/models/closed/infer", headers) == b.limit(b"POST", "/v2/models/x/infer", headers)


def test_llm_bound_follows_the_context_length():
    assert llm_bytes(4096) < llm_bytes(8192) < MAX_BODY
    assert llm_bytes(4096) >= 4 * 4096 * 12  # every character the estimate lets in, escaped
