"""The gateway process with --routes-file and no control plane: live reload when the
file changes, last good table kept on a bad file, and what a client gets when no
replica answers (503 with Retry-After, before and after the breaker ejects it). No Triton needed: the
replica URL points at a port nobody listens on. One gateway for the module; the tests
run in file order (the dead-replica test needs the breaker still closed)."""

import json
import subprocess
import sys
import time

import pytest
import requests

from harness.gateway import ROOT
from harness.triton_models import infer_body
from serving.tritonserver import free_port

pytestmark = pytest.mark.integration


def table(version, replicas):
    return {
        "version": version,
        "endpoints": [
            {
                "name": "ctr",
                "timeout_ms": 500,
                "auth": {"public": True},
                "variants": [
                    {
                        "name": "v1",
                        "model_version": "1",
                        "triton_model": "ctr__v1__onnx",
                        "role": "stable",
                        "weight_bp": 10000,
                        "replicas": replicas,
                    }
                ],
            }
        ],
    }


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("gateway-file")
    routes = tmp_path / "routes.json"
    dead = f"http://127.0.0.1:{free_port()}"
    routes.write_text(json.dumps(table("f1", [dead])))
    port = free_port()
    log = open(tmp_path / "gateway.log", "wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway",
            "--workers",
            "1",
            "--routes-file",
            str(routes),
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={
            **__import__("os").environ,
            "GATEWAY_POLL_INTERVAL_MS": "200",
            "GATEWAY_BREAKER_COOLDOWN_MS": "60000",
            "GATEWAY_IDLE_TIMEOUT_S": "1",
            "GATEWAY_RECEIVE_TIMEOUT_S": "1",
        },
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{url}/v2/health/ready", timeout=0.5).status_code == 200:
                break
        except requests.RequestException:
            time.sleep(0.05)
    else:
        proc.kill()
        raise TimeoutError((tmp_path / "gateway.log").read_text())
    yield url, routes, dead, port
    proc.terminate()
    proc.wait(10)


def version(url):
    return requests.get(f"{url}/status", timeout=2).json()["routes"]


def test_dead_replica_gives_503_with_retry_after_before_and_after_ejection(gateway):
    """Issue 11: a replica that refuses connections is down or restarting: 503 with
    Retry-After (not 502) from the first request on, then the breaker ejects it."""
    url, _, dead, _ = gateway
    codes = []
    for _ in range(5):
        r = requests.post(f"{url}/v2/models/ctr/infer", data=infer_body(), timeout=5)
        codes.append((r.status_code, r.json()["code"], r.headers["X-Model-Variant"]))
        assert int(r.headers["Retry-After"]) >= 1 and r.json()["error"]
    assert codes[0] == (503, "no_ready_backend", "v1")
    assert codes[-1] == (503, "no_ready_backend", "v1")  # breaker open after 3 connect errors
    assert requests.get(f"{url}/v2/models/ctr/ready", timeout=2).status_code == 503
    health = requests.get(f"{url}/status", timeout=2).json()
    assert health["endpoints"]["ctr"]["variants"]["v1"]["replicas"][dead] == "open"


def test_file_reload_and_last_good_table(gateway):
    url, routes, dead, _ = gateway
    assert version(url)["version"] == "f1" and version(url)["source"] == "file"
    routes.write_text(json.dumps(table("f2", [dead])))
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline and version(url)["version"] != "f2":
        time.sleep(0.05)
    assert version(url)["version"] == "f2"
    routes.write_text("{ not json")
    time.sleep(0.6)
    detail = version(url)
    assert detail["version"] == "f2" and detail["stale"] is True and "not JSON" in detail["last_error"]
    routes.write_text(json.dumps({"version": "f3", "endpoints": {}}))  # not a route table: refused whole
    time.sleep(0.6)
    detail = version(url)
    assert detail["version"] == "f2" and "endpoints: {} is not of type 'array'" in detail["last_error"]
    text = requests.get(f"{url}/metrics", timeout=2).text
    assert "gateway_route_table_stale 1.0" in text and 'gateway_route_fetches_total{result="invalid"}' in text
    # one bad entry is refused alone (503 endpoint_refused naming why); the rest of f4 applies
    bad = table("f4", [dead])
    bad["endpoints"].append(json.loads(json.dumps(bad["endpoints"][0]).replace('"ctr"', '"ux"')))
    bad["endpoints"][1]["variants"][0]["role"] = "canary"
    bad["endpoints"][0]["timeout_ms"] = 400
    routes.write_text(json.dumps(bad))
    time.sleep(0.6)
    detail = version(url)
    assert detail["version"] == "f4" and detail["stale"] is False and detail["last_error"] is None
    assert [(r["name"], r["code"]) for r in detail["refused"]] == [("ux", "stable_count")]
    r = requests.post(f"{url}/v2/models/ux/infer", data=infer_body(), timeout=5)
    assert r.status_code == 503 and r.json()["code"] == "endpoint_refused"
    assert "exactly one variant with role 'stable'" in r.json()["error"]
    assert (
        requests.post(f"{url}/v2/models/ctr/infer", data=infer_body(), timeout=5).json()["code"] != "endpoint_refused"
    )
    text = requests.get(f"{url}/metrics", timeout=2).text
    assert 'gateway_route_refused{code="stable_count",kind="endpoint",name="ux"} 1.0' in text


def test_no_route_table_yet_means_503(tmp_path):
    """Control plane unreachable from the start: not ready, and inference says why."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "--workers", "1", "--port", str(port), "--host", "127.0.0.1"],
        cwd=ROOT,
        env={**__import__("os").environ, "GATEWAY_ROUTES_URL": f"http://127.0.0.1:{free_port()}/api/v1/gateway/routes"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                ready = requests.get(f"{url}/v2/health/ready", timeout=0.5)
                break
            except requests.RequestException:
                time.sleep(0.05)
        assert ready.status_code == 503 and ready.json() == {"live": True, "ready": False}
        detail = requests.get(f"{url}/status", timeout=2).json()["routes"]
        assert detail["stale"] is True and "failed" in detail["last_error"]
        r = requests.post(f"{url}/v2/models/ctr/infer", data=infer_body(), timeout=5)
        assert r.status_code == 503 and r.json()["code"] == "no_routes"
    finally:
        proc.terminate()
        proc.wait(10)


def test_silent_connections_are_closed(gateway):
    """A client that sends half a request head and goes quiet gets 408 once the request
    has not arrived whole within GATEWAY_RECEIVE_TIMEOUT_S, and is disconnected; an idle
    keep-alive connection is closed after GATEWAY_IDLE_TIMEOUT_S."""
    import socket

    _, _, _, port = gateway
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"POST /v2/models/ctr/infer HTTP/1.1\r\nHost: x\r\n")
        t0 = time.monotonic()
        reply = sock.makefile("rb").read()  # until the gateway closes
        assert reply.startswith(b"HTTP/1.1 408 ") and b'"request_timeout"' in reply
        assert 0.8 < time.monotonic() - t0 < 4
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        t0 = time.monotonic()
        assert sock.recv(100) == b""  # idle: closed without a word
        assert 0.8 < time.monotonic() - t0 < 4
