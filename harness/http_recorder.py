"""A real HTTP server on 127.0.0.1 that records every request it gets (method, path,
headers), for tests of what a client sends where. It either answers by itself (404, or a
redirect to `redirect_to`), or forwards to `upstream` as a reverse proxy would, adding
`add_headers` (e.g. a proxy that sets X-Forwarded-Host) and recording each answer's status.

    with RecordingServer(upstream=live_server.url) as proxy:
        ... proxy.url ... proxy.requests  # [{"method", "path", "headers", "status", "at"}]
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host", "content-length"}


class RecordingServer:
    def __init__(self, *, upstream: str | None = None, redirect_to: str | None = None, add_headers=None):
        self.upstream = upstream.rstrip("/") if upstream else None
        self.redirect_to = redirect_to
        self.add_headers = dict(add_headers or {})
        self.requests: list[dict] = []
        self.connections = 0
        self._lock = threading.Lock()
        self.httpd = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def start(self) -> RecordingServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def setup(self):
                super().setup()
                with server._lock:
                    server.connections += 1

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                record = {
                    "method": self.command,
                    "path": self.path,
                    "headers": dict(self.headers),
                    "status": None,
                    "at": time.monotonic(),
                }
                with server._lock:
                    server.requests.append(record)
                if server.redirect_to:
                    record["status"] = 302
                    return self._send(302, b"", {"Location": server.redirect_to})
                if not server.upstream:
                    record["status"] = 404
                    return self._send(404, b'{"detail":"not here","code":"not_found"}', {})
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                headers.update(server.add_headers)
                answer = requests.request(
                    self.command,
                    server.upstream + self.path,
                    headers=headers,
                    data=body,
                    allow_redirects=False,
                    timeout=30,
                )
                record["status"] = answer.status_code
                passed = {k: v for k, v in answer.headers.items() if k.lower() not in HOP_BY_HOP | {"content-encoding"}}
                self._send(answer.status_code, answer.content, passed)

            do_GET = do_POST = do_PATCH = do_DELETE = do_HEAD = _handle

            def _send(self, status, body, headers):
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                if status != 304:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if body and status != 304 and self.command != "HEAD":
                    self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None

    def __enter__(self) -> RecordingServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
