"""A small, fast HTTP/1.1 keep-alive client for the Triton replicas.

Why not aiohttp's client: per request it builds a ClientRequest, a ClientResponse, a
StreamReader, timers and header multidicts; that costs ~0.25 ms of CPU on this machine,
which is most of the gateway's latency budget. Here one request is one
`transport.write` of pre-encoded bytes and the reply is parsed by llhttp (httptools'
response parser: status line, headers, Content-Length or chunked, keep-alive) as it
arrives. Connections are pooled per replica (LIFO, so hot connections stay hot); a
connection that times out, is closed by the peer, or sends something unexpected is
dropped, never reused.
"""

from __future__ import annotations

import asyncio
from collections import deque
from urllib.parse import urlsplit

import httptools

MAX_HEAD = 65536


class UpstreamError(Exception):
    """The replica could not be reached, closed the connection, or replied garbage."""

    def __init__(self, reason: str, message: str = ""):
        super().__init__(message or reason)
        self.reason = reason  # "connect" or "disconnect"


class _Conn(asyncio.Protocol):
    __slots__ = (
        "transport",
        "parser",
        "waiter",
        "status",
        "headers",
        "body",
        "head_bytes",
        "closed",
        "keep_alive",
        "framed",
    )

    def __init__(self):
        self.transport = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future | None = None
        self.closed = False
        self._reset()

    def _reset(self):
        self.status = 0
        self.headers = None
        self.body = None
        self.head_bytes = 0
        self.keep_alive = True
        self.framed = True  # the body has a length (Content-Length or chunked), not "until close"

    def connection_made(self, transport):
        self.transport = transport

    def connection_lost(self, exc):
        self.closed = True
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            if self.headers is not None and not self.framed:
                # body delimited by connection close
                waiter.set_result((self.status, self.headers, bytes(self.body or b"")))
            else:
                waiter.set_exception(UpstreamError("disconnect", f"connection closed by upstream: {exc or 'EOF'}"))
        self.waiter = None

    def data_received(self, data):
        if self.waiter is None:  # unsolicited bytes: this connection is not reusable
            self.closed = True
            self.transport.close()
            return
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, UpstreamError) as exc:
            cause = exc.__context__ if isinstance(exc.__context__, UpstreamError) else exc
            self._fail(UpstreamError("disconnect", f"bad reply from upstream: {cause}"))

    def _fail(self, exc: UpstreamError) -> None:
        self.closed = True
        self.transport.close()
        waiter = self.waiter
        self.waiter = None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    # llhttp callbacks
    def on_message_begin(self):
        if self.waiter is None:  # a second reply to one request: protocol error
            raise UpstreamError("disconnect", "more than one reply to one request")
        self.headers = {}

    def on_header(self, name: bytes, value: bytes):
        self.head_bytes += len(name) + len(value)
        if self.head_bytes > MAX_HEAD:
            raise UpstreamError("disconnect", "upstream response head too large")
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self):
        self.status = self.parser.get_status_code()
        headers = self.headers
        if (
            "content-length" not in headers
            and "transfer-encoding" not in headers
            and not (self.status in (204, 304) or 100 <= self.status < 200)
        ):
            self.framed = False
            self.keep_alive = False

    def on_body(self, chunk: bytes):
        body = self.body
        if body is None:
            self.body = chunk
        elif type(body) is bytes:
            self.body = bytearray(body)
            self.body += chunk
        else:
            body += chunk

    def on_message_complete(self):
        if 100 <= self.status < 200:  # an interim reply (100 Continue): the final one follows
            self.headers = None
            return
        waiter = self.waiter
        self.waiter = None
        if not self.parser.should_keep_alive():
            self.keep_alive = False
        body = self.body
        if body is None:
            body = b""
        elif type(body) is not bytes:
            body = bytes(body)
        if waiter is not None and not waiter.done():
            waiter.set_result((self.status, self.headers, body))


def _expire(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class Pool:
    """Keep-alive connections to one replica (scheme http only)."""

    __slots__ = ("host", "port", "host_header", "idle", "max_idle", "loop")

    def __init__(self, base: str, max_idle: int = 256):
        parts = urlsplit(base)
        if parts.scheme != "http":
            raise ValueError(f"only http:// replicas are supported, got {base!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.host_header = parts.netloc.encode("latin-1")
        self.idle: deque[_Conn] = deque()
        self.max_idle = max_idle
        self.loop = None

    async def _connect(self) -> _Conn:
        loop = self.loop or asyncio.get_running_loop()
        self.loop = loop
        try:
            _, conn = await loop.create_connection(_Conn, self.host, self.port)
        except OSError as exc:
            raise UpstreamError("connect", f"connect to {self.host}:{self.port}: {exc}") from None
        return conn

    async def request(self, head: bytes, body: bytes = b"", timeout: float | None = None) -> tuple[int, dict, bytes]:
        """Send one request (`head` = request line + headers, without Host and
        Content-Length) and return (status, headers with lower-case names, body).

        Raises UpstreamError, or TimeoutError after `timeout` seconds (a timer on the
        reply future: cheaper than asyncio.timeout() on every request)."""
        loop = self.loop
        if loop is None:
            loop = self.loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        message = b"%sHost: %s\r\nContent-Length: %d\r\n\r\n%s" % (head, self.host_header, len(body), body)
        idle = self.idle
        for attempt in (0, 1):
            conn = None
            while idle:
                candidate = idle.pop()
                if not candidate.closed:
                    conn = candidate
                    break
            reused = conn is not None
            if conn is None:
                if deadline is None:
                    conn = await self._connect()
                else:
                    conn = await asyncio.wait_for(self._connect(), max(deadline - loop.time(), 0.0))
            waiter = loop.create_future()
            conn.waiter = waiter
            timer = None if deadline is None else loop.call_at(deadline, _expire, waiter)
            try:
                conn.transport.write(message)
                status, headers, data = await waiter
            except UpstreamError as exc:
                conn.closed = True
                conn.transport.close()
                if attempt == 0 and reused and exc.reason == "disconnect" and conn.headers is None:
                    # A pooled connection the server had already closed before any reply
                    # byte: the standard client behaviour is one retry on a fresh one.
                    continue
                raise
            except BaseException:  # timeout or cancelled: the reply may still come, drop the connection
                conn.closed = True
                conn.waiter = None
                conn.transport.close()
                raise
            finally:
                if timer is not None:
                    timer.cancel()
            if conn.keep_alive and not conn.closed and len(idle) < self.max_idle:
                conn._reset()
                idle.append(conn)
            else:
                conn.closed = True
                conn.transport.close()
            return status, headers, data
        raise UpstreamError("disconnect", "unreachable")  # pragma: no cover (loop always returns or raises)

    def close(self) -> None:
        while self.idle:
            conn = self.idle.pop()
            conn.closed = True
            if conn.transport is not None:
                conn.transport.close()
