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
    GATEWAY_GRPC_MAX_CONNECTIONS_PER_CLIENT (sockets.py: it reads the worker's own sockets on
    the gRPC port from /proc and shuts the extra ones down; grpc core sees the peer go and
    closes its own). Such a client sees UNAVAILABLE on those connections, as an HTTP client
    past its cap gets 429 and a close. A connection that carries only calls past its
    client's cap is closed the same way after OVERFLOW_TO_CLOSE of them, so a burst of
    HEADERS on it ends inside grpc core instead of each stream being answered in Python.

A client is its address (an IPv6 /64; peers.py), per worker, like GATEWAY_MAX_CONNECTIONS.
"""

from __future__ import annotations

import asyncio
from urllib.parse import unquote

import grpc

from gateway.wire.peers import ClientKeys

KEEPALIVE_TIMEOUT_MS = 20_000
MAX_PING_STRIKES = 2
PUSHBACK = (("retry-after", "1"), ("grpc-retry-pushback-ms", "1000"))
OVERFLOW_TO_CLOSE = 4  # calls refused on a connection with none admitted: then it is closed
MAX_TRACKED_PEERS = 65536
PENDING_SOFT, PENDING_HARD = 50_000, 100_000  # calls waiting for the application (see above)


class Malformed:
    """A request message that is not the protobuf its method takes: answered INVALID_ARGUMENT
    by the handler (grpcio would answer UNKNOWN naming a Python class, and log it)."""

    __slots__ = ("detail",)

    def __init__(self, detail: str):
        self.detail = detail


def tolerant(deserialize):
    """`deserialize` returning Malformed instead of raising on bytes that do not parse."""
    if deserialize is None:
        return None
    message = getattr(deserialize, "__self__", None)
    name = message.DESCRIPTOR.full_name if message is not None else "request"

    def read(data: bytes):
        try:
            return deserialize(data)
        except Exception:  # protobuf's DecodeError and kin: the client's bytes, never a server error
            return Malformed(f"the request message does not parse as {name} (protobuf)")

    return read


async def checked(requests, context):
    """A request stream that ends the call with INVALID_ARGUMENT at a malformed message."""
    async for message in requests:
        if type(message) is Malformed:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, message.detail)
        yield message


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
    """The address of a grpc peer URI (`ipv4:1.2.3.4:5`, `ipv6:%5B::1%5D:5`) as /proc's table
    reads it (an IPv4-mapped one as IPv4); None for others (unix:)."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    if kind == "ipv6":
        host = unquote(rest).rpartition(":")[0].strip("[]")
        return host[7:] if host.startswith("::ffff:") and "." in host else host
    return None


class CallCaps:
    """Calls in progress per client address, and the first-message deadline. A connection that
    carries only calls past its client's cap (OVERFLOW_TO_CLOSE of them and none admitted in
    progress), or a call whose message did not come in time, is handed to `close_peer`: closing
    it ends its other streams inside grpc core, instead of each being answered here."""

    def __init__(self, settings, client_keys: ClientKeys, on_refused=None, close_peer=None):
        self.max_calls = settings.grpc_max_calls_per_client
        self.first_message_s = settings.grpc_first_message_timeout_s
        self.client_keys = client_keys
        self.calls: dict[str, int] = {}  # client -> its calls in progress
        self.admitted: dict[str, int] = {}  # peer (its connection) -> its calls in progress
        self.overflow: dict[str, int] = {}  # peer -> calls refused since it last had one admitted
        self.on_refused = on_refused  # (code) -> None: counted in the gateway's metrics
        self.close_peer = close_peer  # (peer) -> None: sockets.ConnectionCap.close_peer

    def guard(self, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """`handler` (unary-unary) served as client-streaming behind the caps."""
        unary = handler.unary_unary
        caps = self

        async def guarded(requests, context):
            peer = context.peer()
            client = caps.client_keys.key(peer_host(peer))
            if client is not None:
                refusal = caps.admit(client, peer)
                if refusal is not None:
                    await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal, PUSHBACK)
            try:
                try:
                    async with asyncio.timeout(caps.first_message_s):
                        request = await context.read()
                except TimeoutError:
                    caps._refused("first_message_timeout")
                    if caps.close_peer is not None:  # a half-open stream costs its connection, no more
                        caps.close_peer(peer)
                    await context.abort(
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                        f"no request message within {caps.first_message_s:g} s of the call's start",
                    )
                if request is grpc.aio.EOF:
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the call ended without a request message")
                if type(request) is Malformed:
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.detail)
                return await unary(request, context)
            finally:
                if client is not None:
                    caps.release(client, peer)

        return grpc.stream_unary_rpc_method_handler(
            guarded,
            request_deserializer=tolerant(handler.request_deserializer),
            response_serializer=handler.response_serializer,
        )

    def guard_stream(self, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """`handler` (streaming) behind the per-client call cap: a stream is one call in
        progress for as long as it is open, so streams are bounded as unary calls are. Its
        messages are read by the handler (stream.py bounds the waits between them); a
        malformed one reaches it as `Malformed`."""
        caps = self
        kind = "stream_stream" if handler.response_streaming else "stream_unary"
        if not handler.request_streaming:
            kind = "unary_stream" if handler.response_streaming else "unary_unary"
        inner = getattr(handler, kind)

        async def guarded(request, context):
            peer = context.peer()
            client = caps.client_keys.key(peer_host(peer))
            if client is not None:
                refusal = caps.admit(client, peer)
                if refusal is not None:
                    await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal, PUSHBACK)
            try:
                if handler.request_streaming:
                    request = checked(request, context)
                elif type(request) is Malformed:
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.detail)
                result = inner(request, context)
                if hasattr(result, "__aiter__"):  # a response stream written by an async generator
                    async for message in result:
                        await context.write(message)
                    return None
                return await result
            finally:
                if client is not None:
                    caps.release(client, peer)

        make = getattr(grpc, f"{kind}_rpc_method_handler")
        return make(
            guarded,
            request_deserializer=tolerant(handler.request_deserializer),
            response_serializer=handler.response_serializer,
        )

    def admit(self, client: str, peer: str) -> str | None:
        """Count the call in (None), or the refusal's message."""
        held = self.calls.get(client, 0)
        if held < self.max_calls:
            self.calls[client] = held + 1
            self.admitted[peer] = self.admitted.get(peer, 0) + 1
            self.overflow.pop(peer, None)
            return None
        self._refused("too_many_calls")
        refused = self.overflow.get(peer, 0) + 1
        if len(self.overflow) > MAX_TRACKED_PEERS:  # peers come and go: never grow without bound
            self.overflow.clear()
        self.overflow[peer] = refused
        if refused == OVERFLOW_TO_CLOSE and peer not in self.admitted and self.close_peer is not None:
            self.close_peer(peer)
        return (
            f"this client address ({client}) has {held} gRPC calls in progress on this gateway worker; "
            f"the limit is {self.max_calls}"
        )

    def release(self, client: str, peer: str) -> None:
        left = self.calls[client] - 1
        if left:
            self.calls[client] = left
        else:
            del self.calls[client]
        left = self.admitted[peer] - 1
        if left:
            self.admitted[peer] = left
        else:
            del self.admitted[peer]

    def _refused(self, code: str) -> None:
        if self.on_refused is not None:
            self.on_refused(code)
