"""User-affinity routing of a generative recommender through the real gateway to two real
tritonservers (each replica keeps its own users' KV cache): a user's second request is a
cache hit because it reaches the same replica, and a replica's loss moves only its users, who
come back cold on the other replica while everyone else stays warm."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import requests

from gateway.kserve.tensors import parse_request
from gateway.table.affinity import affinity_key
from gateway.table.routes import compile_table
from harness import gr
from harness.gateway import TOKEN, GatewayProcess, RouteServer, start_triton
from registry.gr.triton import request_body
from tests.gateway.conftest import require_triton

pytestmark = pytest.mark.integration

MODEL = "recs__v1__gr-fp32-c1"
USERS = 16


def _table(replicas: list[str], version: str) -> dict:
    variant = {
        "name": "v1-gr-fp32-c1",
        "model_version": "1",
        "triton_model": MODEL,
        "role": "stable",
        "weight_bp": 10000,
        "replicas": replicas,
        "signature": gr.kserve_signature(MODEL),
    }
    endpoint = {"name": "recs", "affinity": "user", "auth": {"public": True}, "timeout_ms": 5000}
    return {"version": version, "endpoints": [{**endpoint, "variants": [variant]}]}


def _readme_request() -> tuple[dict, dict]:
    """(headers, JSON body) of README.md's request to the GR endpoint."""
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    command = next(b for b in re.findall(r"```sh\n(.*?)```", text, flags=re.S) if "/v2/models/recs/infer" in b)
    header = re.search(r"-H '([^:]+): ([^']+)'", command)
    return {header.group(1): header.group(2)}, json.loads(re.search(r"-d '(.*)'", command, flags=re.S).group(1))


def _cache(gateway, user: str, history: list[int]) -> str:
    status, reply = gr.infer(gateway.url, "recs", request_body(user, history, top_k=5))
    assert status == 200, reply
    return reply["cache"][0]


def test_a_users_requests_reach_their_replica_and_a_lost_replica_moves_only_its_users(gr_source, tmp_path):
    require_triton()
    repo = tmp_path / "repo"
    gr.package(gr_source, repo, MODEL)
    servers = [start_triton(tmp_path / f"triton-{i}", repo, [MODEL]) for i in range(2)]
    routes = RouteServer().start()
    replicas = [s.http_url for s in servers]
    routes.set_table(_table(replicas, "r1"))
    gateway = None
    try:
        gateway = GatewayProcess(
            tmp_path, {"GATEWAY_ROUTES_URL": routes.url, "GATEWAY_TOKEN": TOKEN, "GATEWAY_POLL_INTERVAL_MS": "200"}
        ).start()
        items = [int(i) for i in gr.catalog_arrays(gr_source)["item_id"]]
        users = {f"user-{u}": items[u * 7 : u * 7 + 10] for u in range(USERS)}
        # where the gateway's ring puts each user: the same pure function the server runs
        ep = compile_table(_table(replicas, "r1"), {}).endpoints["recs"]
        home = {}
        for user, history in users.items():
            key = affinity_key(ep, parse_request(json.dumps(request_body(user, history)).encode(), None), None)
            home[user] = ep.stable.pick_for(key)[0][0].base
        assert set(home.values()) == set(replicas), home  # 16 users land on both replicas

        first = {user: _cache(gateway, user, history) for user, history in users.items()}
        second = {user: _cache(gateway, user, history) for user, history in users.items()}
        assert set(first.values()) == {"miss"} and set(second.values()) == {"hit"}, (first, second)
        for server in servers:  # each user's two lookups were on their home replica
            text = requests.get(server.metrics_url, timeout=10).text
            mine = sum(1 for base in home.values() if base == server.http_url)
            assert gr.metric_value(text, "gr_cache_lookups_total", model=MODEL, result="hit") == mine
            assert gr.metric_value(text, "gr_cache_lookups_total", model=MODEL, result="miss") == mine

        headers, body = _readme_request()  # the README's request, as written, through the gateway
        reply = requests.post(f"{gateway.url}/v2/models/recs/infer", data=json.dumps(body), headers=headers, timeout=30)
        assert reply.status_code == 200, reply.text
        assert len({o["name"]: o["data"] for o in reply.json()["outputs"]}["items"]) == 10

        lost = servers[1]
        lost.stop(timeout=0.01)  # the replica is gone (SIGKILL after SIGTERM)
        lost.process.wait(5)
        third = {user: _cache(gateway, user, history) for user, history in users.items()}
        moved = {user for user, base in home.items() if base == lost.http_url}
        assert {user for user, result in third.items() if result == "miss"} == moved
        assert {user for user, result in third.items() if result == "hit"} == set(users) - moved

        routes.set_table(_table(replicas[:1], "r2"))  # the control plane drops it from the table
        time.sleep(0.6)
        fourth = {user: _cache(gateway, user, history) for user, history in users.items()}
        assert set(fourth.values()) == {"hit"}, fourth  # the moved users are warm on their new replica
        picks = {
            placement: gateway.metric("gateway_affinity_picks_total", endpoint="recs", placement=placement)
            for placement in ("home", "spilled", "none")
        }
        # two rounds at home (and the README's request), then the lost replica's users spill once its breaker opens; with one
        # replica left there is no ring to choose on (not counted)
        assert picks["home"] >= 2 * USERS and picks["home"] + picks["spilled"] == 3 * USERS + 1 and not picks["none"]
    finally:
        if gateway is not None:
            gateway.stop()
        routes.stop()
        for server in servers:
            server.stop(timeout=0.05)
