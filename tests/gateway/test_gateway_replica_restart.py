"""Issue 11: while a replica restarts, clients get 503 with Retry-After — not Triton's
404 "unknown model", not a 502. A real tritonserver (the endpoint's only replica) is
killed, started again on the same ports without the model (as a restarted replica is
while it loads it), then the model is loaded: every answer on the way is a 200 or a
503 with Retry-After and a KServe-shaped body, counted as the backend's fault, and the
endpoint serves again by itself."""

from __future__ import annotations

import time

import pytest
import requests

from harness.gateway import TOKEN, GatewayProcess, RouteServer, start_triton
from harness.triton_models import ctr_model, infer_body
from serving.tritonserver import TritonProcess
from tests.gateway.conftest import require_triton

pytestmark = pytest.mark.integration

MODEL = "solo__v1__onnx"


def _answers(gateway, seconds: float) -> list[requests.Response]:
    out, deadline = [], time.monotonic() + seconds
    with requests.Session() as session:
        while time.monotonic() < deadline:
            out.append(session.post(f"{gateway.url}/v2/models/solo/infer", data=infer_body(), timeout=10))
            time.sleep(0.02)
    return out


def _check_unavailable(response):
    assert response.status_code == 503, (response.status_code, response.text)
    assert int(response.headers["Retry-After"]) >= 1
    body = response.json()
    assert body["code"] == "no_ready_backend" and body["error"] and response.headers["X-Model-Variant"] == "v1"


def test_a_restarting_replica_gives_503_with_retry_after_until_it_serves_again(tmp_path):
    require_triton()
    repo = tmp_path / "repo"
    ctr_model(repo, MODEL, seed=7)
    triton = start_triton(tmp_path / "triton", repo, [MODEL])
    routes = RouteServer().start()
    routes.set_table(
        {
            "version": "r1",
            "endpoints": [
                {
                    "name": "solo",
                    "timeout_ms": 2000,
                    "auth": {"public": True},
                    "variants": [
                        {
                            "name": "v1",
                            "model_version": "1",
                            "triton_model": MODEL,
                            "role": "stable",
                            "weight_bp": 10000,
                            "replicas": [triton.http_url],
                        }
                    ],
                }
            ],
        }
    )
    gateway = GatewayProcess(
        tmp_path,
        {
            "GATEWAY_ROUTES_URL": routes.url,
            "GATEWAY_TOKEN": TOKEN,
            "GATEWAY_POLL_INTERVAL_MS": "250",
            "GATEWAY_BREAKER_COOLDOWN_MS": "300",
        },
    ).start()
    restarted = None
    try:
        assert {r.status_code for r in _answers(gateway, 0.5)} == {200}
        backend_before = gateway.metric("gateway_requests_total", endpoint="solo", fault="backend")

        triton.stop(timeout=0.01)  # SIGKILL right after SIGTERM: the replica is gone
        triton.process.wait(5)
        down = _answers(gateway, 1.0)
        assert down and all(_check_unavailable(r) is None for r in down)

        restarted = TritonProcess(
            model_repository=repo,
            work_dir=tmp_path / "triton-2",
            http_port=triton.http_port,
            grpc_port=triton.grpc_port,
            metrics_port=triton.metrics_port,
        ).start()
        restarted.wait_live(60)
        # Up, but the model is not loaded yet: Triton itself would answer 404 "unknown model".
        assert (
            requests.post(f"{restarted.http_url}/v2/models/{MODEL}/infer", data=infer_body(), timeout=5).status_code
            == 404
        )
        loading = _answers(gateway, 1.5)
        assert loading and all(_check_unavailable(r) is None for r in loading)

        restarted.load(MODEL)
        deadline, back = time.monotonic() + 15, None
        while time.monotonic() < deadline:
            response = requests.post(f"{gateway.url}/v2/models/solo/infer", data=infer_body(), timeout=10)
            if response.status_code == 200:
                back = response
                break
            _check_unavailable(response)
            time.sleep(0.05)
        assert back is not None, "the endpoint did not serve again after the model was loaded"
        assert {r.status_code for r in _answers(gateway, 0.5)} == {200}
        assert gateway.metric("gateway_requests_total", endpoint="solo", fault="backend") - backend_before >= len(
            down
        ) + len(loading)
        assert gateway.metric("gateway_requests_total", endpoint="solo", status="404") == 0
    finally:
        gateway.stop()
        routes.stop()
        for process in (restarted, triton):
            if process is not None:
                process.stop(timeout=0.05)
