"""User-affinity routing attacked through its key (surfaces/gr.py, "gr-affinity-key"): a real
gateway in front of two real tritonservers that both serve the tiny recommender twice, `recs`
(the abuser's endpoint) and `recs-b` (a second tenant's), each endpoint with `affinity: user`.

The key is the `user_id` input, else the X-User-Id header (gateway/table/affinity.py). Absurd keys
(huge, binary, missing) are a clear 400 or are routed without affinity, never a 5xx; one user
id hammered from many connections spreads over both replicas under the load bound instead of
pinning one; the neighbour's users, even with the same ids, keep their replicas and their
warm caches. Tolerance for the neighbour: tests/adversarial/gr_tenants.py's `Neighbour`
(every reply a 200 within 2 s, median at most twice its own before the attack plus 25 ms,
its users' caches still hit).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from gateway.table.affinity import MAX_KEY_BYTES
from harness import gr
from harness.gateway import GatewayProcess, start_triton
from registry.gr.triton import request_body
from tests.adversarial.gr_tenants import Neighbour, with_input
from tests.gateway.conftest import require_triton

pytestmark = pytest.mark.integration

ABUSED, NEIGHBOUR = "recs__v1__gr-fp32-c1", "recsb__v1__gr-fp32-c1"


def _table(urls: list[str]) -> dict:
    def endpoint(name, model):
        variant = {
            "name": "v1",
            "model_version": "1",
            "triton_model": model,
            "role": "stable",
            "weight_bp": 10000,
            "replicas": urls,
            "signature": gr.kserve_signature(model),
        }
        entry = {"name": name, "affinity": "user", "timeout_ms": 5000, "auth": {"public": True}}
        return {**entry, "salt": f"{name}-1", "variants": [variant]}

    return {"version": "gr-aff-1", "keys": [], "endpoints": [endpoint("recs", ABUSED), endpoint("recs-b", NEIGHBOUR)]}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    require_triton()
    work = tmp_path_factory.mktemp("gr-affinity-adversarial")
    source = gr.tiny_gr()
    for model in (ABUSED, NEIGHBOUR):
        gr.package(source, work / "repo", model)
    servers = []
    gateway = neighbour = None
    try:
        servers = [start_triton(work / f"triton-{i}", work / "repo", [ABUSED, NEIGHBOUR]) for i in range(2)]
        routes = work / "routes.json"
        routes.write_text(json.dumps(_table([s.http_url for s in servers])))
        gateway = GatewayProcess(work, {"GATEWAY_ROUTES_FILE": str(routes)}).start()
        items = [int(i) for i in gr.catalog_arrays(source)["item_id"]]
        neighbour = Neighbour(gateway.url, items)
        neighbour.start()
        yield gateway, servers, neighbour, items, neighbour.baseline()
    finally:
        if neighbour is not None:
            neighbour.stop.set()
            neighbour.join(10)
        if gateway is not None:
            gateway.stop()
        for server in servers:
            server.stop(timeout=0.05)


def _post(gateway, body, headers=None) -> requests.Response:
    return requests.post(f"{gateway.url}/v2/models/recs/infer", json=body, headers=headers or {}, timeout=10)


def test_absurd_user_keys_are_a_clear_400_or_routed_without_affinity(stack):
    gateway, _, neighbour, items, baseline = stack
    since = neighbour.mark()
    good = request_body("abuser", items[:10], top_k=5)
    no_user = {**good, "inputs": [t for t in good["inputs"] if t["name"] != "user_id"]}
    refused = {
        "huge-input": (with_input(good, "user_id", data=["u" * 100_000]), {}),
        "huge-header": (good, {"X-User-Id": "h" * 10_000}),
        "nul-input": (with_input(good, "user_id", data=["a\u0000b"]), {}),
        "binary-input-as-numbers": (with_input(good, "user_id", datatype="INT64", data=[2**63 - 1]), {}),
        "nested-input": (with_input(good, "user_id", shape=[1, 1], data=[["x"]]), {}),
        "missing-everywhere": (no_user, {}),
        "missing-input-header-given": (no_user, {"X-User-Id": "someone"}),
        "binary-header": (good, {"X-User-Id": "\x01\x7f\x00"}),  # refused by the HTTP parser
    }
    problems = {}
    for case, (body, headers) in refused.items():
        reply = _post(gateway, body, headers)
        if reply.status_code != 400 or not reply.json().get("error"):
            problems[case] = (reply.status_code, reply.text[:200])
    assert not problems, problems
    # a header of odd but legal bytes only pins an A/B arm: the body's user id routes and is served
    odd = _post(gateway, good, {"X-User-Id": "\xff\xfe" + "é" * 40})
    assert odd.status_code == 200, odd.text[:200]
    assert len("u" * 100_000) > MAX_KEY_BYTES  # hashed never: too long to be a key
    neighbour.check(since, baseline)


def test_one_user_id_cannot_pin_a_replica_nor_move_another_tenants_users(stack):
    gateway, servers, neighbour, items, baseline = stack
    since = neighbour.mark()
    before = [requests.get(s.metrics_url, timeout=5).text for s in servers]
    # the neighbour's own user id, from 6 connections at once, 240 times, on the abuser's endpoint
    body = request_body("shared-0", items[:10], top_k=3, beam_width=4)

    def hammer(_):
        with requests.Session() as session:
            return [
                session.post(f"{gateway.url}/v2/models/recs/infer", json=body, timeout=10).status_code
                for _ in range(40)
            ]

    with ThreadPoolExecutor(6) as pool:
        statuses = [status for batch in pool.map(hammer, range(6)) for status in batch]
    assert set(statuses) == {200}
    after = [requests.get(s.metrics_url, timeout=5).text for s in servers]

    def lookups(text, model):
        return gr.metric_value(text, "gr_cache_lookups_total", model=model)

    served = [lookups(a, ABUSED) - lookups(b, ABUSED) for a, b in zip(after, before)]
    assert sum(served) == 240
    assert min(served) > 0  # the load bound spilled the hot user to the other replica
    spilled = gateway.metric("gateway_affinity_picks_total", endpoint="recs", placement="spilled")
    assert spilled == min(served)  # the home replica served the rest
    # the neighbour's users never moved: each of its replicas' caches hit every time
    neighbour.check(since, baseline)
    assert gateway.metric("gateway_affinity_picks_total", endpoint="recs-b", placement="spilled") == 0
