"""A generative recommender's endpoint attacked through its inputs (surfaces/gr.py): a real
gateway in front of a real tritonserver serving the tiny recommender twice, `recs` (the
abuser's endpoint) and `recs-b` (a second tenant's, on the same server and cores).

Every absurd value is a clear 400 naming the input, from the gateway's signature check
(datatypes, required inputs, the body limit) or the model (ranges, the catalog, the user id's
form); a flood of new users stays inside the model's cache bound. Beside each case the second
tenant's client keeps calling: tolerance, every one of its replies a 200 within 2 s (the
hostile-client suite's bound, tests/gateway/test_hostile.py), its median latency at most twice
its own median before the attack plus 25 ms, and its users' caches still hit (the abuser's
user ids, even the same ones, never reach another model's cache).
"""

from __future__ import annotations

import json

import pytest
import requests

from harness import gr
from harness.gateway import GatewayProcess, start_triton
from registry.gr.triton import request_body
from tests.adversarial.gr_tenants import Neighbour, with_input
from tests.gateway.conftest import require_triton

pytestmark = pytest.mark.integration

ABUSED, NEIGHBOUR = "recs__v1__gr-fp32-c1", "recsb__v1__gr-fp32-c1"
CACHE_BYTES = 256 << 10
MAX_BODY = 1 << 20


def _table(url: str) -> dict:
    def endpoint(name, model):
        variant = {
            "name": "v1",
            "model_version": "1",
            "triton_model": model,
            "role": "stable",
            "weight_bp": 10000,
            "replicas": [url],
            "signature": gr.kserve_signature(model),
        }
        return {"name": name, "salt": f"{name}-1", "timeout_ms": 5000, "auth": {"public": True}, "variants": [variant]}

    return {"version": "gr-1", "keys": [], "endpoints": [endpoint("recs", ABUSED), endpoint("recs-b", NEIGHBOUR)]}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    require_triton()
    work = tmp_path_factory.mktemp("gr-adversarial")
    source = gr.tiny_gr()
    gr.package(source, work / "repo", ABUSED, cache_max_bytes=CACHE_BYTES)
    gr.package(source, work / "repo", NEIGHBOUR)
    triton = start_triton(work / "triton", work / "repo", [ABUSED, NEIGHBOUR])
    routes = work / "routes.json"
    routes.write_text(json.dumps(_table(triton.http_url)))
    gateway = GatewayProcess(work, {"GATEWAY_ROUTES_FILE": str(routes), "GATEWAY_MAX_BODY_BYTES": str(MAX_BODY)})
    items = [int(i) for i in gr.catalog_arrays(source)["item_id"]]
    neighbour = None
    try:
        gateway.start()
        neighbour = Neighbour(gateway.url, items)
        neighbour.start()
        baseline = neighbour.baseline()
        yield gateway, triton, neighbour, items, baseline
    finally:
        if neighbour is not None:
            neighbour.stop.set()
            neighbour.join(10)
        gateway.stop()
        triton.stop(timeout=0.05)


def _send(gateway, body) -> requests.Response:
    return requests.post(f"{gateway.url}/v2/models/recs/infer", json=body, timeout=10)


def _cases(items):
    good = request_body("abuser", items[:10], top_k=5)
    long = list(range(1000))
    return {
        "history-1000": (with_input(good, "history", shape=[1000], data=[items[i % 50] for i in long]), "history"),
        "history-empty": (with_input(good, "history", shape=[0], data=[]), "history"),
        "unknown-items": (with_input(good, "history", shape=[2], data=[items[0], 123]), "not in catalog"),
        "negative-item": (with_input(good, "history", shape=[1], data=[-5]), "not in catalog"),
        "int64-max-item": (with_input(good, "history", shape=[1], data=[2**63 - 1]), "not in catalog"),
        "history-floats": (with_input(good, "history", datatype="FP32", data=[1.5] * 10), "history"),
        "user-10k-chars": (with_input(good, "user_id", data=["u" * 10_000]), "user_id"),
        "user-odd-chars": (with_input(good, "user_id", data=["bob\n; DROP"]), "user_id"),
        "user-two-ids": (with_input(good, "user_id", shape=[2], data=["a", "b"]), "user_id"),
        "no-user": ({**good, "inputs": [t for t in good["inputs"] if t["name"] != "user_id"]}, "user_id"),
        "beam-0": (with_input(good, "beam_width", shape=[1], datatype="INT32", data=[0]), "beam_width"),
        "beam-negative": (with_input(good, "beam_width", shape=[1], datatype="INT32", data=[-1]), "beam_width"),
        "beam-huge": (with_input(good, "beam_width", shape=[1], datatype="INT32", data=[2**31 - 1]), "beam_width"),
        "top-k-0": (with_input(good, "top_k", data=[0]), "top_k"),
        "top-k-over-beam": (
            with_input(with_input(good, "beam_width", shape=[1], datatype="INT32", data=[4]), "top_k", data=[9]),
            "top_k",
        ),
    }


def test_absurd_values_are_a_clear_400_and_the_neighbour_holds(stack):
    gateway, _, neighbour, items, baseline = stack
    since = neighbour.mark()
    problems = {}
    for case, (body, names) in _cases(items).items():
        reply = _send(gateway, body)
        try:
            error = reply.json()
        except ValueError:
            error = {}
        if reply.status_code != 400 or names not in error.get("error", ""):
            problems[case] = (reply.status_code, reply.text[:200])

    assert not problems, problems

    # the abuser's own good request still works, and the same user id as the neighbour's
    # on its own endpoint reaches only its own model's cache
    assert _send(gateway, request_body("shared-0", items[:10], top_k=5)).status_code == 200
    neighbour.check(since, baseline)


def test_a_history_over_the_body_limit_is_refused_at_the_door(stack):
    gateway, triton, neighbour, items, baseline = stack
    since = neighbour.mark()
    before = requests.get(f"{triton.http_url}/v2/models/{ABUSED}/stats", timeout=5).json()["model_stats"][0]
    huge = request_body("abuser", [items[i % 50] for i in range(200_000)])
    reply = _send(gateway, huge)
    assert reply.status_code == 413, reply.text[:200]
    after = requests.get(f"{triton.http_url}/v2/models/{ABUSED}/stats", timeout=5).json()["model_stats"][0]
    assert after["inference_count"] == before["inference_count"]  # it never reached the model
    neighbour.check(since, baseline)


def test_a_flood_of_new_users_stays_inside_the_cache_bound(stack):
    gateway, triton, neighbour, items, baseline = stack
    since = neighbour.mark()
    with requests.Session() as session:
        for user in range(250):
            body = request_body(f"flood-{user}", items[user % 100 : user % 100 + 20], top_k=3, beam_width=4)
            assert session.post(f"{gateway.url}/v2/models/recs/infer", json=body, timeout=10).status_code == 200
    text = requests.get(triton.metrics_url, timeout=5).text
    assert 0 < gr.metric_value(text, "gr_cache_bytes", model=ABUSED) <= CACHE_BYTES
    assert gr.metric_value(text, "gr_cache_evictions_total", model=ABUSED) > 0
    assert gr.metric_value(text, "gr_cache_evictions_total", model=NEIGHBOUR) == 0
    neighbour.check(since, baseline)
