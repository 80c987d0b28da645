"""The gateway's control port (gateway/process/control.py: /metrics, /status and health answered by a
thread of each worker) attacked beside another tenant's traffic: it shows every team's traffic,
so it needs the metrics token; whoever floods it or holds connections open on it costs the
gateway a bounded number of threads and nothing on the data path; once they leave, a scrape is
answered again; and no tenant can point a backend or webhook at it.

In production the port is reachable only by the control plane and Prometheus (make run binds
it to loopback; the manifests' NetworkPolicy admits web, workers and Prometheus only), so these
cases are the defence behind that wall, not instead of it.

Real processes: tritonserver (blue's model), a two-worker gateway with a metrics token, the
route-table server; blue's requests come from a process of its own (the tolerance of
tests/adversarial/llm_tenants.py: at least 99 % succeed, p50 within 2x + 10 ms, p95 within
3x + 50 ms of the quiet window just before).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

import pytest
import requests

from gateway.process.control import MAX_CONNECTIONS
from harness.gateway import TOKEN, GatewayProcess, RouteServer, start_triton
from harness.processes import spawn, stop
from harness.triton_models import behaviour_model, infer_body
from tests.adversarial.llm_tenants import window
from tests.gateway.conftest import require_triton

pytestmark = [pytest.mark.integration]
METRICS_TOKEN = "control-port-metrics-token-0001"
FLOOD = 400  # connections opened and held silent, well past MAX_CONNECTIONS per worker
QUIET_S = 2.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    require_triton()
    work = tmp_path_factory.mktemp("adversarial-control")
    repo = work / "repo"
    behaviour_model(repo, "blue__v1__py")
    triton = start_triton(work / "triton", repo, ["blue__v1__py"])
    routes = RouteServer().start()
    gateway = None
    try:
        variant = {"name": "v1", "model_version": "1", "triton_model": "blue__v1__py", "role": "stable"}
        variant |= {"weight_bp": 10000, "replicas": [triton.http_url]}
        entry = {"name": "blue", "team": "blue", "timeout_ms": 5000, "auth": {"public": True}, "variants": [variant]}
        routes.set_table({"version": "control-1", "keys": [], "endpoints": [entry]})
        (work / "gw").mkdir()
        env = {"GATEWAY_ROUTES_URL": routes.url, "GATEWAY_TOKEN": TOKEN, "GATEWAY_WORKERS": "2"}
        env |= {"GATEWAY_METRICS_TOKEN": METRICS_TOKEN, "GATEWAY_METRICS_OPEN": "0"}
        gateway = GatewayProcess(work / "gw", env).start()
        yield gateway, work
    finally:
        if gateway is not None:
            gateway.stop()
        routes.stop()
        triton.stop(timeout=0.05)


def _scrape(gateway, token: str | None = METRICS_TOKEN, path: str = "/metrics", timeout: float = 2.0):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.get(f"{gateway.control_url}{path}", headers=headers, timeout=timeout)


def test_operator_pages_need_the_token_and_health_says_nothing_more(stack):
    gateway, _ = stack
    for path in ("/metrics", "/status"):
        assert _scrape(gateway, None, path).status_code == 401
        assert _scrape(gateway, "a-guess", path).status_code == 401
        assert _scrape(gateway, METRICS_TOKEN, path).status_code == 200
    deadline = time.monotonic() + 30  # the second worker may still be starting (the first one answered ready)
    while "gateway_workers 2.0" not in _scrape(gateway).text:
        assert time.monotonic() < deadline, "the control port never added up both workers"
        time.sleep(0.2)
    for path in ("/healthz", "/v2/health/live", "/v2/health/ready"):
        reply = _scrape(gateway, None, path)
        assert reply.status_code == 200 and set(reply.json()) <= {"live", "ready"}
    assert _scrape(gateway, None, "/v2/models/blue/infer").status_code == 404  # no data path here


def _threads(supervisor: int) -> int:
    children = Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()
    return sum(len(os.listdir(f"/proc/{pid}/task")) for pid in children)


def test_a_connection_flood_costs_bounded_threads_and_nothing_on_the_data_path(stack):
    gateway, work = stack
    out = work / f"blue-{time.monotonic_ns()}.jsonl"
    blue = spawn(
        [sys.executable, "-m", "tests.adversarial.test_control_port", gateway.url, str(out)],
        dict(os.environ),
        work / "blue.log",
    )
    held: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (not out.exists() or sum(1 for _ in out.open()) < 20):
            time.sleep(0.1)
        threads_before = _threads(gateway.proc.pid)
        time.sleep(QUIET_S)
        started = time.time()
        for _ in range(FLOOD):  # connections that never send a byte, and slow senders among them
            sock = socket.create_connection(("127.0.0.1", gateway.control_port), timeout=2)
            if len(held) % 10 == 0:
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never finishes its headers
            held.append(sock)
        time.sleep(1.0)
        threads_during = _threads(gateway.proc.pid)
        ended = time.time()
    finally:
        for sock in held:
            sock.close()
        stop(blue)
    records = [tuple(json.loads(line)) for line in out.read_text().splitlines() if line]
    before, during = window(records, started - QUIET_S, started, "tensor"), window(records, started, ended, "tensor")
    assert before["n"] >= 10 and during["n"] >= 10, (before, during)
    assert during["success"] >= 0.99, (before, during)
    assert during["p50"] <= 2 * before["p50"] + 0.010 and during["p95"] <= 3 * before["p95"] + 0.050, (before, during)
    # two workers, two listeners each (TCP and the private metrics socket): at most their bound
    assert threads_during - threads_before <= 2 * 2 * MAX_CONNECTIONS, (threads_before, threads_during)
    deadline = time.monotonic() + 10  # the held connections are gone: scrapes are answered again
    while True:
        try:
            if _scrape(gateway, timeout=1.0).status_code == 200:
                break
        except requests.RequestException:
            pass
        assert time.monotonic() < deadline, "the control port did not recover after the flood"
        time.sleep(0.2)


@pytest.mark.django_db
def test_no_tenant_url_may_point_at_the_control_port(settings):
    """Webhooks and LLM backends are vetted against the platform's own listeners
    (kernel/outbound.py): the control port is one of them, even where loopback is allowed."""
    from kernel.outbound import OutboundRefused, vet_url

    settings.OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    with pytest.raises(OutboundRefused) as exc:
        vet_url(f"http://127.0.0.1:{settings.GATEWAY_CONTROL_PORT}/metrics")
    assert exc.value.rule == "platform_listener"


def _blue(gateway: str, out: str) -> None:  # pragma: no cover - runs in its own process
    """Blue's tensor requests until killed, each written as (unix time, kind, status, seconds)."""
    body = infer_body(1)
    session = requests.Session()
    with open(out, "a", buffering=1) as sink:
        while True:
            started = time.monotonic()
            try:
                status = session.post(f"{gateway}/v2/models/blue/infer", data=body, timeout=10).status_code
            except requests.RequestException:
                status = 0
            sink.write(json.dumps([time.time(), "tensor", status, time.monotonic() - started]) + "\n")
            time.sleep(0.02)


if __name__ == "__main__":  # pragma: no cover
    _blue(sys.argv[1], sys.argv[2])
