"""The gateway and its neighbours as real processes, the one way tests and benchmarks start
them: tritonserver (serving/tritonserver.py) with models loaded, a route-table HTTP server in a
thread that plays the control plane's GET /api/v1/gateway/routes (token, ETag, 304), and the
gateway (`python -m gateway`) fed by that server (`GatewayProcess`) or by a file
(`start_gateway`)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import requests

from serving.tritonserver import TritonProcess, free_port

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "gateway-test-token"
METRICS_TOKEN = "metrics-token-for-tests"
MAX_BODY = 1 << 20


class RouteServer:
    """GET /api/v1/gateway/routes with token auth and ETag/If-None-Match -> 304."""

    def __init__(self):
        self.port = free_port()
        self.body = b"{}"
        self.etag = '"0"'
        self.requests: list[dict] = []
        self.httpd = None
        self.thread = None
        self.connections: set = set()

    def set_table(self, document) -> None:
        self.set_raw(json.dumps(document).encode())

    def set_raw(self, body: bytes) -> None:
        self.body = body
        self.etag = f'"{hashlib.sha1(body).hexdigest()[:16]}"'

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v1/gateway/routes"

    def start(self) -> RouteServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def setup(self):
                super().setup()
                server.connections.add(self.connection)

            def finish(self):
                server.connections.discard(self.connection)
                super().finish()

            def do_GET(self):
                server.requests.append(dict(self.headers))
                if (
                    self.path.partition("?")[0] != "/api/v1/gateway/routes"
                ):  # ?wait= asks for a long poll: not held here
                    return self._send(404, b'{"detail":"not found","code":"not_found"}')
                if self.headers.get("Authorization") != f"Token {TOKEN}":
                    return self._send(401, b'{"detail":"bad token","code":"not_authenticated"}')
                body, etag = server.body, server.etag
                if self.headers.get("If-None-Match") == etag:
                    return self._send(304, b"", etag)
                return self._send(200, body, etag)

            def _send(self, status, body, etag=None):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                if etag:
                    self.send_header("ETag", etag)
                self.end_headers()
                self.wfile.write(body)

        ThreadingHTTPServer.allow_reuse_address = True
        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        """Down for real: no listener and every kept-alive connection closed."""
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None
        for conn in list(self.connections):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class GatewayProcess:
    def __init__(self, work: Path, env: dict):
        self.port = free_port()
        self.log = work / "gateway.log"
        self.grpc_port = free_port()
        self.control_port = free_port()  # /metrics and health off the event loop (gateway/process/control.py)
        self.env = {
            **os.environ,
            "GATEWAY_WORKERS": "1",  # one process unless the test asks for more (gateway/process/workers.py)
            **env,
            "GATEWAY_GRPC_PORT": str(self.grpc_port),
            "GATEWAY_CONTROL_PORT": str(self.control_port),
            "GATEWAY_PORT": str(self.port),
            "GATEWAY_HOST": "127.0.0.1",
            "PYTHONUNBUFFERED": "1",
        }
        self.proc = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def control_url(self) -> str:
        return f"http://127.0.0.1:{self.control_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self, timeout: float = 20.0) -> GatewayProcess:
        """Start and wait until ready. A port handed out free that another process took before
        the gateway bound it (two workers of the suite, an outgoing connection's source port)
        is a start on other ports, up to three times; a caller that read `url` before `start`
        reads it again."""
        for attempt in range(3):
            try:
                return self._start(timeout)
            except RuntimeError as exc:
                if "address already in use" not in str(exc) or attempt == 2:
                    raise
                self.port, self.grpc_port, self.control_port = free_port(), free_port(), free_port()
                self.env.update(
                    GATEWAY_PORT=str(self.port),
                    GATEWAY_GRPC_PORT=str(self.grpc_port),
                    GATEWAY_CONTROL_PORT=str(self.control_port),
                )
        raise AssertionError("unreachable")

    def _start(self, timeout: float) -> GatewayProcess:
        log = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway"],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                if requests.get(f"{self.url}/v2/health/ready", timeout=0.5).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"gateway not ready:\n{self.log.read_text()[-3000:]}")

    def metric(self, name: str, **labels) -> float:
        """Sum of the samples of `name` whose labels include `labels` (read on the control port)."""
        text = requests.get(f"{self.control_url}/metrics", timeout=2).text
        total = 0.0
        for line in text.splitlines():
            if not line.startswith(name) or line.startswith("#"):
                continue
            series, _, value = line.rpartition(" ")
            metric, _, rest = series.partition("{")
            if metric != name:
                continue
            if all(f'{k}="{v}"' in rest for k, v in labels.items()):
                total += float(value)
        return total

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


def start_triton(work: Path, repo: Path, models: list[str]) -> TritonProcess:
    triton = TritonProcess(model_repository=repo, work_dir=work).start()
    try:
        triton.wait_live(60)
        for name in models:
            triton.load(name)
    except Exception:
        triton.stop()
        raise
    return triton


def start_gateway(routes: Path, work: Path, **env) -> tuple[subprocess.Popen, int]:
    port = free_port()
    log = open(work / f"gateway-{port}.log", "wb")
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
            **os.environ,
            "GATEWAY_METRICS_TOKEN": METRICS_TOKEN,
            "GATEWAY_MAX_BODY_BYTES": str(MAX_BODY),
            "GATEWAY_RECEIVE_TIMEOUT_S": "2",
            "GATEWAY_IDLE_TIMEOUT_S": "10",
            "GATEWAY_MAX_PIPELINED": "8",
            "GATEWAY_MAX_CHUNKS": "1024",
            "GATEWAY_BREAKER_COOLDOWN_MS": "60000",
            **env,
        },
    )
    log.close()
    deadline = time.monotonic() + 60  # a cold start on a loaded 2-core machine takes tens of seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError((work / f"gateway-{port}.log").read_text()[-3000:])
        try:
            if requests.get(f"http://127.0.0.1:{port}/v2/health/ready", timeout=0.5).status_code == 200:
                return proc, port
        except requests.RequestException:
            time.sleep(0.05)
    proc.kill()
    raise TimeoutError((work / f"gateway-{port}.log").read_text()[-3000:])


def stop_gateway(proc) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
