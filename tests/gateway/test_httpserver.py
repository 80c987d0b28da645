"""The gateway's HTTP server (gateway/wire/httpserver.py) in this process, on a real socket,
with a real client socket: the mechanisms the end-to-end tests only see from outside —
write backpressure (a client that does not read stops being read), replies in request
order, an error behind pending replies, the pipelining cap, 100-continue never ahead of
an earlier reply. No Triton: the handler is a plain coroutine."""

from __future__ import annotations

import asyncio

import httptools
import pytest
import uvloop

from gateway.wire.httpserver import HttpServer, Limits
from gateway.wire.peers import ClientKeys


def run(coro):
    return uvloop.run(coro)


class Replies:
    def __init__(self):
        self.items = []
        self.parser = httptools.HttpResponseParser(self)
        self.current = None

    def on_message_begin(self):
        self.current = {"headers": {}, "body": b""}

    def on_header(self, name, value):
        self.current["headers"][name.decode().lower()] = value.decode()

    def on_headers_complete(self):
        self.current["status"] = self.parser.get_status_code()

    def on_body(self, body):
        self.current["body"] += body

    def on_message_complete(self):
        self.items.append(self.current)


async def start(handler, **limits):
    server = HttpServer(handler, limits=Limits(**limits))
    listener = await server.start("127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    return server, port


async def read_all(reader, n, timeout=10.0):
    replies = Replies()
    async with asyncio.timeout(timeout):
        while len(replies.items) < n:
            data = await reader.read(65536)
            if not data:
                break
            replies.parser.feed_data(data)
    return replies.items


def request(seq: int, path: str = "/x", extra: bytes = b"") -> bytes:
    return b"GET %s HTTP/1.1\r\nHost: t\r\nX-Seq: %d\r\n%s\r\n" % (path.encode(), seq, extra)


def test_a_client_that_does_not_read_stops_being_read_then_gets_everything_in_order():
    big = b"z" * (256 << 10)
    handled = []

    async def handler(req):
        handled.append(int(req.headers["x-seq"]))
        return 200, {"X-Seq": req.headers["x-seq"]}, big

    async def scenario():
        server, port = await start(handler, max_pipelined=1000)  # the cap is tested on its own below
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for batch in range(20):  # 200 requests, 10 per write, replies of 256 KiB: 50 MB, more than any socket buffers
            writer.write(b"".join(request(batch * 10 + i) for i in range(10)))
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)
        conn = next(iter(server.connections))
        assert conn.writing_paused and conn.reading_paused  # backpressure: nothing more is read
        stalled = len(handled)
        assert stalled < 200
        buffered = conn.transport.get_write_buffer_size()
        assert buffered < 4 * len(big), buffered  # the write buffer stays near its high-water mark
        await asyncio.sleep(0.3)
        assert len(handled) == stalled  # and no more work is done for this client
        replies = await read_all(reader, 200, timeout=30)
        assert [int(r["headers"].get("x-seq", -1)) for r in replies] == list(range(200)), [
            (r["status"], r["body"][:100]) for r in replies if "x-seq" not in r["headers"]
        ]
        assert handled == list(range(200))
        writer.close()
        await server.close(0.5)

    run(scenario())


def test_an_error_waits_behind_pending_replies_then_closes():
    async def handler(req):
        await asyncio.sleep(0.2 if req.headers["x-seq"] == "1" else 0)
        return 200, {"X-Seq": req.headers["x-seq"]}, b"ok"

    async def scenario():
        server, port = await start(handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            request(1) + request(2) + b"GET /bad HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"
        )
        replies = await read_all(reader, 10)
        assert [r["status"] for r in replies] == [200, 200, 400]
        assert replies[-1]["headers"]["connection"] == "close" and b"Duplicate Content-Length" in replies[-1]["body"]
        assert await reader.read() == b""
        writer.close()
        await server.close(0.5)

    run(scenario())


def test_pipelining_cap_answers_the_queued_then_429_and_close():
    async def handler(req):
        await asyncio.sleep(0.05)
        return 200, {"X-Seq": req.headers["x-seq"]}, b"ok"

    async def scenario():
        server, port = await start(handler, max_pipelined=3)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"".join(request(i) for i in range(10)))  # one write: one read
        replies = await read_all(reader, 20)
        assert [r["status"] for r in replies] == [200, 200, 200, 200, 429]
        assert [r["headers"].get("x-seq") for r in replies[:4]] == ["0", "1", "2", "3"]
        writer.close()
        await server.close(0.5)

    run(scenario())


def test_100_continue_is_sent_only_when_no_reply_is_pending():
    async def handler(req):
        await asyncio.sleep(0.2 if req.method == "GET" else 0)
        return 200, {}, req.body

    async def scenario():
        server, port = await start(handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /a HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
        assert await asyncio.wait_for(reader.readline(), 2) == b"HTTP/1.1 100 Continue\r\n"
        assert await reader.readline() == b"\r\n"
        writer.write(b"hi")
        assert (await read_all(reader, 1))[0]["body"] == b"hi"
        # behind a pending reply no 100 is sent: the next bytes are the GET's final reply
        writer.write(request(1) + b"POST /a HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
        await asyncio.sleep(0.05)
        writer.write(b"yo")
        replies = await read_all(reader, 2)
        assert [(r["status"], r["body"]) for r in replies] == [(200, b""), (200, b"yo")]
        writer.close()
        await server.close(0.5)

    run(scenario())


@pytest.mark.parametrize("limit", [1, 3])
def test_connection_limit_refuses_only_when_none_is_idle(limit):
    """At the cap with every connection in the middle of a request, the next is a 503."""

    async def handler(req):
        return 200, {}, b""

    async def scenario():
        server, port = await start(handler, max_connections=limit)
        clients = [await asyncio.open_connection("127.0.0.1", port) for _ in range(limit)]
        for _, w in clients:
            w.write(b"GET /a HTTP/1.1\r\nHost: t\r\n")  # a head in progress: active, never reaped
        await asyncio.sleep(0.05)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        replies = await read_all(reader, 1)
        assert replies[0]["status"] == 503 and b"overloaded" in replies[0]["body"]
        for _, w in clients + [(reader, writer)]:
            w.close()
        await server.close(0.5)

    run(scenario())


def test_near_the_cap_the_oldest_idle_connection_makes_room():
    """From 7/8 of the cap on, a new connection closes the oldest idle one (not a newer idle
    one, never one with a request in progress), and the newcomer is served."""

    async def handler(req):
        return 200, {}, b"ok"

    async def scenario():
        server, port = await start(handler, max_connections=8)
        oldest = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.sleep(0.02)
        busy = await asyncio.open_connection("127.0.0.1", port)
        busy[1].write(b"GET /a HTTP/1.1\r\nHost: t\r\n")  # mid-request
        others = [await asyncio.open_connection("127.0.0.1", port) for _ in range(5)]
        await asyncio.sleep(0.05)
        assert len(server.connections) == 7  # 7/8 of 8: the next one reaps
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request(0))
        assert (await read_all(reader, 1))[0]["status"] == 200
        assert await asyncio.wait_for(oldest[0].read(), 2) == b""  # closed, without a reply
        busy[1].write(b"\r\n")
        assert (await read_all(busy[0], 1))[0]["status"] == 200
        for r, w in others:
            w.write(request(1))
            assert (await read_all(r, 1))[0]["status"] == 200
        for _, w in [oldest, busy, *others, (reader, writer)]:
            w.close()
        await server.close(0.5)

    run(scenario())


def test_connections_per_client_address():
    """One client address holds at most max_connections_per_client: the next is a 429 naming
    the limit, while another address still connects and is served."""

    async def handler(req):
        return 200, {}, b"ok"

    async def scenario():
        server, port = await start(handler, max_connections_per_client=3)
        hoard = [await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0)) for _ in range(3)]
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0))
        refused = (await read_all(reader, 1))[0]
        assert refused["status"] == 429 and refused["headers"]["retry-after"] == "1"
        assert b"too_many_connections" in refused["body"] and b"the limit is 3" in refused["body"]
        other = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.3", 0))
        other[1].write(request(0))
        assert (await read_all(other[0], 1))[0]["status"] == 200
        hoard[0][1].close()  # one given back: the address may open one again
        await asyncio.sleep(0.05)
        again = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0))
        again[1].write(request(2))
        assert (await read_all(again[0], 1))[0]["status"] == 200
        assert server.per_client == {"127.0.0.2": 3, "127.0.0.3": 1}
        for _, w in [*hoard[1:], other, again, (reader, writer)]:
            w.close()
        await asyncio.sleep(0.05)
        assert server.per_client == {}
        await server.close(0.5)

    run(scenario())


def test_body_bound_hook_refuses_before_the_body():
    """The route's own bound from the hook: a Content-Length past it is a 413 naming the limit
    before a byte of the body is sent; a chunked body is cut as soon as it passes the bound;
    other routes keep the server's limit."""
    seen = []

    async def handler(req):
        seen.append((req.path, len(req.body), req.body_limit))
        return 200, {}, b"ok"

    def bound(method, path, headers):
        return (100, " (the most /small can need)") if path == "/small" else None

    async def scenario():
        server = HttpServer(handler, limits=Limits(max_body_bytes=10_000), body_bound=bound)
        listener = await server.start("127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /small?x=1 HTTP/1.1\r\nHost: t\r\nContent-Length: 7000000\r\n\r\n")
        reply = (await read_all(reader, 1))[0]
        assert reply["status"] == 413
        assert b"7000000 bytes exceeds the limit of 100 bytes (the most /small can need)" in reply["body"]
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /small HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        writer.write(b"40\r\n" + b"x" * 64 + b"\r\n" + b"40\r\n" + b"x" * 64 + b"\r\n")
        reply = (await read_all(reader, 1))[0]
        assert reply["status"] == 413 and b"limit of 100 bytes (the most /small can need)" in reply["body"]
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /small HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n" + b"y" * 100)
        writer.write(b"POST /large HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n" + b"z" * 5000)
        assert [r["status"] for r in await read_all(reader, 2)] == [200, 200]
        assert seen == [("/small", 100, 100), ("/large", 5000, 10_000)]
        writer.close()
        await server.close(0.5)

    run(scenario())


def test_an_exempt_network_is_not_capped():
    """A proxy an operator exempts (GATEWAY_CLIENT_CAP_EXEMPT) carries many clients: no per-client cap."""

    async def handler(req):
        return 200, {}, b"ok"

    async def scenario():
        server = HttpServer(
            handler, limits=Limits(max_connections_per_client=2), client_keys=ClientKeys(("127.0.0.2/32",))
        )
        listener = await server.start("127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        conns = [await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0)) for _ in range(5)]
        for i, (r, w) in enumerate(conns):
            w.write(request(i))
            assert (await read_all(r, 1))[0]["status"] == 200
        assert server.per_client == {}
        for _, w in conns:
            w.close()
        await server.close(0.5)

    run(scenario())
