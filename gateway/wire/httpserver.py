"""The gateway's HTTP/1.1 server: asyncio.Protocol + llhttp (through `httptools`, the
parser uvicorn uses) with every limit a request can push against, and one
`transport.write` per reply.

Framing (request line, header syntax, Content-Length, chunked bodies, CR/LF rules) is
llhttp's, in its strict mode: duplicate or signed Content-Length, unknown or doubled
Transfer-Encoding, obs-folds, bare LF or CR, NUL and control characters, `0x` chunk
sizes, missing CRLF after chunk data are refused with 400 before a handler sees them.
What llhttp leaves to the server is checked here: HTTP version (505), Host (400),
transfer codings other than `chunked` (501), Expect (417), and the limits:

  head      request line + headers <= max_header_bytes (431), URL <= MAX_URL (414),
            at most max_headers header fields (431);
  body      the route's own bound (the server's `body_bound` hook: what the endpoint's
            signature can need, gateway/process/bodybounds.py), else max_body_bytes: a larger
            Content-Length is refused before the body is read, a chunked body is
            counted as it arrives (413 naming the limit); at most max_chunks chunks (400);
            chunk extensions and trailers are bounded like the head (400), and trailer
            fields are never merged into the headers;
  time      a request must arrive whole within receive_timeout_s of its first byte
            (408); an idle keep-alive connection is closed after idle_timeout_s, and one
            whose client does not read its replies is aborted after as long;
  pipeline  while a reply is pending, reading stops once another request is complete
            (`transport.pause_reading()`: TCP backpressure), and at most max_pipelined
            parsed requests wait per connection (429 after the earlier ones, then close);
  writes    when the client does not read, the transport's buffer passes its high-water
            mark, `pause_writing` stops the connection's work until it drains;
  conns     at most max_connections_per_client from one client address (429 and close to
            the next ones: gateway/wire/peers.py says what a client is); from 7/8 of
            max_connections on, each new connection closes the oldest idle keep-alive
            one (never one with a request in progress); at max_connections with none
            idle, 503 to the next ones, then close.

So one connection holds at most: a head, a body, one read (256 KiB), max_pipelined small
request objects and a write buffer; and its work per read is one llhttp pass.

Why this is one long module: the connection protocol (llhttp callbacks, the limits above,
pipelining, lingering close) is one state machine whose parts read each other's state on
every callback; uvicorn keeps its httptools protocol in one module for the same reason.

The handler is `async handler(Request) -> (status, headers: dict[str, str], body)`; header
values it returns must be safe (the gateway validates what it echoes). `body` is bytes, or a
`Streamed` (an async iterator of byte chunks: server-sent events, gateway/llm/): then the reply
goes out with `Transfer-Encoding: chunked`, one chunk per item, and the next item is asked for
only once the transport's buffer is below its high-water mark (`pause_writing`), so a client
that reads slowly slows the producer (and, through it, the upstream's TCP connection) instead
of growing a buffer. A handler that sets `request.conn.cancellable` is cancelled
(asyncio.CancelledError in its task) when the client's connection is lost, streaming or not:
the upstream request it awaits is cancelled with it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from http import HTTPStatus

import httptools

from gateway.wire.peers import ClientKeys

log = logging.getLogger("gateway.http")

REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
MAX_URL = 8192
DRAIN_IDLE_S = 1.0  # on shutdown, a keep-alive connection idle this long is closed at once
# From this share of max_connections on, a new connection closes the oldest idle one: the
# slots a hoarder holds idle go back to clients that use them before the cap refuses anyone.
REAP_AT = 7 / 8
LINGER_S = (
    2.0  # after an error reply, how long what the client still sends is read and dropped (at most a body's worth)
)
# Header fields of which a request may carry only one: a second copy is how framing and
# authentication confusions start (the first for a proxy, the last for a server).
SINGLETON_HEADERS = frozenset(
    (
        "host",
        "content-length",
        "transfer-encoding",
        "content-type",
        "content-encoding",
        "expect",
        "authorization",
        "x-api-key",
        "x-request-id",
        "x-request-timeout-ms",
        "inference-header-content-length",
    )
)


class Streamed:
    """A reply body produced as it goes: `chunks` is an async generator of bytes; `done`, a
    callable run once whatever happens (written whole, cut, or never started because the
    client left first): what the handler holds for the stream is released there. `drains`
    counts the times the writer waited for the client to drain its socket (a slow reader)."""

    __slots__ = ("chunks", "done", "drains")

    def __init__(self, chunks, done=None):
        self.chunks = chunks
        self.done = done
        self.drains = 0

    async def finish(self) -> None:
        try:
            await self.chunks.aclose()
        finally:
            if self.done is not None:
                done, self.done = self.done, None
                done()


class Request:
    __slots__ = ("method", "path", "query", "headers", "body", "keep_alive", "conn", "body_limit")

    def __init__(
        self,
        method: str,
        path: str,
        query: str,
        headers: dict,
        body: bytes,
        keep_alive: bool,
        conn=None,
        body_limit: int | None = None,
    ):
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers  # lower-case names, latin-1 decoded values; the first of duplicates
        self.body = body
        self.keep_alive = keep_alive
        self.conn = conn
        self.body_limit = body_limit  # the bound this body was held to (also once inflated)


def encode_response(status: int, headers: dict, body: bytes, close: bool = False) -> bytes:
    head = "".join([f"{k}: {v}\r\n" for k, v in headers.items()])
    return b"HTTP/1.1 %d %s\r\nContent-Length: %d\r\n%s%s\r\n%s" % (
        status,
        REASONS.get(status, b"Unknown"),
        len(body),
        head.encode("latin-1"),
        b"Connection: close\r\n" if close else b"",
        body,
    )


def error_bytes(status: int, code: str, detail: str, extra: dict | None = None) -> bytes:
    body = json.dumps({"error": detail, "code": code}).encode()  # KServe v2's error object (gateway/kserve/replies.py)
    headers = {"Content-Type": "application/json", "X-Model-Variant": "none", **(extra or {})}
    return encode_response(status, headers, body, close=True)


class Reject(Exception):
    """Raised from a parser callback: answer `status` and close the connection."""

    def __init__(self, status: int, code: str, detail: str):
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail


class Limits:
    __slots__ = (
        "max_body_bytes",
        "max_header_bytes",
        "max_headers",
        "max_chunks",
        "max_pipelined",
        "receive_timeout_s",
        "idle_timeout_s",
        "max_connections",
        "max_connections_per_client",
    )

    def __init__(
        self,
        *,
        max_body_bytes: int = 8 << 20,
        max_header_bytes: int = 32 << 10,
        max_headers: int = 100,
        max_chunks: int = 4096,
        max_pipelined: int = 32,
        receive_timeout_s: float = 15.0,
        idle_timeout_s: float = 75.0,
        max_connections: int = 4096,
        max_connections_per_client: int = 512,
    ):
        self.max_body_bytes = max_body_bytes
        self.max_header_bytes = max_header_bytes
        self.max_headers = max_headers
        self.max_chunks = max_chunks
        self.max_pipelined = max_pipelined
        self.receive_timeout_s = receive_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.max_connections = max_connections
        self.max_connections_per_client = max_connections_per_client


class HttpProtocol(asyncio.Protocol):
    __slots__ = (
        "server",
        "limits",
        "transport",
        "parser",
        "loop",
        "queue",
        "busy",
        "closed",
        "lost",
        "eof",
        "last",
        "url",
        "headers",
        "body",
        "body_len",
        "chunks",
        "nheaders",
        "head_bytes",
        "pending",
        "progress",
        "started",
        "in_head",
        "reading_paused",
        "writing_paused",
        "drain",
        "failed",
        "close_after",
        "closing_since",
        "paused_since",
        "lingering",
        "task",
        "cancellable",
        "client",
        "body_limit",
        "body_what",
        "body_code",
    )

    def __init__(self, server: HttpServer):
        self.server = server
        self.limits = server.limits
        self.loop = server.loop
        self.transport = None
        self.parser = httptools.HttpRequestParser(self)
        self.queue: deque = deque()
        self.busy = False  # a handler task is running for this connection
        self.closed = False  # we stopped serving it (error, close, shutdown)
        self.lost = False  # the connection is gone (connection_lost)
        self.eof = False
        self.last = 0.0  # loop time of the last bytes received
        self.started = 0.0  # loop time the request being received began (0: none)
        self.in_head = False
        self.reading_paused = False
        self.writing_paused = False
        self.drain: asyncio.Future | None = None
        self.failed: bytes | None = None  # error reply waiting behind pending replies
        self.close_after = False
        self.lingering = False
        self.closing_since = 0.0
        self.paused_since = 0.0
        self.progress = False
        self.task: asyncio.Task | None = None  # the task answering this connection's requests
        self.cancellable = False  # the handler asked to be cancelled when the client goes away
        self.client = None  # the key its client's connections are counted under (peers.py)
        self._reset_message()

    def _reset_message(self):
        self.url = None
        self.headers = None
        self.body = None
        self.body_len = 0
        self.chunks = 0
        self.nheaders = 0
        self.head_bytes = 0
        self.pending = 0
        self.body_limit = self.limits.max_body_bytes
        self.body_what = ""
        self.body_code = "body_too_large"

    # --- asyncio.Protocol ---------------------------------------------------------------
    def connection_made(self, transport):
        self.transport = transport
        self.last = self.loop.time()
        server = self.server
        limits = self.limits
        if server.stopping:
            return self._refuse(error_bytes(503, "overloaded", "the gateway is shutting down"))
        peer = transport.get_extra_info("peername")
        client = server.client_keys.key(peer[0] if type(peer) is tuple else None)
        if client is not None:
            held = server.per_client.get(client, 0)
            if held >= limits.max_connections_per_client:
                server.on_rejected("too_many_connections")
                detail = (
                    f"this client address ({client}) has {held} connections open to this gateway worker; "
                    f"the limit is {limits.max_connections_per_client} (reuse them: keep-alive)"
                )
                return self._refuse(error_bytes(429, "too_many_connections", detail, {"Retry-After": "1"}))
        if len(server.connections) >= limits.max_connections * REAP_AT:
            server.reap_idle()
            if len(server.connections) >= limits.max_connections:
                server.on_rejected("overloaded")
                return self._refuse(
                    error_bytes(503, "overloaded", "the gateway is at its connection limit with none idle")
                )
        server.connections.add(self)
        server.idle[self] = None  # idle until its first byte: the oldest idle go first when slots run short
        if client is not None:
            self.client = client
            server.per_client[client] = server.per_client.get(client, 0) + 1

    def _refuse(self, reply: bytes) -> None:
        self.closed = True
        self.transport.write(reply)
        self.transport.close()

    def _release(self) -> None:
        """Give this connection's slots back (once): the server's and its client's."""
        server = self.server
        server.connections.discard(self)
        server.idle.pop(self, None)
        client = self.client
        if client is not None:
            self.client = None
            held = server.per_client.get(client, 1) - 1
            if held > 0:
                server.per_client[client] = held
            else:
                server.per_client.pop(client, None)

    def connection_lost(self, exc):
        self.closed = True
        self.lost = True
        self._release()
        drain = self.drain
        if drain is not None and not drain.done():
            drain.set_result(None)
        task = self.task
        if self.cancellable and task is not None and not task.done():
            task.cancel()  # nobody will read the reply: stop the work (and the upstream request) now

    def eof_received(self):
        """The client half-closed (sent everything): answer what is in progress, then close."""
        self.eof = True
        if self.lingering:
            return None  # both sides done: close
        if self.busy and self.cancellable and not self.queue:
            # a client that half-closes while its LLM request runs has left (HTTP clients do
            # not half-close to wait for a reply; nginx's proxy_ignore_client_abort off reads
            # it the same way): stop the work now rather than generate for nobody
            self.lost = True
            self.task.cancel()
            return None
        if self.busy or self.failed is not None:
            return True  # keep our side open for the replies
        if self.started:  # half a request, and no more will come
            self._fail(400, "bad_http", "the connection was half-closed in the middle of a request")
            return True
        return None

    def pause_writing(self):
        self.writing_paused = True
        self.paused_since = self.loop.time()
        self._update_reading()

    def resume_writing(self):
        self.writing_paused = False
        drain = self.drain
        if drain is not None and not drain.done():
            drain.set_result(None)
        self._update_reading()

    def data_received(self, data):
        if self.closed:  # after an error reply the connection is being closed: drop the rest
            if self.lingering:
                self.pending += len(data)
                limits = self.limits
                if self.pending > limits.max_body_bytes + limits.max_header_bytes:  # enough of that: close
                    self.lingering = False
                    self.transport.close()
            return
        self.last = self.loop.time()
        self.progress = False
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            reject = exc.__context__
            if isinstance(reject, Reject):
                self._fail(reject.status, reject.code, reject.detail)
            else:  # a bug in a callback: never a hang, never a half-parsed state kept
                log.error("HTTP parser callback failed: %r", reject)
                self._fail(400, "bad_http", "malformed HTTP request")
        except httptools.HttpParserUpgrade:
            # A protocol upgrade (h2c, websocket) is not offered: the request itself has
            # been served or queued (RFC 9110 lets a server ignore Upgrade); then close.
            self.close_after = True
            if self.reading_paused is False:
                self.transport.pause_reading()
                self.reading_paused = True
            if not self.busy:
                self._close()
        except httptools.HttpParserError as exc:
            reason = str(exc) or type(exc).__name__
            self._fail(400, "bad_http", f"malformed HTTP request: {reason}")
        else:
            # Reads that complete nothing (no URL piece, header, body bytes or chunk) while
            # a request is in progress: a header, chunk extension or trailer growing
            # inside the parser. Bounded like the head.
            if self.started:
                if self.progress:
                    self.pending = 0
                else:
                    self.pending += len(data)
                    if self.pending > self.limits.max_header_bytes:
                        if self.in_head:
                            self._fail(
                                431,
                                "header_too_large",
                                f"request line and headers exceed {self.limits.max_header_bytes} bytes",
                            )
                        else:
                            self._fail(
                                400,
                                "bad_http",
                                f"chunk extension or trailer longer than {self.limits.max_header_bytes} bytes",
                            )

    # --- llhttp callbacks (httptools) -----------------------------------------------------
    def on_message_begin(self):
        self.progress = True
        self.server.idle.pop(self, None)  # a request in progress: never reaped
        self.started = self.last or self.loop.time()
        self.in_head = True
        self.headers = {}

    def on_url(self, url: bytes):
        self.progress = True
        self.url = url if self.url is None else self.url + url
        if len(self.url) > MAX_URL:
            raise Reject(414, "uri_too_long", f"request target longer than {MAX_URL} bytes")

    def on_header(self, name: bytes, value: bytes):
        self.progress = True
        self.nheaders += 1
        self.head_bytes += len(name) + len(value) + 4
        limits = self.limits
        if self.nheaders > limits.max_headers:
            raise Reject(431, "too_many_headers", f"more than {limits.max_headers} header fields")
        if self.head_bytes > limits.max_header_bytes:
            raise Reject(431, "header_too_large", f"request line and headers exceed {limits.max_header_bytes} bytes")
        if not self.in_head:
            return  # a trailer field: counted against the limits, never merged into the headers
        key = name.decode("latin-1").lower()
        headers = self.headers
        if key in headers:
            if key in SINGLETON_HEADERS:
                raise Reject(400, "bad_http", f"duplicate {name.decode('latin-1')} header")
            return  # the first copy wins for the others
        headers[key] = value.decode("latin-1")

    def on_headers_complete(self):
        self.progress = True
        self.in_head = False
        parser = self.parser
        version = parser.get_http_version()
        if version != "1.1" and version != "1.0":
            raise Reject(505, "http_version_not_supported", f"HTTP/{version} is not supported; use HTTP/1.1")
        headers = self.headers
        if version == "1.1" and "host" not in headers:
            raise Reject(400, "bad_http", "HTTP/1.1 request without a Host header")
        te = headers.get("transfer-encoding")
        if te is not None:
            if version == "1.0":
                raise Reject(400, "bad_http", "Transfer-Encoding in an HTTP/1.0 request")
            if te.strip().lower() != "chunked":
                raise Reject(501, "not_implemented", f"transfer coding {te[:40]!r} is not supported (only chunked)")
        length = headers.get("content-length")
        limit = self.limits.max_body_bytes
        bound = self.server.body_bound
        if bound is not None and (te is not None or length is not None):
            url = self.url or b""
            path = url.decode("latin-1").partition("?")[0] if url[:1] == b"/" else _target(url)[0]
            own = bound(parser.get_method(), path, headers)
            if own is not None and own[0] < limit:
                limit, self.body_what = own[0], own[1]
                self.body_limit = limit
                if len(own) > 2:
                    self.body_code = own[2]
        if length is not None and int(length) > limit:  # llhttp checked it is digits
            self.server.body_refused(self.body_code)
            raise Reject(
                413,
                self.body_code,
                f"request body of {length} bytes exceeds the limit of {limit} bytes{self.body_what}",
            )
        expect = headers.get("expect")
        if expect is not None:
            if expect.lower() != "100-continue":
                raise Reject(417, "expectation_failed", f"unsupported Expect: {expect[:40]!r}")
            # Only when no reply is pending: a 100 may not overtake an earlier reply.
            if (te is not None or (length is not None and int(length) > 0)) and not self.busy:
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_chunk_header(self):
        self.progress = True
        self.chunks += 1
        if self.chunks > self.limits.max_chunks:
            raise Reject(400, "too_many_chunks", f"chunked body in more than {self.limits.max_chunks} chunks")

    def on_body(self, chunk: bytes):
        self.progress = True
        size = self.body_len + len(chunk)
        limit = self.body_limit
        if size > limit:
            self.server.body_refused(self.body_code)
            raise Reject(413, self.body_code, f"request body exceeds the limit of {limit} bytes{self.body_what}")
        self.body_len = size
        body = self.body
        if body is None:
            self.body = chunk
        elif type(body) is bytes:
            self.body = bytearray(body)
            self.body += chunk
        else:
            body += chunk

    def on_message_complete(self):
        parser = self.parser
        url = self.url or b""
        if url[:1] != b"/":
            path, query = _target(url)
        else:
            target = url.decode("latin-1")
            path, _, query = target.partition("?")
        body = self.body
        if body is None:
            body = b""
        elif type(body) is not bytes:
            body = bytes(body)
        request = Request(
            parser.get_method().decode("latin-1"),
            path,
            query,
            self.headers,
            body,
            parser.should_keep_alive(),
            self,
            self.body_limit,
        )
        self.started = 0.0
        self._reset_message()
        if self.busy:
            queue = self.queue
            if len(queue) >= self.limits.max_pipelined:
                raise Reject(
                    429, "too_many_pipelined", f"more than {self.limits.max_pipelined} pipelined requests waiting"
                )
            queue.append(request)
            self._update_reading()
        else:
            self.busy = True
            self.task = self.loop.create_task(self._run(request))

    # --- replies --------------------------------------------------------------------------
    def _update_reading(self):
        transport = self.transport
        if self.closed or transport is None:
            return
        pause = bool(self.queue) or self.writing_paused or self.close_after
        if pause and not self.reading_paused:
            self.reading_paused = True
            transport.pause_reading()
        elif not pause and self.reading_paused:
            self.reading_paused = False
            transport.resume_reading()

    def _fail(self, status: int, code: str, detail: str) -> None:
        """Answer an HTTP-level error and close; behind pending replies when there are any."""
        if self.closed or self.failed is not None:
            return
        self.server.on_rejected(code)
        self.failed = error_bytes(status, code, detail)
        self.started = 0.0
        self.in_head = False
        if not self.reading_paused and self.transport is not None:
            self.reading_paused = True
            self.transport.pause_reading()
        if not self.busy:
            self._flush_failure()

    def _flush_failure(self):
        """Write the error reply, then close "lingering" (as nginx does): our side sends
        FIN at once, and what the client still sends is read and dropped for up to
        LINGER_S and up to a body and a head's worth, so its kernel does not reset the
        connection (and lose the reply) while it is still sending a body we refused."""
        failed, self.failed = self.failed, None
        if self.closed:
            return
        transport = self.transport
        transport.write(failed)
        self.closed = True
        if self.eof:  # the client has sent everything already: nothing to linger for
            self.closing_since = self.loop.time()
            transport.close()
            return
        self.lingering = True
        self.pending = 0  # now: bytes dropped while lingering (at most a body and a head)
        self.closing_since = self.loop.time()
        try:
            transport.write_eof()
        except (NotImplementedError, OSError, RuntimeError):
            transport.close()
            return
        if self.reading_paused:
            self.reading_paused = False
            transport.resume_reading()

    def _close(self):
        self.closed = True
        self.closing_since = self.loop.time()
        self.transport.close()

    async def _run(self, request: Request):
        handler = self.server.handler
        while True:
            try:
                status, headers, body = await handler(request)
            except asyncio.CancelledError:
                self.cancellable = False
                if self.lost:  # the client went away (connection_lost cancelled the handler)
                    self.busy = False
                    return
                raise
            except Exception:
                log.exception("handler failed on %s %s", request.method, request.path)
                status, headers, body = (
                    500,
                    {"Content-Type": "application/json", "X-Model-Variant": "none"},
                    b'{"error": "internal gateway error", "code": "internal"}',
                )
            if self.closed:
                self.busy = False
                if type(body) is Streamed:
                    await body.finish()
                return
            queue = self.queue
            close = (
                not request.keep_alive
                or self.server.stopping
                or (not queue and (self.close_after or (self.eof and self.failed is None)))
            )
            if type(body) is Streamed:
                if not await self._stream(status, headers, body, close):
                    self.busy = False
                    if not self.closed:
                        self._close()
                    return
            else:
                self.cancellable = False
                self.transport.write(encode_response(status, headers, b"" if request.method == "HEAD" else body, close))
            if close:
                self.busy = False
                self.failed = None
                self._close()
                return
            if self.writing_paused and not self.closed:  # the client is not reading: wait for it
                self.drain = self.loop.create_future()
                await self.drain
                self.drain = None
                if self.closed:
                    self.busy = False
                    return
            if queue:
                request = queue.popleft()
                self._update_reading()
                continue
            self._replied()
            return

    def _replied(self) -> None:
        """Every reply is out: send the error waiting behind them, or read again (idle)."""
        self.busy = False
        if self.failed is not None:
            self._flush_failure()
            return
        self._update_reading()
        if not self.started and not self.closed:
            self.server.idle[self] = None  # the newest idle: reaped last

    async def _stream(self, status: int, headers: dict, body: Streamed, close: bool) -> bool:
        """Write a chunked reply as its chunks come, waiting for the client to drain its
        buffer before asking for the next one. True when the reply went out whole."""
        transport = self.transport
        head = "".join([f"{k}: {v}\r\n" for k, v in headers.items()])
        transport.write(
            b"HTTP/1.1 %d %s\r\nTransfer-Encoding: chunked\r\n%s%s\r\n"
            % (
                status,
                REASONS.get(status, b"Unknown"),
                head.encode("latin-1"),
                b"Connection: close\r\n" if close else b"",
            )
        )
        chunks = body.chunks
        whole = False
        try:
            async for piece in chunks:
                if self.closed:
                    break
                if piece:
                    transport.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                if self.writing_paused and not self.closed:  # a slow reader: no next chunk until it drains
                    body.drains += 1
                    self.drain = self.loop.create_future()
                    await self.drain
                    self.drain = None
                    if self.closed:
                        break
            else:
                if not self.closed:
                    transport.write(b"0\r\n\r\n")
                    whole = True
        except asyncio.CancelledError:
            if not self.lost:
                raise
        except Exception:
            log.exception("streamed reply failed")
            if not self.closed:
                self.closed = True
                transport.abort()  # a reply cut in the middle must not look whole to the client
        finally:
            self.cancellable = False
            await body.finish()
        return whole


def _target(url: bytes) -> tuple[str, str]:
    """Path and query of an absolute-form (or asterisk-form) request target."""
    if url == b"*":
        return "*", ""
    try:
        parsed = httptools.parse_url(url)
    except httptools.HttpParserInvalidURLError:
        raise Reject(400, "bad_http", "unparseable request target") from None
    path = (parsed.path or b"/").decode("latin-1")
    return path, (parsed.query or b"").decode("latin-1")


def _uncounted(*_) -> None:
    pass


class HttpServer:
    """`body_bound(method: bytes, path: str, headers) -> (limit, why[, code]) | None`, when
    given, is asked once a request's head is in and before its body is read: the most bytes
    this route can need (`why`, appended to the 413's message, says whose rule it is; `code`,
    the 413's code, `body_too_large` unless given), or None for max_body_bytes;
    `on_body_refused(code)` is told of each body refused past its bound (the route's own
    counters). `on_rejected(code)` is told of each connection answered with an HTTP-level error
    and `on_reaped()` of each idle connection closed to make room (the process counts them; this
    server names no metric). `client_keys` (peers.ClientKeys) says which client a connection
    counts for."""

    def __init__(
        self,
        handler,
        *,
        limits: Limits | None = None,
        max_body: int | None = None,
        idle_timeout: float | None = None,
        body_bound=None,
        on_body_refused=None,
        on_rejected=None,
        on_reaped=None,
        client_keys: ClientKeys | None = None,
    ):
        self.handler = handler
        self.limits = limits or Limits()
        if max_body is not None:
            self.limits.max_body_bytes = max_body
        if idle_timeout is not None:
            self.limits.idle_timeout_s = idle_timeout
        self.body_bound = body_bound
        self.on_body_refused = on_body_refused
        self.on_rejected = on_rejected or _uncounted
        self.on_reaped = on_reaped or _uncounted
        self.client_keys = client_keys or ClientKeys()
        self.connections: set[HttpProtocol] = set()
        self.per_client: dict[str, int] = {}  # client key -> its open connections
        self.idle: dict[HttpProtocol, None] = {}  # idle connections, oldest first (an ordered set)
        self.loop = None
        self.server = None
        self.sweeper = None
        self.stopping = False

    def body_refused(self, code: str) -> None:
        if self.on_body_refused is not None:
            self.on_body_refused(code)

    @property
    def max_body(self) -> int:
        return self.limits.max_body_bytes

    def reap_idle(self) -> bool:
        """Close the oldest idle keep-alive connection (never one with a request in
        progress or a reply pending); False when none is idle."""
        idle = self.idle
        while idle:
            conn = next(iter(idle))
            del idle[conn]
            if conn.busy or conn.started or conn.closed or conn.transport is None:
                continue
            conn._close()
            conn._release()
            self.on_reaped()
            return True
        return False

    async def start(self, host: str, port: int, backlog: int = 2048, *, reuse_port: bool = False, sock=None):
        """Listen on host:port, or on `sock` (a listening socket a supervisor made, gateway/process/workers.py)."""
        self.loop = asyncio.get_running_loop()
        if sock is not None:
            self.server = await self.loop.create_server(lambda: HttpProtocol(self), sock=sock, backlog=backlog)
        else:
            self.server = await self.loop.create_server(
                lambda: HttpProtocol(self), host, port, reuse_address=True, reuse_port=reuse_port, backlog=backlog
            )
        self.sweeper = self.loop.create_task(self._sweep())
        return self.server

    def sweep_once(self) -> None:
        """Enforce the time limits: 408 for a request not received whole in time, close
        idle keep-alive connections, abort connections whose client stopped reading
        (replies waiting) or that did not finish closing."""
        now = self.loop.time()
        limits = self.limits
        for conn in list(self.connections):
            if conn.transport is None:
                continue
            if conn.closed:
                if conn.lingering and now - conn.closing_since > LINGER_S:
                    conn.lingering = False
                    conn.transport.close()
                elif conn.closing_since and now - conn.closing_since > limits.idle_timeout_s:
                    conn.transport.abort()
            elif conn.writing_paused and now - conn.paused_since > limits.idle_timeout_s:
                conn.closed = True
                conn.transport.abort()
            elif conn.started and now - conn.started > limits.receive_timeout_s:
                conn._fail(
                    408, "request_timeout", f"the request did not arrive whole within {limits.receive_timeout_s:g} s"
                )
            elif not conn.busy and not conn.started and now - conn.last > limits.idle_timeout_s:
                conn._close()

    async def _sweep(self):
        interval = max(0.05, min(0.5, self.limits.receive_timeout_s / 4, self.limits.idle_timeout_s / 4))
        while True:
            await asyncio.sleep(interval)
            try:
                self.sweep_once()
            except Exception:  # the sweeper must outlive any one connection's surprise
                log.exception("connection sweep failed")

    async def close(self, grace: float = 5.0):
        """Stop accepting, let replies in progress finish (up to `grace` seconds; every
        reply now goes out with Connection: close), then close the rest. A keep-alive
        connection idle for DRAIN_IDLE_S is closed at once; one its client used within
        that time stays open until its next request is answered (with Connection: close):
        closing it under a client that is sending is how a restart fails requests."""
        self.stopping = True
        if self.server is not None:
            self.server.close()
        deadline = self.loop.time() + grace
        while self.connections and self.loop.time() < deadline:
            now = self.loop.time()
            for conn in list(self.connections):
                if not conn.busy and not conn.started and not conn.closed and conn.transport is not None:
                    if now - conn.last >= DRAIN_IDLE_S or grace == 0:
                        conn._close()
            if not any(c.busy or not c.closed for c in self.connections):
                break
            await asyncio.sleep(0.02)
        if self.sweeper is not None:
            self.sweeper.cancel()
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.closed = True
                conn.transport.abort() if conn.busy else conn.transport.close()
