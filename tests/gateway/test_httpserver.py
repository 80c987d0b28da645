"""The gateway's HTTP server (gateway/httpserver.py) in this process, on a real socket,
with a real client socket: the mechanisms the end-to-end tests only see from outside —
write backpressure (a client that does not read stops being read), replies in request
order, an error behind pending replies, the pipelining cap, 100-continue never ahead of
an earlier reply. No Triton: the handler is a plain coroutine."""

from __future__ import annotations

import asyncio

import httptools
import pytest
import uvloop

from gateway.httpserver import HttpServer, Limits


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
def test_connection_limit(limit):
    async def handler(req):
        return 200, {}, b""

    async def scenario():
        server, port = await start(handler, max_connections=limit)
        clients = [await asyncio.open_connection("127.0.0.1", port) for _ in range(limit)]
        await asyncio.sleep(0.05)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        replies = await read_all(reader, 1)
        assert replies[0]["status"] == 503 and b"overloaded" in replies[0]["body"]
        for _, w in clients + [(reader, writer)]:
            w.close()
        await server.close(0.5)

    run(scenario())
