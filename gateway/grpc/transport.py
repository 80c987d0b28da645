"""What one gRPC client may hold of a gateway worker: its connections, its streams and how
long a stream may wait for its message, so half-open streams cost only their connection.

From grpcio's own options (`server_options`), each because:
  grpc.max_concurrent_streams           streams one HTTP/2 connection may have open
                                         (GATEWAY_GRPC_MAX_STREAMS): a connection holds at most that;
  grpc.max_connection_idle_ms            a connection with no call for GATEWAY_IDLE_TIMEOUT_S is sent
                                         GOAWAY (idle ones do not pile up);
  grpc.max_connection_age_ms / _grace_ms a connection is sent GOAWAY once GATEWAY_GRPC_MAX_CONNECTION_AGE_S
                                         old (with grpcio's +-10% jitter) and closed _GRACE_S later, calls in
                                         progress or not: nothing holds a connection for ever;
  grpc.keepalive_time_ms / _timeout_ms   the server pings a connection silent for GATEWAY_GRPC_KEEPALIVE_S
                                         and closes it if the ping is not answered in 20 s: a peer that
                                         vanished (no FIN) does not keep its connection and streams;
  grpc.keepalive_permit_without_calls,   keepalive enforcement: a client may ping while idle, but not
  grpc.http2.min_ping_interval_without_data_ms, more often than GATEWAY_GRPC_MIN_PING_INTERVAL_S; after
  grpc.http2.max_ping_strikes            2 such pings the connection is sent GOAWAY (ENHANCE_YOUR_CALM):
                                         pings cannot be used to keep the server busy;
  grpc.server.max_pending_requests,      calls grpc core holds until the application takes them: past
  grpc.server.max_pending_requests_hard_limit  the defaults (1,000 / 3,000) core cancels new calls from
                                         anyone, so one client's burst of HEADERS (80 x 128 streams)
                                         cancelled other clients' calls; raised, the burst waits in
                                         line and `guard` answers it for its own client;
  maximum_concurrent_rpcs                RPCs in progress in the worker (GATEWAY_GRPC_MAX_RPCS).

What grpcio has no option for, done here:
  - a deadline for a call's first message: grpcio hands a call to the application at its
    HEADERS and counts it in maximum_concurrent_rpcs from then on, and a unary handler waits
    for the message with no time limit, so HEADERS-only streams held every RPC slot of the
    worker. Every unary method is served as client-streaming (the same bytes on the wire)
    by `guard`, which reads the one message within GATEWAY_GRPC_FIRST_MESSAGE_TIMEOUT_S, else
    DEADLINE_EXCEEDED;
  - per-client caps (grpc/grpc#12737: gRPC core has a global connection quota only, which
    refuses everyone alike once a hoarder fills it): `guard` counts each client address's
    calls in progress (GATEWAY_GRPC_MAX_CALLS_PER_CLIENT; past it RESOURCE_EXHAUSTED naming
    the limit, with retry-after), and `ConnectionCap` closes a client's newest connections past
    GATEWAY_GRPC_MAX_CONNECTIONS_PER_CLIENT: it reads the worker's own sockets on the gRPC
    port from /proc (only once the worker holds more descriptors than the cap) and shuts the
    extra ones down (shutdown(2) on a duplicate of the descriptor: grpc core sees the peer
    go and closes its own), once a second. Such a client sees UNAVAILABLE on those
    connections, as an HTTP client past its cap gets 429 and a close.

A client is its address (an IPv6 /64; peers.py), per worker, like GATEWAY_MAX_CONNECTIONS.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time

import grpc

from ..peers import ClientKeys

log = logging.getLogger("gateway.grpc")
SWEEP_S = 1.0
KEEPALIVE_TIMEOUT_MS = 20_000
MAX_PING_STRIKES = 2
ESTABLISHED = "01"
PENDING_SOFT, PENDING_HARD = 50_000, 100_000  # calls waiting for the application (see above)


def server_options(settings) -> list[tuple[str, int]]:
    return [
        ("grpc.so_reuseport", 1),
        ("grpc.max_receive_message_length", settings.max_body_bytes),
        ("grpc.max_send_message_length", settings.max_body_bytes),
        ("grpc.max_metadata_size", settings.max_header_bytes),
        ("grpc.max_concurrent_streams", settings.grpc_max_streams),
        ("grpc.max_connection_idle_ms", int(settings.idle_timeout_s * 1000)),
        ("grpc.max_connection_age_ms", int(settings.grpc_max_connection_age_s * 1000)),
        ("grpc.max_connection_age_grace_ms", int(settings.grpc_connection_age_grace_s * 1000)),
        ("grpc.keepalive_time_ms", int(settings.grpc_keepalive_s * 1000)),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", int(settings.grpc_min_ping_interval_s * 1000)),
        ("grpc.http2.max_ping_strikes", MAX_PING_STRIKES),
        ("grpc.server.max_pending_requests", PENDING_SOFT),
        ("grpc.server.max_pending_requests_hard_limit", PENDING_HARD),
    ]


def peer_host(peer: str) -> str | None:
    """The address of a grpc peer string: `ipv4:1.2.3.4:5`, `ipv6:[::1]:5`; None for others (unix:)."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    if kind == "ipv6":
        return rest.rpartition(":")[0].strip("[]")
    return None


class CallCaps:
    """Calls in progress per client address, and the first-message deadline."""

    def __init__(self, settings, client_keys: ClientKeys, on_refused=None):
        self.max_calls = settings.grpc_max_calls_per_client
        self.first_message_s = settings.grpc_first_message_timeout_s
        self.client_keys = client_keys
        self.calls: dict[str, int] = {}
        self.on_refused = on_refused  # (code) -> None: counted in the gateway's metrics

    def guard(self, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """`handler` (unary-unary) served as client-streaming behind the caps."""
        unary = handler.unary_unary
        caps = self

        async def guarded(requests, context):
            client = caps.client_keys.key(peer_host(context.peer()))
            if client is not None:
                held = caps.calls.get(client, 0)
                if held >= caps.max_calls:
                    caps._refused("too_many_calls")
                    await context.abort(
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"this client address ({client}) has {held} gRPC calls in progress on this gateway "
                        f"worker; the limit is {caps.max_calls}",
                        (("retry-after", "1"), ("grpc-retry-pushback-ms", "1000")),
                    )
                caps.calls[client] = held + 1
            try:
                try:
                    async with asyncio.timeout(caps.first_message_s):
                        request = await context.read()
                except TimeoutError:
                    caps._refused("first_message_timeout")
                    await context.abort(
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                        f"no request message within {caps.first_message_s:g} s of the call's start",
                    )
                if request is grpc.aio.EOF:
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the call ended without a request message")
                return await unary(request, context)
            finally:
                if client is not None:
                    left = caps.calls[client] - 1
                    if left:
                        caps.calls[client] = left
                    else:
                        del caps.calls[client]

        return grpc.stream_unary_rpc_method_handler(
            guarded,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _refused(self, code: str) -> None:
        if self.on_refused is not None:
            self.on_refused(code)


class ConnectionCap:
    """Closes a client's newest gRPC connections past the cap (this worker's own sockets)."""

    def __init__(self, port: int, cap: int, client_keys: ClientKeys, on_closed=None):
        self.port = port
        self.cap = cap
        self.client_keys = client_keys
        self.first_seen: dict[int, float] = {}  # socket inode -> when a sweep first saw it
        self.on_closed = on_closed  # (count) -> None
        self.task: asyncio.Task | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_S)
            try:
                self.sweep()
            except Exception:  # the cap must outlive any surprise from /proc
                log.exception("gRPC connection sweep failed")

    def sweep(self) -> int:
        """Close what is past the cap; the number closed."""
        fds = os.listdir("/proc/self/fd")
        if len(fds) <= self.cap:  # no client can be past the cap: nothing to read
            self.first_seen.clear()
            return 0
        remotes = self._connections()
        if not remotes:
            return 0
        mine = {}  # inode -> fd, of this worker's sockets on the gRPC port
        for fd in fds:
            try:
                link = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inode = int(link[8:-1])
                if inode in remotes:
                    mine[inode] = int(fd)
        now = time.monotonic()
        seen = self.first_seen
        for inode in list(seen):
            if inode not in mine:
                del seen[inode]
        by_client: dict[str, list] = {}
        for inode, fd in mine.items():
            client = self.client_keys.key(remotes[inode])
            if client is not None:
                by_client.setdefault(client, []).append((seen.setdefault(inode, now), inode, fd))
        closed = 0
        for held in by_client.values():
            if len(held) > self.cap:
                held.sort()
                for _, inode, fd in held[self.cap :]:
                    closed += _shutdown(fd, inode)
        if closed and self.on_closed is not None:
            self.on_closed(closed)
        return closed

    def _connections(self) -> dict[int, str]:
        """inode -> remote address of the established TCP connections to the gRPC port."""
        out = {}
        for name, width in (("tcp", 8), ("tcp6", 32)):
            try:
                with open(f"/proc/self/net/{name}") as table:
                    next(table)
                    for line in table:
                        fields = line.split()
                        local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
                        if state != ESTABLISHED or int(local[width + 1 :], 16) != self.port:
                            continue
                        out[int(inode)] = _address(remote[:width])
            except FileNotFoundError:
                continue
        return out


def _address(hex_address: str) -> str:
    """A /proc/net/tcp address (32-bit words in host order, little-endian here) as text."""
    raw = bytes.fromhex(hex_address)
    raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw)
    text = socket.inet_ntop(socket.AF_INET6, raw)
    return text[7:] if text.startswith("::ffff:") and "." in text else text


def _shutdown(fd: int, inode: int) -> int:
    """shutdown(2) the socket behind `fd` if it still is socket `inode`; grpc core, which owns
    the descriptor, sees the connection end and closes it itself."""
    try:
        dup = os.dup(fd)
    except OSError:
        return 0
    try:
        if os.fstat(dup).st_ino != inode:  # the descriptor was closed and reused since the listing
            return 0
        sock = socket.socket(fileno=dup)
        dup = -1
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            return 0
        finally:
            sock.close()
        return 1
    finally:
        if dup >= 0:
            os.close(dup)
