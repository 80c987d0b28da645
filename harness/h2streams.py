"""Half-open gRPC streams: HTTP/2 connections (framed by `h2`, a maintained HTTP/2 library)
that open streams with a HEADERS frame for a gRPC method and never send the message, the
way the gateway's RPC slots were once all taken — or send one message and then nothing more
(`message`: a streaming call held open after its first message, the request side left open
unless `end_stream`). Each connection runs in one asyncio loop
on its own thread; what every stream ended with (its grpc-status, a reset, the connection
closing under it) is counted."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions

METHOD = "/inference.GRPCInferenceService/ModelInfer"


class HalfOpenStreams(threading.Thread):
    """`connections` HTTP/2 connections from `source`, each opening `streams` HEADERS-only
    streams (or as many as the server's SETTINGS allow) and holding them.

    `outcomes`: {"grpc-status <n>": streams that ended with that status, "reset": streams the
    server reset, "connection_closed": streams open when the server closed their connection,
    "refused_connection": connections that could not be opened}; `opened` streams sent;
    `ended_at`: when each stream ended, seconds after its HEADERS."""

    def __init__(
        self,
        port: int,
        source: str,
        connections: int,
        streams: int,
        *,
        hold_s: float = 60.0,
        method: str = METHOD,
        message: bytes | None = None,
        end_stream: bool = False,
    ):
        super().__init__(daemon=True)
        self.port, self.source, self.connections, self.streams, self.hold_s = port, source, connections, streams, hold_s
        self.method, self.end_stream = method, end_stream
        self.data = None if message is None else b"\0" + len(message).to_bytes(4, "big") + message  # gRPC framing
        self.outcomes: dict[str, int] = {}
        self.opened = 0
        self.ended_at: list[float] = []
        self.open_connections = 0
        self.set_up = threading.Event()  # every connection has sent its streams (or failed)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopping: asyncio.Event | None = None
        self._ready = 0

    def count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def run(self) -> None:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)  # the abuser's CPU is not the gateway's
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self._main())
        self.loop.close()

    def finish(self) -> None:
        if self.loop is not None and self.stopping is not None:
            self.loop.call_soon_threadsafe(self.stopping.set)
        self.join(30)

    async def _main(self) -> None:
        self.stopping = asyncio.Event()
        tasks = [asyncio.create_task(self._connection()) for _ in range(self.connections)]
        try:
            await asyncio.wait_for(self.stopping.wait(), self.hold_s)
        except TimeoutError:
            pass
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _one_ready(self) -> None:
        self._ready += 1
        if self._ready >= self.connections:
            self.set_up.set()

    async def _connection(self) -> None:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", self.port, local_addr=(self.source, 0))
        except OSError:
            self.count("refused_connection")
            self._one_ready()
            return
        self.open_connections += 1
        conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        writer.write(conn.data_to_send())
        started: dict[int, float] = {}
        ready = False
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                try:
                    events = conn.receive_data(data)
                except h2.exceptions.ProtocolError:
                    break
                for event in events:
                    if isinstance(event, h2.events.RemoteSettingsChanged) and not ready:
                        ready = True  # the server's stream limit is known: open as many as it allows
                        self._open_streams(conn, started)
                        self._one_ready()
                    self._event(event, started)
                writer.write(conn.data_to_send())
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for _ in started:
                self.count("connection_closed")
            self.open_connections -= 1
            if not ready:
                self._one_ready()
            writer.close()

    def _open_streams(self, conn, started: dict) -> None:
        allowed = min(self.streams, conn.remote_settings.max_concurrent_streams)
        authority = f"127.0.0.1:{self.port}"
        for _ in range(allowed):
            stream_id = conn.get_next_available_stream_id()
            headers = [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", self.method),
                (":authority", authority),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            ]
            conn.send_headers(stream_id, headers, end_stream=False)  # and never the message, or one
            if self.data is not None:
                conn.send_data(stream_id, self.data, end_stream=self.end_stream)
            started[stream_id] = time.monotonic()
            self.opened += 1

    def _event(self, event, started: dict) -> None:
        if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
            status = dict(event.headers).get(b"grpc-status")
            if status is not None and event.stream_id in started:
                self.ended_at.append(time.monotonic() - started.pop(event.stream_id))
                self.count(f"grpc-status {status.decode()}")
        elif isinstance(event, h2.events.StreamReset) and event.stream_id in started:
            self.ended_at.append(time.monotonic() - started.pop(event.stream_id))
            self.count("reset")


def ping_flood(port: int, source: str, *, pings: int, interval_s: float, timeout_s: float = 10.0) -> int | None:
    """Send `pings` HTTP/2 PINGs `interval_s` apart on an idle connection; the error code of
    the server's GOAWAY, or None if it sent none."""
    import socket

    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s, source_address=(source, 0))
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    try:
        for i in range(pings):
            conn.ping(i.to_bytes(8, "big"))
            sock.sendall(conn.data_to_send())
            sock.settimeout(interval_s)
            end = time.monotonic() + interval_s
            while time.monotonic() < end:
                try:
                    data = sock.recv(65536)
                except TimeoutError:
                    break
                if not data:
                    return None
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.ConnectionTerminated):
                        return event.error_code
                sock.sendall(conn.data_to_send())
    except (OSError, h2.exceptions.ProtocolError):
        return None
    finally:
        sock.close()
    return None
