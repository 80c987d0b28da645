"""A small, fast HTTP/1.1 keep-alive client for the Triton replicas.

Why not aiohttp's client: per request it builds a ClientRequest, a ClientResponse, a
StreamReader, timers and header multidicts; that costs ~0.25 ms of CPU on this machine,
which is most of the gateway's latency budget. Here one request is one
`transport.write` of pre-encoded bytes and the reply is parsed in `data_received`
(status line, Content-Length or chunked, keep-alive). Connections are pooled per
replica (LIFO, so hot connections stay hot); a connection that times out, is closed by
the peer, or sends something unexpected is dropped, never reused.
"""

from __future__ import annotations

import asyncio
from collections import deque
from urllib.parse import urlsplit


class UpstreamError(Exception):
    """The replica could not be reached, closed the connection, or replied garbage."""

    def __init__(self, reason: str, message: str = ""):
        super().__init__(message or reason)
        self.reason = reason  # "connect" or "disconnect"


class _Conn(asyncio.Protocol):
    __slots__ = ("transport", "buf", "waiter", "status", "headers", "length", "chunked", "head_done", "closed", "keep_alive", "body")

    def __init__(self):
        self.transport = None
        self.buf = bytearray()
        self.waiter: asyncio.Future | None = None
        self.closed = False
        self._reset()

    def _reset(self):
        self.status = 0
        self.headers = None
        self.length = -1
        self.chunked = False
        self.head_done = False
        self.keep_alive = True
        self.body = None

    def connection_made(self, transport):
        self.transport = transport

    def connection_lost(self, exc):
        self.closed = True
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            if self.head_done and self.length < 0 and not self.chunked:
                # body delimited by connection close
                waiter.set_result((self.status, self.headers, bytes(self.buf)))
            else:
                waiter.set_exception(UpstreamError("disconnect", f"connection closed by upstream: {exc or 'EOF'}"))
        self.waiter = None

    def data_received(self, data):
        buf = self.buf
        buf += data
        waiter = self.waiter
        if waiter is None:  # unsolicited bytes: this connection is not reusable
            self.closed = True
            self.transport.close()
            return
        try:
            if not self.head_done:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(buf) > 65536:
                        raise UpstreamError("disconnect", "upstream response head too large")
                    return
                self._parse_head(bytes(buf[:end]))
                del buf[: end + 4]
            if self.chunked:
                body = self._dechunk()
                if body is None:
                    return
            elif self.length >= 0:
                if len(buf) < self.length:
                    return
                body = bytes(buf[: self.length])
                del buf[: self.length]
            else:
                return  # read until close
        except UpstreamError as exc:
            self.closed = True
            self.transport.close()
            if not waiter.done():
                waiter.set_exception(exc)
            self.waiter = None
            return
        self.waiter = None
        if buf:  # more than one response: protocol error, do not reuse
            self.keep_alive = False
        if not waiter.done():
            waiter.set_result((self.status, self.headers, body))

    def _parse_head(self, head: bytes):
        lines = head.split(b"\r\n")
        status_line = lines[0]
        parts = status_line.split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise UpstreamError("disconnect", f"bad upstream status line {status_line[:80]!r}")
        try:
            self.status = int(parts[1])
        except ValueError:
            raise UpstreamError("disconnect", f"bad upstream status line {status_line[:80]!r}") from None
        if parts[0] == b"HTTP/1.0":
            self.keep_alive = False
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                continue
            headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
        self.headers = headers
        length = headers.get("content-length")
        if headers.get("transfer-encoding", "").lower() == "chunked":
            self.chunked = True
        elif length is not None:
            try:
                self.length = int(length)
            except ValueError:
                raise UpstreamError("disconnect", f"bad upstream Content-Length {length!r}") from None
        elif self.status in (204, 304) or 100 <= self.status < 200:
            self.length = 0
        else:
            self.keep_alive = False
        if headers.get("connection", "").lower() == "close":
            self.keep_alive = False
        self.head_done = True

    def _dechunk(self):
        """The whole body once every chunk is in the buffer, else None."""
        buf = self.buf
        pos = 0
        parts = []
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                return None
            try:
                size = int(bytes(buf[pos:eol]).split(b";")[0], 16)
            except ValueError:
                raise UpstreamError("disconnect", "bad chunk size from upstream") from None
            start = eol + 2
            if size == 0:
                end = buf.find(b"\r\n\r\n", eol)
                if end < 0:
                    if buf[start:start + 2] == b"\r\n":
                        end = start - 2
                    else:
                        return None
                del buf[: end + 4]
                return b"".join(parts)
            if len(buf) < start + size + 2:
                return None
            parts.append(bytes(buf[start:start + size]))
            pos = start + size + 2


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

    async def request(self, head: bytes, body: bytes = b"", timeout: float | None = None, during=None) -> tuple[int, dict, bytes]:
        """Send one request (`head` = request line + headers, without Host and
        Content-Length) and return (status, headers with lower-case names, body).

        `during`, if given, is called once right after the request is written, i.e.
        while the upstream works on it (the gateway checks the request body then).
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
                if during is not None:
                    during()
                    during = None
                status, headers, data = await waiter
            except UpstreamError as exc:
                conn.closed = True
                conn.transport.close()
                if attempt == 0 and reused and exc.reason == "disconnect" and conn.status == 0:
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
