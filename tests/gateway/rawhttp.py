"""Raw HTTP exchanges for the hostile-request tests: send exact bytes (in pieces, with
pauses, half-closing or not) and read back every reply the server sends before it
closes or goes quiet, parsed with llhttp's response parser (httptools)."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field

import httptools


@dataclass
class Reply:
    status: int
    headers: dict = field(default_factory=dict)  # lower-case names, last wins
    body: bytes = b""


@dataclass
class Exchange:
    replies: list[Reply]
    closed: bool  # the server closed the connection
    elapsed: float
    garbage: bytes = b""  # bytes that did not parse as HTTP replies (must stay empty)

    @property
    def statuses(self) -> list[int]:
        return [r.status for r in self.replies]


class _Collector:
    def __init__(self):
        self.replies: list[Reply] = []
        self.current: Reply | None = None
        self.parser = httptools.HttpResponseParser(self)

    def on_message_begin(self):
        self.current = Reply(0)

    def on_header(self, name, value):
        self.current.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self):
        self.current.status = self.parser.get_status_code()

    def on_body(self, body):
        self.current.body += body

    def on_message_complete(self):
        if self.current.status >= 200:  # interim 1xx replies are not collected
            self.replies.append(self.current)
        self.current = None


def exchange(
    port: int,
    data: bytes | list,
    *,
    half_close: bool = True,
    timeout: float = 5.0,
    pause: float = 0.0,
    expect: int | None = None,
) -> Exchange:
    """Send `data` (bytes, or a list of pieces sent `pause` seconds apart), optionally
    half-close, and read until the server closes, `expect` replies have come, or nothing
    arrives for `timeout` seconds."""
    pieces = data if isinstance(data, list) else [data]
    collector = _Collector()
    garbage = b""
    closed = False
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            for i, piece in enumerate(pieces):
                if i and pause:
                    time.sleep(pause)
                sock.sendall(piece)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        except OSError:  # the server may close while we are still sending (a refused request)
            pass
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            except OSError:  # reset by the server: closed
                closed = True
                break
            if not chunk:
                closed = True
                break
            try:
                collector.parser.feed_data(chunk)
            except httptools.HttpParserError:
                garbage += chunk
            if expect is not None and len(collector.replies) >= expect:
                break
    return Exchange(collector.replies, closed, time.monotonic() - t0, garbage)
