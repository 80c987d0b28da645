"""Tensor contents against a real gateway and a real tritonserver.

- A table of malformed JSON tensor contents: each is a 400 `bad_request` naming the input
  and the problem, counted as the client's, and never reaches Triton (its own
  `/v2/models/<m>/stats` inference and execution counts do not move); the same body sent
  straight to Triton gets the answer the table says (mostly a 500 that would have read as
  the model's failure, or a 200 with the value silently wrapped).
- A body the gateway does not check (a request parameter of the wrong type) that Triton
  answers 500 "Unable to parse ..." is the client's 400 (failover.blames_request), not
  failed over and not the variant's error.
- Roll-back-by-garbage: anonymous garbage pinned to the canary by its sticky keys, beside
  honest traffic, leaves the candidate with zero errors for the collector and the judge's
  error test; as a control, a canary that really fails is caught by the same test.
"""

from __future__ import annotations

import json
import time

import pytest
import requests

from harness.gateway import GatewayProcess, start_triton
from harness.onnx import N_DENSE, N_SPARSE
from harness.triton_models import TYPES_INPUTS, behaviour_model, ctr_model, infer_body, types_model
from tests.gateway.conftest import require_triton

pytestmark = pytest.mark.integration

STABLE, CANARY, BROKEN, TYPES = "ctr__v1__onnx", "ctr__v2__onnx", "broken__v1__py", "types__v1__py"
CTR_SIGNATURE = {
    "max_batch_size": 64,
    "inputs": [
        {"name": "dense", "datatype": "FP32", "shape": [-1, N_DENSE]},
        {"name": "sparse", "datatype": "INT64", "shape": [-1, N_SPARSE]},
    ],
    "outputs": [{"name": "ctr", "datatype": "FP32", "shape": [-1, 1]}],
}
TYPES_SIGNATURE = {
    "max_batch_size": 0,
    "inputs": [{"name": n, "datatype": d, "shape": [-1], "optional": True} for n, d in TYPES_INPUTS.items()],
    "outputs": [{"name": "y", "datatype": "FP32", "shape": [1]}],
}


def variant(name, model, role, weight, url, signature):
    return {
        "name": name,
        "model_version": name.lstrip("v") if name.startswith("v") else "9",
        "triton_model": model,
        "role": role,
        "weight_bp": weight,
        "replicas": [url],
        "signature": signature,
    }


def route_table(url: str) -> dict:
    def endpoint(name, *variants):
        return {
            "name": name,
            "salt": f"{name}-1",
            "timeout_ms": 5000,
            "auth": {"public": True},
            "variants": list(variants),
        }

    return {
        "version": "contents-1",
        "keys": [],
        "endpoints": [
            endpoint(
                "ctr",
                variant("v1", STABLE, "stable", 5000, url, CTR_SIGNATURE),
                variant("v2", CANARY, "canary", 5000, url, CTR_SIGNATURE),
            ),
            endpoint("types", variant("v1", TYPES, "stable", 10000, url, TYPES_SIGNATURE)),
            endpoint(
                "broken",
                variant("v1", STABLE, "stable", 5000, url, CTR_SIGNATURE),
                variant("bad", BROKEN, "canary", 5000, url, CTR_SIGNATURE),
            ),
        ],
    }


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    require_triton()
    work = tmp_path_factory.mktemp("tensor-contents")
    repo = work / "repo"
    ctr_model(repo, STABLE, seed=7)
    ctr_model(repo, CANARY, seed=8)
    behaviour_model(repo, BROKEN, fail=True)
    types_model(repo, TYPES)
    triton = start_triton(work / "triton", repo, [STABLE, CANARY, BROKEN, TYPES])
    routes = work / "routes.json"
    routes.write_text(json.dumps(route_table(triton.http_url)))
    gateway = None
    try:
        gateway = GatewayProcess(work, {"GATEWAY_ROUTES_FILE": str(routes), "GATEWAY_BREAKER_COOLDOWN_MS": "60000"})
        gateway.start()
        yield triton, gateway
    finally:
        if gateway is not None:
            gateway.stop()
        triton.stop(timeout=0.05)


def triton_stats(triton, model: str) -> tuple[int, int]:
    """Triton's own (inference_count, execution_count) of `model`."""
    stats = requests.get(f"{triton.http_url}/v2/models/{model}/stats", timeout=5).json()["model_stats"][0]
    return stats["inference_count"], stats["execution_count"]


def ctr_body(**changes) -> bytes:
    """The CTR request with `dense__data=...`-style changes to its inputs."""
    doc = json.loads(infer_body(1))
    for key, value in changes.items():
        name, field = key.split("__")
        item = next(i for i in doc["inputs"] if i["name"] == name)
        item[field] = value
    return json.dumps(doc).encode()


def one(name: str, data, shape=None) -> bytes:
    datatype = TYPES_INPUTS[name]
    return json.dumps(
        {"inputs": [{"name": name, "datatype": datatype, "shape": shape or [len(data)], "data": data}]}
    ).encode()


DENSE = [0.5] * N_DENSE
SPARSE = [7] * N_SPARSE
# (case, endpoint, body, input named, words of the problem, Triton's own status for the same body)
CASES = [
    ("string in FP32", "ctr", ctr_body(dense__data=[["x", *DENSE[1:]]]), "dense", "is a string", 500),
    ("numeric string in FP32", "ctr", ctr_body(dense__data=[["1.5", *DENSE[1:]]]), "dense", "is a string", 500),
    ("true in FP32", "ctr", ctr_body(dense__data=[[True, *DENSE[1:]]]), "dense", "is a boolean", 500),
    ("null in FP32", "ctr", ctr_body(dense__data=[[None, *DENSE[1:]]]), "dense", "is null", 500),
    ("object in FP32", "ctr", ctr_body(dense__data=[[{}, *DENSE[1:]]]), "dense", "is an object", 500),
    (
        "ragged rows",
        "ctr",
        ctr_body(
            dense__shape=[2, N_DENSE],
            dense__data=[DENSE, DENSE[1:]],
            sparse__shape=[2, N_SPARSE],
            sparse__data=[SPARSE, SPARSE],
        ),
        "dense",
        "lists of length 12, 13",
        500,
    ),
    (
        "ragged, right total",
        "ctr",
        ctr_body(
            dense__shape=[2, N_DENSE],
            dense__data=[DENSE + [0.5], DENSE[1:]],
            sparse__shape=[2, N_SPARSE],
            sparse__data=[SPARSE, SPARSE],
        ),
        "dense",
        "lists of length 12, 14",
        200,  # Triton reads the values in a row and serves rows that are not the client's
    ),
    ("nested deeper", "ctr", ctr_body(dense__data=[[[v] for v in DENSE]]), "dense", "nested deeper", 200),
    ("too few values", "ctr", ctr_body(dense__data=DENSE[1:]), "dense", "declares 13 elements but 'data' has 12", 500),
    (
        "INT64 past 2**63-1",
        "ctr",
        ctr_body(sparse__data=[[2**63, *SPARSE[1:]]]),
        "sparse",
        "outside INT64's range",
        500,
    ),
    ("INT64 past 2**64", "ctr", ctr_body(sparse__data=[[2**64, *SPARSE[1:]]]), "sparse", "outside INT64's range", 500),
    ("INT64 below -2**63", "ctr", ctr_body(sparse__data=[[-(2**63) - 1, *SPARSE[1:]]]), "sparse", "outside", 500),
    ("float in INT64", "ctr", ctr_body(sparse__data=[[1.5, *SPARSE[1:]]]), "sparse", "takes integers", 500),
    ("2.0 in INT64", "ctr", ctr_body(sparse__data=[[2.0, *SPARSE[1:]]]), "sparse", "takes integers", 500),
    ("true in INT64", "ctr", ctr_body(sparse__data=[[True, *SPARSE[1:]]]), "sparse", "is a boolean", 500),
    ("INT8 128", "types", one("i8", [1, 128]), "i8", "data[1] = 128 is outside INT8's range -128..127", 200),
    ("INT8 -129", "types", one("i8", [-129]), "i8", "outside INT8's range", 200),
    ("UINT8 256", "types", one("u8", [255, 256]), "u8", "outside UINT8's range 0..255", 200),
    ("UINT8 -1", "types", one("u8", [-1]), "u8", "outside UINT8's range", 500),
    ("INT16 32768", "types", one("i16", [32768]), "i16", "outside INT16's range", 200),
    ("INT32 2**31", "types", one("i32", [2**31]), "i32", "outside INT32's range", 200),
    ("UINT64 -1", "types", one("u64", [-1]), "u64", "outside UINT64's range", 500),
    ("1 in BOOL", "types", one("flag", [True, 1]), "flag", "takes true or false", 500),
    ("string in BOOL", "types", one("flag", ["true"]), "flag", "takes true or false", 500),
    ("number in BYTES", "types", one("text", ["a", 1]), "text", "takes strings", 500),
    ("null in BYTES", "types", one("text", [None]), "text", "takes strings", 500),
    ("FP16 as JSON", "types", one("half", [0.5]), "half", "send them binary", 400),
    ("string in FP64", "types", one("f64", ["1e3"]), "f64", "is a string", 500),
    (
        "partly nested",
        "ctr",
        ctr_body(dense__data=[[DENSE[:6], DENSE[6:]]]),
        "dense",
        "lists of length 2 at depth 1",
        200,
    ),
]


def test_the_table_has_at_least_fifteen_cases():
    assert len(CASES) >= 15 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case, endpoint, body, input_name, words, triton_status", CASES, ids=[c[0] for c in CASES])
def test_malformed_contents_are_a_400_that_never_reaches_triton(
    stack, case, endpoint, body, input_name, words, triton_status
):
    triton, gateway = stack
    model = STABLE if endpoint == "ctr" else TYPES
    models = (STABLE, CANARY) if endpoint == "ctr" else (TYPES,)
    before = {m: triton_stats(triton, m) for m in models}
    client_before = gateway.metric("gateway_requests_total", endpoint=endpoint, fault="client")
    r = requests.post(f"{gateway.url}/v2/models/{endpoint}/infer", data=body, timeout=10)
    assert r.status_code == 400, r.text
    error = r.json()
    assert error["code"] == "bad_request" and f"input '{input_name}'" in error["error"] and words in error["error"], (
        error
    )
    assert r.headers["X-Model-Variant"] == "none"
    assert {m: triton_stats(triton, m) for m in models} == before  # never reached Triton
    assert gateway.metric("gateway_requests_total", endpoint=endpoint, fault="client") == client_before + 1
    assert gateway.metric("gateway_requests_total", endpoint=endpoint, fault="backend") == 0
    # what Triton itself answers for the same body (a 500 is what read as the model's failure)
    counted = triton_stats(triton, model)
    direct = requests.post(f"{triton.http_url}/v2/models/{model}/infer", data=body, timeout=10)
    assert direct.status_code == triton_status, direct.text
    # Triton counts a request after answering it (the python backend's failures too): the next
    # case's "before" must not catch this one's count arriving late
    deadline = time.monotonic() + (10 if direct.status_code == 200 else 1)
    while triton_stats(triton, model) == counted and time.monotonic() < deadline:
        time.sleep(0.05)
    assert direct.status_code != 200 or triton_stats(triton, model) != counted


def test_valid_requests_still_reach_triton_and_nan_passes(stack):
    triton, gateway = stack
    before = triton_stats(triton, TYPES)[0]
    for body in (
        one("i8", [-128, 127]),
        one("u64", [2**64 - 1]),
        one("flag", [True, False]),
        one("text", ["é"]),
        b'{"inputs": [{"name": "f64", "datatype": "FP64", "shape": [3], "data": [NaN, Infinity, -Infinity]}]}',
    ):
        r = requests.post(f"{gateway.url}/v2/models/types/infer", data=body, timeout=10)
        assert r.status_code == 200, (body, r.text)
    deadline = time.monotonic() + 5
    while triton_stats(triton, TYPES)[0] < before + 5 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert triton_stats(triton, TYPES)[0] == before + 5


def canary_keys(gateway, endpoint: str, canary: str) -> list[str]:
    with requests.Session() as s:
        keys = [
            k
            for k in (f"user-{i}" for i in range(80))
            if s.post(
                f"{gateway.url}/v2/models/{endpoint}/infer", data=infer_body(), headers={"X-User-Id": k}, timeout=10
            ).headers["X-Model-Variant"]
            == canary
        ]
    assert len(keys) >= 20  # the X-Model-Variant an attacker reads
    return keys


# a request Triton cannot read that the gateway does not check itself: a request parameter's type
UNREADABLE = json.dumps({**json.loads(infer_body()), "parameters": {"binary_data_output": "yes"}}).encode()


def test_a_triton_500_for_a_body_it_cannot_read_is_the_clients_400(stack):
    triton, gateway = stack
    direct = requests.post(f"{triton.http_url}/v2/models/{CANARY}/infer", data=UNREADABLE, timeout=10)
    assert direct.status_code == 500 and direct.json()["error"].startswith("Unable to parse 'binary_data_output'")
    keys = canary_keys(gateway, "ctr", "v2")
    failovers = gateway.metric("gateway_failovers_total", endpoint="ctr")
    r = requests.post(f"{gateway.url}/v2/models/ctr/infer", data=UNREADABLE, headers={"X-User-Id": keys[0]}, timeout=10)
    assert r.status_code == 400 and r.json()["code"] == "bad_request", r.text
    assert "cannot read this request: Unable to parse 'binary_data_output'" in r.json()["error"]
    assert CANARY not in r.text and r.headers["X-Model-Variant"] == "v2"
    assert gateway.metric("gateway_requests_total", endpoint="ctr", variant="v2", status="400", fault="client") >= 1
    assert gateway.metric("gateway_failovers_total", endpoint="ctr") == failovers  # not retried on the stable
    assert gateway.metric("gateway_requests_total", endpoint="ctr", fault="backend") == 0
    assert gateway.metric("gateway_upstream_errors_total", endpoint="ctr") == 0


def _judged(gateway, endpoint, stable, candidate, send):
    """The collector's totals and the judge's error test over what `send()` does."""
    from monitoring.collection import collect, gateway_samples
    from monitoring.judge.checks import check_error_rate
    from monitoring.judge.evidence import ArmWindow, JudgeConfig

    before = requests.get(f"{gateway.url}/metrics", timeout=5).text
    send()
    after = requests.get(f"{gateway.url}/metrics", timeout=5).text
    totals = gateway_samples.gateway_deltas(
        gateway_samples.gateway_snapshot(before), gateway_samples.gateway_snapshot(after), seconds=10
    )
    arms = {v: collect.derive(totals.get((endpoint, v), collect.Totals())) for v in (stable, candidate, "none")}
    window = lambda d: ArmWindow(ticks=[(d.get("requests", 0.0), d.get("errors", 0.0))])  # noqa: E731
    return arms, check_error_rate(window(arms[stable]), window(arms[candidate]), JudgeConfig(min_requests=50))


def test_garbage_pinned_to_a_healthy_canary_does_not_fail_it_but_a_failing_canary_is_caught(stack):
    triton, gateway = stack
    keys = canary_keys(gateway, "ctr", "v2")
    garbage = [body for _, endpoint, body, *_ in CASES if endpoint == "ctr"] + [UNREADABLE]
    statuses = []

    def attack():
        with requests.Session() as s:
            for i in range(300):  # anonymous garbage at the canary's users, as in the issue (400 rolled it back)
                statuses.append(
                    s.post(
                        f"{gateway.url}/v2/models/ctr/infer",
                        data=garbage[i % len(garbage)],
                        headers={"X-User-Id": keys[i % len(keys)]},
                        timeout=10,
                    ).status_code
                )
            for i in range(200):  # and honest traffic on both arms
                r = s.post(
                    f"{gateway.url}/v2/models/ctr/infer",
                    data=infer_body(seed=i),
                    headers={"X-User-Id": f"honest-{i}"},
                    timeout=10,
                )
                assert r.status_code == 200, r.text

    arms, check = _judged(gateway, "ctr", "v1", "v2", attack)
    assert set(statuses) == {400}
    assert arms["v2"].get("errors", 0) == 0 and arms["v1"].get("errors", 0) == 0, arms
    # all 300 are the client's: refused before a variant was chosen ("none"), or Triton's 500s read as the client's
    assert arms["none"]["client_faults"] + arms["v2"].get("client_faults", 0) == 300, arms
    assert arms["v2"].get("client_faults", 0) >= 300 // len(garbage), arms  # the UNREADABLE ones reached the canary
    assert check["outcome"] != "fail" and check["errors"]["candidate"] == 0, check

    # control: a canary whose model really fails (each attempt failed over to the stable) is the
    # candidate's error, and the same test fails it
    def honest_to_broken():
        with requests.Session() as s:
            for i in range(120):
                r = s.post(
                    f"{gateway.url}/v2/models/broken/infer",
                    data=infer_body(seed=i),
                    headers={"X-User-Id": f"user-{i}"},
                    timeout=10,
                )
                assert r.status_code == 200, r.text  # served by the stable

    arms, check = _judged(gateway, "broken", "v1", "bad", honest_to_broken)
    assert arms["bad"]["errors"] >= 30, arms
    assert check["outcome"] == "fail", check
