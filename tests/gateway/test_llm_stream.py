"""Streamed replies of the gateway's HTTP server (httpserver.Streamed), in this process on real
sockets: chunked framing a real parser (llhttp) reads, a slow reader bounds what the producer
makes (backpressure, not a growing buffer), and a client that leaves cancels the handler and
closes the producer (its `done` runs once)."""

from __future__ import annotations

import asyncio
import socket

import httptools
import uvloop

from gateway.wire.httpserver import HttpServer, Limits, Streamed

REQUEST = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"


class Reply:
    def __init__(self):
        self.parser = httptools.HttpResponseParser(self)
        self.body = b""
        self.complete = False

    def on_body(self, body):
        self.body += body

    def on_message_complete(self):
        self.complete = True


async def serve(handler):
    server = HttpServer(handler, limits=Limits(idle_timeout_s=30))
    listener = await server.start("127.0.0.1", 0)
    return server, listener.sockets[0].getsockname()[1]


def test_a_stream_arrives_as_chunks_and_the_connection_stays_usable():
    done = []

    async def handler(request):
        async def events():
            for i in range(3):
                yield b"data: %d\n\n" % i
                await asyncio.sleep(0)

        return 200, {"Content-Type": "text/event-stream"}, Streamed(events(), lambda: done.append(1))

    async def main():
        server, port = await serve(handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(2):  # two streams on one keep-alive connection
            writer.write(REQUEST)
            reply = Reply()
            while not reply.complete:
                reply.parser.feed_data(await asyncio.wait_for(reader.read(65536), 5))
            assert reply.body == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
        writer.close()
        await server.close(0)

    uvloop.run(main())
    assert done == [1, 1]


def test_a_slow_reader_bounds_the_producer_and_leaving_cancels_it():
    made = []
    state = {"done": 0, "cancelled": False}
    chunk = b"x" * 65536

    async def handler(request):
        request.conn.cancellable = True

        async def events():
            try:
                while True:
                    made.append(1)
                    yield chunk
                    await asyncio.sleep(0)
            except (asyncio.CancelledError, GeneratorExit):
                state["cancelled"] = True
                raise

        return 200, {}, Streamed(events(), lambda: state.update(done=state["done"] + 1))

    async def main():
        server, port = await serve(handler)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", port))
        sock.sendall(REQUEST)
        await asyncio.sleep(1.0)  # the client reads nothing
        produced = len(made)
        assert produced * len(chunk) < 32 << 20  # socket buffers + one high-water mark, not what 1 s could make
        await asyncio.sleep(0.3)
        assert len(made) == produced  # paused, not producing
        sock.close()  # the client leaves
        for _ in range(100):
            if state["done"]:
                break
            await asyncio.sleep(0.02)
        await server.close(0)

    uvloop.run(main())
    assert state == {"done": 1, "cancelled": True}
