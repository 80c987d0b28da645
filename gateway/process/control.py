"""The gateway's control listener: what Prometheus, the platform's collector, operators and
orchestrators read (/metrics, /status, /healthz and KServe's health paths) answered by a thread
of each worker, outside the worker's event loop, on a port of its own (GATEWAY_CONTROL_PORT):
a scrape is answered within its timeout while the data path is saturated, where on the data
port it would wait behind every request ahead of it (issue: 11 of the collector's scrapes timed
out under a benchmark, exactly when the judge needs them). The data port still answers the same
paths. The workers' private metrics sockets (aggregate.py) are answered by the same kind of
thread, so adding up the workers never waits for a busy loop either.

The threads only read what the event loop owns (the route table, breakers, metric values:
objects the loop replaces whole or that prometheus_client locks); they change nothing. The
HTTP framing is the standard library's (http.server); the Unix-socket client is http.client's.

With several workers the supervisor makes the control socket once (no SO_REUSEPORT: a second
gateway on the port fails to start instead of taking half the scrapes) and every worker's thread
accepts on it; a single-process gateway binds it itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import socketserver
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from gateway.process import admin
from gateway.process.aggregate import all_workers
from gateway.telemetry import metrics

log = logging.getLogger("gateway")

# /v2/health/live on the control port answers 503 once the worker's loop has not run this long:
# a saturated loop still runs (it is busy, not dead); a hung one does not, and is restarted
LOOP_STALL_S = 15.0
# connections served at once per listener and worker (one thread each; scrapes take milliseconds)
MAX_CONNECTIONS = 32
PATHS = ("/metrics", "/status", "/healthz", "/v2/health/live", "/v2/health/ready")


class _Request:
    """What admin.py's pages read of a request: its headers, lower-cased."""

    __slots__ = ("headers",)

    def __init__(self, headers):
        self.headers = {name.lower(): value for name, value in headers.items()}


class _ControlHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "modelplane-gateway-control"
    timeout = 5  # a connection silent this long is closed (a slow client holds only its own thread)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        owner = self.server.owner
        path = self.path.split("?", 1)[0]
        try:
            status, headers, body = owner.answer(path, _Request(self.headers))
        except Exception:  # noqa: BLE001 - a page that fails must not take the listener with it
            log.exception("control listener: %s failed", path)
            status, headers, body = 500, {"Content-Type": "text/plain"}, b"internal error\n"
        self.send_response(status)
        for name, value in headers.items():
            if name.lower() not in ("content-length", "connection"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self) -> None:  # noqa: N802
        self.send_response(405)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format, *args) -> None:  # noqa: A002 - http.server's signature
        pass  # scrapes every few seconds are not news; failures are logged in do_GET


class _Bounded:
    """At most MAX_CONNECTIONS connections (threads) at once; one past that is closed at once:
    whoever floods the port costs the worker a bounded number of threads, never its memory."""

    daemon_threads = True

    def __init__(self, *args, **kwargs):
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(*args, **kwargs)

    def process_request(self, request, client_address) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class _TcpServer(_Bounded, ThreadingHTTPServer):
    allow_reuse_address = True


class _UnixServer(_Bounded, socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    pass


def control_socket(host: str, port: int, backlog: int = 128) -> socket.socket:
    """The control port's listening socket (made once by the supervisor; see the module docstring)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    return sock


class ControlThread:
    """This worker's control listener and private metrics socket, each served by its own threads."""

    def __init__(self, gateway, settings):
        self.gateway = gateway
        self.settings = settings
        self.own_socket = (
            os.path.join(settings.run_dir, f"metrics-{settings.worker_row}.sock") if settings.run_dir else None
        )
        self.servers: list[socketserver.BaseServer] = []
        self.beat = time.monotonic()  # the last time the worker's event loop ran (heartbeat)
        self.heartbeat: asyncio.Task | None = None

    async def _heartbeat(self) -> None:
        while True:
            self.beat = time.monotonic()
            await asyncio.sleep(1.0)

    def answer(self, path: str, request: _Request) -> tuple[int, dict, bytes]:
        gateway = self.gateway
        if path == "/metrics":
            if not admin.operator_allowed(gateway, request):
                return admin.unauthorized("/metrics", request)
            body = all_workers(self.settings.run_dir, self.own_socket)
            return 200, {"Content-Type": metrics.CONTENT_TYPE}, body
        if path == "/status":
            return admin.status_page(gateway, request)
        if path in ("/healthz", "/v2/health/ready"):
            return admin.ready(gateway, request)
        if path == "/v2/health/live":
            stalled = time.monotonic() - self.beat
            if stalled > LOOP_STALL_S:  # this thread answers, but the worker's loop does not run
                body = json.dumps({"live": False, "reason": f"the event loop has not run for {stalled:.0f} s"})
                return 503, {"Content-Type": "application/json"}, body.encode()
            return admin.live(gateway, request)
        return 404, {"Content-Type": "application/json"}, b'{"error": {"code": "not_found", "message": "no such path"}}'

    def _own_metrics(self, path: str, request: _Request) -> tuple[int, dict, bytes]:
        if path != "/metrics":
            return 404, {}, b""
        body, content_type = metrics.exposition()
        return 200, {"Content-Type": content_type}, body

    def start(self) -> None:
        """Called on the worker's event loop (which the heartbeat then marks as running)."""
        settings = self.settings
        self.heartbeat = asyncio.get_running_loop().create_task(self._heartbeat())
        if self.own_socket:  # the siblings read this worker's own exposition here
            try:
                os.unlink(self.own_socket)
            except FileNotFoundError:
                pass
            unix = _UnixServer(self.own_socket, _ControlHandler)
            unix.owner = _Own(self)
            self.servers.append(unix)
        if settings.control_port:
            if settings.control_socket is not None:  # the supervisor's, shared by every worker
                tcp = _TcpServer((settings.host, settings.control_port), _ControlHandler, bind_and_activate=False)
                tcp.socket.close()
                tcp.socket = settings.control_socket
            else:
                tcp = _TcpServer((settings.host, settings.control_port), _ControlHandler)
            tcp.owner = self
            self.servers.append(tcp)
        for server in self.servers:
            threading.Thread(
                target=server.serve_forever, kwargs={"poll_interval": 0.5}, daemon=True, name="gateway-control"
            ).start()

    def close(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.cancel()
        for server in self.servers:
            server.shutdown()
            if server.socket is not self.settings.control_socket:
                server.server_close()
        self.servers = []
        if self.own_socket:
            try:
                os.unlink(self.own_socket)
            except FileNotFoundError:
                pass


class _Own:
    """The private socket's pages: this worker's own exposition only."""

    def __init__(self, control: ControlThread):
        self.answer = control._own_metrics
