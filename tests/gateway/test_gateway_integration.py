"""The gateway as a real process between a real route-table HTTP server (playing the
control plane) and real tritonserver processes: weights, stickiness, pass-through,
bad requests, deadline, shadow isolation, failover (erroring canary, killed canary
replica under load), live route change, last good table kept when the control plane
is down or sends garbage.

One module-scoped set of processes: Triton A (stable CTR model, a 1-s sleeping model,
an always-failing model), Triton B (the canary CTR model, killed by the last test).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests
import tritonclient.http as triton_http
from tritonclient.utils import InferenceServerException

from harness.gateway import TOKEN, GatewayProcess, RouteServer, start_triton
from harness.onnx import N_DENSE, N_SPARSE
from harness.triton_models import behaviour_model, ctr_model, infer_body
from tests.gateway.conftest import require_triton

pytestmark = pytest.mark.integration

STABLE, CANARY, SLOW, BAD = "ctr__v1__onnx", "ctr__v2__onnx", "slow__v1__py", "bad__v1__py"
PUBLIC = {"public": True}


def variant(name, model, role, weight, replicas, **extra):
    return {
        "name": name,
        "model_version": name.lstrip("v") or "1",
        "triton_model": model,
        "role": role,
        "weight_bp": weight,
        "replicas": replicas,
        **extra,
    }


class Env:
    def __init__(self, a, b, routes, gateway):
        self.a, self.b, self.routes, self.gateway = a, b, routes, gateway
        self.version = 0

    def table(self, ctr_weights=(8000, 2000)):
        self.version += 1
        a, b = [self.a.http_url], [self.b.http_url]
        return {
            "version": f"t{self.version}",
            "endpoints": [
                {
                    "name": "ctr",
                    "salt": "exp-1",
                    "timeout_ms": 2000,
                    "auth": PUBLIC,
                    "variants": [
                        variant("v1", STABLE, "stable", ctr_weights[0], a),
                        variant("v2", CANARY, "canary", ctr_weights[1], b),
                    ],
                },
                {
                    "name": "errs",
                    "auth": PUBLIC,
                    "variants": [
                        variant("v1", STABLE, "stable", 5000, a),
                        variant("bad", BAD, "canary", 5000, a),
                    ],
                },
                {
                    "name": "slow",
                    "timeout_ms": 5000,
                    "auth": PUBLIC,
                    "variants": [variant("slow", SLOW, "stable", 10000, a)],
                },
                {
                    "name": "shadowed",
                    "shadow_sample_rate": 1.0,
                    "auth": PUBLIC,
                    "variants": [
                        variant("v1", STABLE, "stable", 10000, a),
                        variant("sleepy", SLOW, "shadow", 0, a),
                    ],
                },
            ],
        }

    def post(self, endpoint, body=None, session=requests, **headers):
        return session.post(
            f"{self.gateway.url}/v2/models/{endpoint}/infer",
            data=infer_body() if body is None else body,
            headers=headers,
            timeout=10,
        )


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    require_triton()
    work = tmp_path_factory.mktemp("gateway-it")
    repo_a, repo_b = work / "repo-a", work / "repo-b"
    ctr_model(repo_a, STABLE, seed=7)
    behaviour_model(repo_a, SLOW, sleep_ms=1000)
    behaviour_model(repo_a, BAD, fail=True)
    ctr_model(repo_b, CANARY, seed=8)
    with ThreadPoolExecutor(2) as pool:
        fa = pool.submit(start_triton, work / "triton-a", repo_a, [STABLE, SLOW, BAD])
        fb = pool.submit(start_triton, work / "triton-b", repo_b, [CANARY])
        started = []
        try:
            for future in (fa, fb):
                started.append(future.result())
        except Exception:
            for triton in started + [
                f.result() for f in (fa, fb) if f.done() and not f.exception() and f.result() not in started
            ]:
                triton.stop()
            raise
        a, b = started
    routes = RouteServer().start()
    gateway = None
    e = Env(a, b, routes, None)
    try:
        routes.set_table(e.table())
        gateway = GatewayProcess(
            work,
            {
                "GATEWAY_ROUTES_URL": routes.url,
                "GATEWAY_TOKEN": TOKEN,
                "GATEWAY_POLL_INTERVAL_MS": "250",
                "GATEWAY_STALE_AFTER_MS": "1000",
                "GATEWAY_MAX_BODY_BYTES": str(256 * 1024),
                "GATEWAY_SHADOW_QUEUE": "4",
                "GATEWAY_SHADOW_WORKERS": "2",
            },
        ).start()
        e.gateway = gateway
        yield e
    finally:
        # Every step runs even if one fails. Tritons get SIGTERM then SIGKILL at once: a
        # graceful shutdown waits for the slow model's queued shadow copies, which only
        # costs the suite time.
        steps = [gateway.stop] if gateway else []
        steps.append(routes.stop)
        steps += [lambda t=t: t.stop(timeout=0.05) for t in ((a, b) if e.b is b else (a, b, e.b))]
        errors = []
        for step in steps:
            try:
                step()
            except Exception as exc:  # keep stopping the rest, report after
                errors.append(exc)
        if errors:
            raise errors[0]


def test_json_infer_is_passed_through_with_request_id_and_variant(env):
    direct = requests.post(f"{env.a.http_url}/v2/models/{STABLE}/infer", data=infer_body(), timeout=5).json()
    replies = [env.post("ctr", **{"X-User-Id": "alice", "X-Request-Id": f"rid-{i}"}) for i in range(5)]
    assert {r.status_code for r in replies} == {200}
    assert [r.headers["X-Request-Id"] for r in replies] == [f"rid-{i}" for i in range(5)]
    assert len({r.headers["X-Model-Variant"] for r in replies}) == 1  # sticky
    stable = [
        r
        for r in (env.post("ctr", **{"X-User-Id": f"u{i}"}) for i in range(40))
        if r.headers["X-Model-Variant"] == "v1"
    ]
    assert stable and stable[0].json()["outputs"] == direct["outputs"]
    # KServe v2: the reply names the endpoint called and the registry version, never the internal Triton model
    assert direct["model_name"] == STABLE
    assert stable[0].json()["model_name"] == "ctr" and stable[0].json()["model_version"] == "1"
    assert stable[0].content.startswith(b'{"model_name":"ctr","model_version":"1","outputs":')
    # requests asks for gzip; the gateway does not forward Accept-Encoding (replies.py): uncompressed
    assert "gzip" in stable[0].request.headers["Accept-Encoding"] and "Content-Encoding" not in stable[0].headers
    generated = env.post("ctr")
    assert len(generated.headers["X-Request-Id"]) >= 16 and generated.headers["X-Model-Variant"] in {"v1", "v2"}


def test_binary_tensor_extension_through_the_gateway(env):
    rng = np.random.default_rng(3)
    dense = rng.random((4, N_DENSE), dtype=np.float32)
    sparse = rng.integers(0, 1000, (4, N_SPARSE), dtype=np.int64)

    def run(url, model):
        client = triton_http.InferenceServerClient(url.removeprefix("http://"))
        inputs = [
            triton_http.InferInput("dense", list(dense.shape), "FP32"),
            triton_http.InferInput("sparse", list(sparse.shape), "INT64"),
        ]
        inputs[0].set_data_from_numpy(dense, binary_data=True)
        inputs[1].set_data_from_numpy(sparse, binary_data=True)
        out = [triton_http.InferRequestedOutput("ctr", binary_data=True)]
        result = client.infer(model, inputs, outputs=out, headers={"X-User-Id": "bin-user"})
        run.response = result.get_response()
        return result.as_numpy("ctr")

    direct = {STABLE: run(env.a.http_url, STABLE), CANARY: run(env.b.http_url, CANARY)}
    via = run(env.gateway.url, "ctr")
    assert via.shape == (4, 1)
    # renamed JSON part, Inference-Header-Content-Length moved with it: the binary tensor still decodes
    assert run.response["model_name"] == "ctr" and run.response["model_version"] in {"1", "2"}
    assert any(np.array_equal(via, d) for d in direct.values())


def test_weighted_split_and_metrics_over_real_http(env):
    before = {
        v: env.gateway.metric("gateway_requests_total", endpoint="ctr", variant=v, status="200") for v in ("v1", "v2")
    }

    def worker(n):
        with requests.Session() as s:
            return [env.post("ctr", session=s).headers["X-Model-Variant"] for _ in range(n)]

    with ThreadPoolExecutor(4) as pool:
        seen = Counter(v for chunk in pool.map(worker, [150] * 4) for v in chunk)
    assert sum(seen.values()) == 600
    assert abs(seen["v2"] / 600 - 0.20) <= 0.02, seen
    after = {
        v: env.gateway.metric("gateway_requests_total", endpoint="ctr", variant=v, status="200") for v in ("v1", "v2")
    }
    assert {v: after[v] - before[v] for v in after} == {"v1": seen["v1"], "v2": seen["v2"]}
    assert env.gateway.metric("gateway_request_duration_seconds_count", endpoint="ctr", variant="v2") >= seen["v2"]
    assert env.gateway.metric("gateway_request_duration_seconds_bucket", endpoint="ctr", variant="v1", le="0.0005") >= 0


def test_sticky_users_keep_their_arm(env):
    with requests.Session() as s:
        arms = {}
        for i in range(60):
            seen = {
                env.post("ctr", session=s, **{"X-User-Id": f"user-{i}"}).headers["X-Model-Variant"] for _ in range(3)
            }
            assert len(seen) == 1, (i, seen)
            arms[i] = seen.pop()
    assert set(arms.values()) == {"v1", "v2"}


def test_bad_requests_get_clear_errors(env):
    r = env.post("ctr", body=b'{"inputs": [')
    assert r.status_code == 400 and r.json()["code"] == "malformed_json" and r.headers["X-Model-Variant"] == "none"
    r = env.post("ctr", body=b'{"outputs": []}')
    assert r.status_code == 400 and "inputs" in r.json()["error"]
    unknown_before = env.gateway.metric("gateway_requests_total", endpoint="(unknown)", status="404")
    r = env.post("no-such-endpoint")
    assert r.status_code == 404 and r.json()["code"] == "unknown_endpoint" and "no-such-endpoint" in r.json()["error"]
    assert "detail" not in r.json()  # KServe v2's error object: {"error": …} (+ our code)
    # one bucket for endpoints that do not exist, never the client's string as a label
    assert env.gateway.metric("gateway_requests_total", endpoint="(unknown)", status="404") == unknown_before + 1
    assert env.gateway.metric("gateway_requests_total", endpoint="no-such-endpoint") == 0
    # a KServe v2 client reads the message from "error"
    client = triton_http.InferenceServerClient(env.gateway.url.removeprefix("http://"))
    dense = triton_http.InferInput("dense", [1, N_DENSE], "FP32")
    dense.set_data_from_numpy(np.zeros((1, N_DENSE), dtype=np.float32))
    with pytest.raises(InferenceServerException) as exc:
        client.infer("no-such-endpoint", [dense])
    assert "unknown endpoint 'no-such-endpoint'" in exc.value.message()
    r = env.post("ctr", body=b'{"inputs": []}' + b" " * (300 * 1024))
    assert r.status_code == 413 and r.json()["code"] == "body_too_large"
    r = env.post("ctr", **{"X-Request-Timeout-Ms": "soon"})
    assert r.status_code == 400 and r.json()["code"] == "bad_timeout"
    # wrong tensor shape: Triton's own 400 passes through (from whichever variant served it)
    body = json.loads(infer_body())
    body["inputs"][0]["shape"] = [1, 5]
    body["inputs"][0]["data"] = [[0.5] * 5]
    r = env.post("ctr", body=json.dumps(body).encode())
    assert r.status_code == 400 and "unexpected shape for input 'dense'" in r.json()["error"]
    assert r.headers["X-Model-Variant"] in {"v1", "v2"}
    assert requests.get(f"{env.gateway.url}/v2/nothing", timeout=2).status_code == 404
    # malformed requests never count against a backend: no failover, no upstream error
    gw = env.gateway
    before = (
        gw.metric("gateway_failovers_total", endpoint="errs"),
        gw.metric("gateway_upstream_errors_total", endpoint="errs"),
    )
    assert {env.post("errs", body=b'{"inputs": [}').status_code for _ in range(20)} == {400}
    assert (
        gw.metric("gateway_failovers_total", endpoint="errs"),
        gw.metric("gateway_upstream_errors_total", endpoint="errs"),
    ) == before
    assert gw.metric("gateway_requests_total", endpoint="errs", variant="none", status="400") >= 20


def test_metadata_health_and_ready(env):
    meta = requests.get(f"{env.gateway.url}/v2/models/ctr", timeout=5)
    assert meta.status_code == 200 and meta.json()["name"] == "ctr" and meta.headers["X-Model-Variant"] == "v1"
    assert meta.json()["versions"] == ["1"] and {i["name"] for i in meta.json()["inputs"]} == {"dense", "sparse"}
    assert requests.get(f"{env.gateway.url}/v2/models/ctr/ready", timeout=2).status_code == 200
    live = requests.get(f"{env.gateway.url}/v2/health/live", headers={"X-Request-Id": "hc-1"}, timeout=2)
    assert (
        live.status_code == 200 and live.headers["X-Request-Id"] == "hc-1" and live.headers["X-Model-Variant"] == "none"
    )
    health = requests.get(f"{env.gateway.url}/status", timeout=2).json()
    assert health["routes"]["source"] == "http" and health["routes"]["stale"] is False
    assert set(health["endpoints"]) == {"ctr", "errs", "slow", "shadowed"}
    assert any(h.get("If-None-Match") for h in env.routes.requests)  # polls with the ETag
    text = requests.get(f"{env.gateway.url}/metrics", timeout=2).text
    for name in (
        "process_cpu_seconds_total",
        "gateway_route_table_age_seconds",
        "gateway_in_flight_requests",
        'gateway_route_fetches_total{result="not_modified"}',
        "gateway_shadow_queue_depth",
    ):
        assert name in text, name
    assert 0 <= env.gateway.metric("gateway_route_table_age_seconds") < 1.0
    assert all(h.get("Authorization") == f"Token {TOKEN}" for h in env.routes.requests)


def test_deadline_gives_504_in_time(env):
    t0 = time.monotonic()
    r = env.post("slow", **{"X-Request-Timeout-Ms": "200"})
    elapsed = time.monotonic() - t0
    assert r.status_code == 504 and r.json()["code"] == "deadline_exceeded" and r.headers["X-Model-Variant"] == "slow"
    assert elapsed < 0.8


def test_erroring_canary_fails_over_to_stable_with_no_client_errors(env):
    before = env.gateway.metric("gateway_failovers_total", endpoint="errs", from_variant="bad", to_variant="v1")
    with requests.Session() as s:
        replies = [env.post("errs", session=s) for _ in range(60)]
    assert [r.status_code for r in replies] == [200] * 60
    assert {r.headers["X-Model-Variant"] for r in replies} == {"v1"}
    moved = env.gateway.metric("gateway_failovers_total", endpoint="errs", from_variant="bad", to_variant="v1") - before
    assert 20 <= moved <= 40  # about half the requests went to the failing canary first
    assert env.gateway.metric("gateway_retries_total", endpoint="errs", variant="bad") >= moved


def test_slow_shadow_adds_no_latency_and_overflow_is_dropped(env):
    with requests.Session() as s:
        for _ in range(20):  # warm
            env.post("ctr", session=s)
        base = []
        for _ in range(40):
            t0 = time.perf_counter()
            assert env.post("ctr", session=s).status_code == 200
            base.append(time.perf_counter() - t0)
        shadowed = []
        for _ in range(40):
            t0 = time.perf_counter()
            r = env.post("shadowed", session=s)
            shadowed.append(time.perf_counter() - t0)
            assert r.status_code == 200 and r.headers["X-Model-Variant"] == "v1"
    # The shadow sleeps 1 s per request; the client sees none of it.
    assert max(shadowed) < 0.5, max(shadowed)  # far below the shadow's 1 s, even on a busy machine
    assert np.median(shadowed) < np.median(base) * 2 + 0.01, (np.median(shadowed), np.median(base))
    assert env.gateway.metric("gateway_shadow_dropped_total", endpoint="shadowed", variant="sleepy") >= 30
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and env.gateway.metric("gateway_shadow_requests_total", endpoint="shadowed") < 1:
        time.sleep(0.1)
    assert env.gateway.metric("gateway_shadow_requests_total", endpoint="shadowed") >= 1


def test_route_change_is_live_within_one_second(env):
    env.routes.set_table(env.table(ctr_weights=(0, 10000)))
    t0 = time.monotonic()
    with requests.Session() as s:
        while time.monotonic() - t0 < 3:
            if all(env.post("ctr", session=s).headers["X-Model-Variant"] == "v2" for _ in range(5)):
                break
    elapsed = time.monotonic() - t0
    assert elapsed < 1.0, elapsed
    env.routes.set_table(env.table())
    time.sleep(0.6)


def test_last_good_table_is_kept_when_the_control_plane_is_down_or_sends_garbage(env):
    gw = env.gateway
    version = requests.get(f"{gw.url}/status", timeout=2).json()["routes"]["version"]
    env.routes.stop()
    try:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and gw.metric("gateway_route_table_stale") != 1:
            time.sleep(0.1)
        assert gw.metric("gateway_route_table_stale") == 1
        assert requests.get(f"{gw.url}/v2/health/ready", timeout=2).status_code == 200
        detail = requests.get(f"{gw.url}/status", timeout=2).json()["routes"]
        assert detail["stale"] is True and detail["version"] == version and "failed" in detail["last_error"]
        assert {env.post("ctr").status_code for _ in range(20)} == {200}
    finally:
        env.routes.start()
    # back up, but sending a document that is not a route table: still the last good one
    env.routes.set_table({"version": "garbage", "endpoints": "not a list"})
    time.sleep(1.0)
    health = requests.get(f"{gw.url}/status", timeout=2).json()["routes"]
    assert health["version"] == version and health["stale"] is True and health["last_error"], health
    assert gw.metric("gateway_route_fetches_total", result="invalid") >= 1
    assert {env.post("ctr", **{"X-User-Id": f"k{i}"}).headers["X-Model-Variant"] for i in range(40)} == {"v1", "v2"}
    # a table with one wrong entry is applied, that entry refused alone: its endpoint
    # answers 503 naming why, until the next good table
    broken = env.table(ctr_weights=(0, 10000))
    broken["endpoints"][0]["variants"][1]["weight_bp"] = 5
    env.routes.set_table(broken)
    time.sleep(1.0)
    refused = env.post("ctr")
    assert refused.status_code == 503 and refused.json()["code"] == "endpoint_refused", refused.text
    assert "sum to 5" in refused.text
    env.routes.set_raw(b"<html>not json")
    time.sleep(0.6)
    assert "not JSON" in requests.get(f"{gw.url}/status", timeout=2).json()["routes"]["last_error"]
    env.routes.set_table(env.table())
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and gw.metric("gateway_route_table_stale") != 0:
        time.sleep(0.1)
    assert gw.metric("gateway_route_table_stale") == 0


def _read_response(f):
    status = int(f.readline().split()[1])
    headers = {}
    while (line := f.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    body = f.read(int(headers.get("content-length", 0)))
    return status, headers, body


def test_http_edges_pipelining_expect_continue_chunked_close(env):
    import socket

    body = infer_body()
    host, port = "127.0.0.1", env.gateway.port
    with socket.create_connection((host, port), timeout=5) as sock:
        f = sock.makefile("rb")
        one = b"POST /v2/models/ctr/infer HTTP/1.1\r\nHost: x\r\nX-Request-Id: p%d\r\nContent-Length: %d\r\n\r\n%s"
        sock.sendall(one % (1, len(body), body) + one % (2, len(body), body))  # pipelined
        first, second = _read_response(f), _read_response(f)
        assert (first[0], first[1]["x-request-id"]) == (200, "p1")
        assert (second[0], second[1]["x-request-id"]) == (200, "p2")
        # Expect: 100-continue (curl sends it for bodies over 1 KiB)
        sock.sendall(
            b"POST /v2/models/ctr/infer HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n"
            % len(body)
        )
        assert f.readline().startswith(b"HTTP/1.1 100")
        assert f.readline() == b"\r\n"
        sock.sendall(body)
        assert _read_response(f)[0] == 200
        # chunked request body, then Connection: close
        chunks = b"".join(
            b"%x\r\n%s\r\n" % (len(body[i : i + 100]), body[i : i + 100]) for i in range(0, len(body), 100)
        )
        sock.sendall(
            b"POST /v2/models/ctr/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            + chunks
            + b"0\r\n\r\n"
        )
        status, headers, reply = _read_response(f)
        assert status == 200 and headers["connection"] == "close" and json.loads(reply)["outputs"][0]["name"] == "ctr"
        assert f.read() == b""  # closed by the gateway
    with socket.create_connection((host, port), timeout=5) as sock:  # client half-closes after sending
        sock.sendall(one % (3, len(body), body))
        sock.shutdown(socket.SHUT_WR)
        f = sock.makefile("rb")
        assert _read_response(f)[0] == 200 and f.read() == b""
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(b"NONSENSE\r\n\r\n")
        status, headers, reply = _read_response(sock.makefile("rb"))
        assert status == 400 and json.loads(reply)["code"] == "bad_http"


def test_killing_the_canary_replica_under_load_gives_zero_client_errors(env):
    """Last in the module: Triton B is killed with SIGKILL while 4 clients send load."""
    gw = env.gateway
    env.routes.set_table(env.table(ctr_weights=(5000, 5000)))
    time.sleep(0.6)
    before = gw.metric("gateway_failovers_total", endpoint="ctr", from_variant="v2")
    stop = threading.Event()
    results = Counter()

    def load():
        with requests.Session() as s:
            while not stop.is_set():
                r = env.post("ctr", session=s)
                results[(r.status_code, r.headers["X-Model-Variant"])] += 1

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.7)
    served_by_canary = results[(200, "v2")]
    env.b.stop(timeout=0.01)  # SIGTERM, then SIGKILL right away
    env.b.process.wait(5)
    time.sleep(1.2)
    stop.set()
    for t in threads:
        t.join(10)
    assert served_by_canary > 0
    assert set(s for s, _ in results) == {200}, results
    assert gw.metric("gateway_failovers_total", endpoint="ctr", from_variant="v2") - before > 0
    assert gw.metric("gateway_replica_circuit_open", replica=env.b.http_url, model=CANARY) == 1
    health = requests.get(f"{gw.url}/status", timeout=2).json()
    assert health["endpoints"]["ctr"]["variants"]["v2"]["replicas"][env.b.http_url] == "open"


def test_restarted_canary_replica_is_probed_back_in(env, tmp_path):
    """After the kill above: a new tritonserver on the same ports; the breaker's probe
    (GET /v2/models/{model}/ready) closes the circuit and the canary serves again."""
    from serving.tritonserver import TritonProcess

    old = env.b
    b = TritonProcess(
        model_repository=old.model_repository,
        work_dir=tmp_path / "triton-b2",
        http_port=old.http_port,
        grpc_port=old.grpc_port,
        metrics_port=old.metrics_port,
    ).start()
    env.b = b
    b.wait_live(60)
    b.load(CANARY)
    gw = env.gateway
    deadline = time.monotonic() + 15
    while (
        time.monotonic() < deadline and gw.metric("gateway_replica_circuit_open", replica=b.http_url, model=CANARY) != 0
    ):
        time.sleep(0.1)
    assert gw.metric("gateway_replica_circuit_open", replica=b.http_url, model=CANARY) == 0
    with requests.Session() as s:
        seen = Counter(env.post("ctr", session=s).headers["X-Model-Variant"] for _ in range(40))
    assert seen["v2"] >= 10, seen
