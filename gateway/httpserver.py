"""A small HTTP/1.1 server on asyncio.Protocol for the gateway's hot path.

Why not aiohttp's web server: per request it builds a BaseRequest, a StreamReader, a
Response, a StreamWriter and multidicts, and writes headers and body separately;
py-spy put ~55% of the gateway's CPU there. Here a request is parsed from the
connection's buffer in `data_received` (request line, headers, Content-Length or
chunked body, `Expect: 100-continue`, keep-alive, pipelining in order) and the reply is
one `transport.write`.

The handler is `async handler(Request) -> (status, headers: dict[str, str], body: bytes)`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from http import HTTPStatus

log = logging.getLogger("gateway.http")

MAX_HEAD = 64 * 1024
REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}


class Request:
    __slots__ = ("method", "path", "query", "headers", "body", "keep_alive")

    def __init__(self, method: str, path: str, query: str, headers: dict, body: bytes, keep_alive: bool):
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers  # lower-case names
        self.body = body
        self.keep_alive = keep_alive


def encode_response(status: int, headers: dict, body: bytes, close: bool = False) -> bytes:
    head = "".join([f"{k}: {v}\r\n" for k, v in headers.items()])
    return b"HTTP/1.1 %d %s\r\nContent-Length: %d\r\n%s%s\r\n%s" % (
        status, REASONS.get(status, b"Unknown"), len(body), head.encode("latin-1"),
        b"Connection: close\r\n" if close else b"", body,
    )


def _error_bytes(status: int, code: str, detail: str) -> bytes:
    body = json.dumps({"detail": detail, "code": code}).encode()
    return encode_response(status, {"Content-Type": "application/json", "X-Model-Variant": "none"}, body, close=True)


class BodyTooLarge(Exception):
    pass


class HttpProtocol(asyncio.Protocol):
    __slots__ = ("server", "transport", "buf", "queue", "busy", "closed", "head", "loop", "last", "eof")

    def __init__(self, server: "HttpServer"):
        self.server = server
        self.transport = None
        self.buf = bytearray()
        self.queue: deque = deque()
        self.busy = False
        self.closed = False
        self.head = None  # parsed head waiting for its body: (method, target, headers, length, chunked, keep_alive)
        self.loop = server.loop
        self.last = 0.0  # loop time of the last bytes received (idle sweeper)
        self.eof = False

    def connection_made(self, transport):
        self.transport = transport
        self.last = self.loop.time()
        self.server.connections.add(self)

    def eof_received(self):
        """The client half-closed (sent everything): answer what is in progress, then close."""
        self.eof = True
        if self.busy:
            return True  # keep our side open for the replies
        return None

    def connection_lost(self, exc):
        self.closed = True
        self.server.connections.discard(self)

    def data_received(self, data):
        if self.closed:  # after an error reply the connection is being closed: ignore the rest
            return
        self.last = self.loop.time()
        buf = self.buf
        buf += data
        try:
            while True:
                request = self._parse()
                if request is None:
                    break
                if self.busy:
                    self.queue.append(request)
                else:
                    self.busy = True
                    self.loop.create_task(self._run(request))
        except BodyTooLarge as exc:
            self._fail(413, "body_too_large", str(exc))
        except ValueError as exc:
            self._fail(400, "bad_http", f"malformed HTTP request: {exc}")

    def _fail(self, status: int, code: str, detail: str) -> None:
        self.buf.clear()
        self.head = None
        if not self.closed:
            self.transport.write(_error_bytes(status, code, detail))
            self.transport.close()
        self.closed = True

    def _parse(self):
        buf = self.buf
        head = self.head
        if head is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    raise ValueError("request head larger than 64 KiB")
                return None
            lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
            del buf[: end + 4]
            method, target, version = lines[0].split(" ")
            if not version.startswith("HTTP/1."):
                raise ValueError(f"unsupported protocol {version!r}")
            headers = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if not sep:
                    raise ValueError(f"bad header line {line[:60]!r}")
                headers[name.strip().lower()] = value.strip()
            connection = headers.get("connection", "").lower()
            keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
            chunked = headers.get("transfer-encoding", "").lower() == "chunked"
            length = 0
            if not chunked and "content-length" in headers:
                length = int(headers["content-length"])
                if length < 0:
                    raise ValueError("negative Content-Length")
                limit = self.server.max_body
                if length > limit:
                    raise BodyTooLarge(f"request body of {length} bytes exceeds the limit of {limit}")
            head = self.head = (method, target, headers, length, chunked, keep_alive)
            if headers.get("expect", "").lower() == "100-continue" and (chunked or length > len(buf)):
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        method, target, headers, length, chunked, keep_alive = head
        if chunked:
            body = self._dechunk()
            if body is None:
                return None
        else:
            if len(buf) < length:
                return None
            body = bytes(buf[:length])
            del buf[:length]
        self.head = None
        path, _, query = target.partition("?")
        return Request(method, path, query, headers, body, keep_alive)

    def _dechunk(self):
        buf = self.buf
        pos = 0
        parts = []
        total = 0
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                return None
            size = int(bytes(buf[pos:eol]).split(b";")[0], 16)
            start = eol + 2
            if size == 0:
                end = buf.find(b"\r\n", start)  # trailers end with an empty line
                while end >= 0 and end != start:
                    start = end + 2
                    end = buf.find(b"\r\n", start)
                if end < 0:
                    return None
                del buf[: end + 2]
                return b"".join(parts)
            total += size
            if total > self.server.max_body:
                raise BodyTooLarge(f"chunked request body exceeds the limit of {self.server.max_body} bytes")
            if len(buf) < start + size + 2:
                return None
            parts.append(bytes(buf[start:start + size]))
            pos = start + size + 2

    async def _run(self, request: Request):
        handler = self.server.handler
        while True:
            try:
                status, headers, body = await handler(request)
            except Exception:
                log.exception("handler failed on %s %s", request.method, request.path)
                status, headers, body = 500, {"Content-Type": "application/json", "X-Model-Variant": "none"}, \
                    b'{"detail": "internal gateway error", "code": "internal"}'
            if self.closed:
                return
            close = not request.keep_alive
            self.transport.write(encode_response(status, headers, b"" if request.method == "HEAD" else body, close))
            if close:
                self.closed = True
                self.transport.close()
                return
            if self.queue:
                request = self.queue.popleft()
            else:
                self.busy = False
                if self.eof:
                    self.closed = True
                    self.transport.close()
                return


class HttpServer:
    def __init__(self, handler, *, max_body: int, idle_timeout: float = 75.0):
        self.handler = handler
        self.max_body = max_body
        self.idle_timeout = idle_timeout
        self.connections: set[HttpProtocol] = set()
        self.loop = None
        self.server = None
        self.sweeper = None

    async def start(self, host: str, port: int, backlog: int = 2048):
        self.loop = asyncio.get_running_loop()
        self.server = await self.loop.create_server(lambda: HttpProtocol(self), host, port, reuse_address=True, backlog=backlog)
        self.sweeper = self.loop.create_task(self._sweep())
        return self.server

    async def _sweep(self):
        """Close connections that sent nothing for idle_timeout seconds and have no
        request in progress (idle keep-alive clients, half-sent heads)."""
        while True:
            await asyncio.sleep(min(5.0, self.idle_timeout / 2))
            cutoff = self.loop.time() - self.idle_timeout
            for conn in list(self.connections):
                if not conn.busy and conn.last < cutoff and conn.transport is not None:
                    conn.closed = True
                    conn.transport.close()

    async def close(self, grace: float = 2.0):
        if self.sweeper is not None:
            self.sweeper.cancel()
        if self.server is not None:
            self.server.close()
        deadline = self.loop.time() + grace
        while any(c.busy for c in self.connections) and self.loop.time() < deadline:
            await asyncio.sleep(0.05)
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.close()
