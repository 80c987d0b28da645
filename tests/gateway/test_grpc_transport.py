"""The gRPC transport limits' own parts (gateway/v2/grpc/transport.py), in this process: the
options grpcio is given, peer strings, the call cap, and the connection cap closing a client's
newest connections past the cap on real sockets (a plain TCP listener stands in for grpc core:
the cap only looks at the process' own sockets on the port and shuts them down)."""

from __future__ import annotations

import asyncio
import os
import socket
import time

import pytest
from tritonclient.grpc import service_pb2 as pb

from gateway.process.settings import Settings
from gateway.v2.grpc.convert import metadata_dict
from gateway.v2.grpc.sockets import ConnectionCap
from gateway.v2.grpc.transport import OVERFLOW_TO_CLOSE, CallCaps, Malformed, peer_host, server_options, tolerant
from gateway.wire.peers import ClientKeys, parse_exempt


def test_the_options_come_from_the_settings():
    settings = Settings(grpc_max_streams=32, idle_timeout_s=7, grpc_max_connection_age_s=90, grpc_min_ping_interval_s=3)
    options = dict(server_options(settings))
    assert options["grpc.max_concurrent_streams"] == 32
    assert options["grpc.max_connection_idle_ms"] == 7000
    assert options["grpc.max_connection_age_ms"] == 90_000
    assert options["grpc.max_connection_age_grace_ms"] == 30_000
    assert options["grpc.http2.min_ping_interval_without_data_ms"] == 3000
    assert options["grpc.http2.max_ping_strikes"] == 2
    assert (
        options["grpc.server.max_pending_requests"] > 3000
    )  # past core's default: a burst waits, never cancels others


@pytest.mark.parametrize(
    "peer,host",
    [
        ("ipv4:127.0.0.2:5555", "127.0.0.2"),
        ("ipv6:[::1]:443", "::1"),
        ("ipv6:%5B::1%5D:443", "::1"),
        ("ipv6:%5B::ffff:127.0.0.2%5D:443", "127.0.0.2"),
        ("unix:/tmp/x", None),
        ("", None),
    ],
)
def test_peer_host(peer, host):
    assert peer_host(peer) == host


def test_client_keys_count_an_ipv6_host_by_its_64_and_skip_the_exempt():
    keys = ClientKeys(parse_exempt("10.0.0.0/8, 127.0.0.9"))
    assert keys.key("2001:db8::1") == keys.key("2001:db8::ffff") == "2001:db8::/64"
    assert keys.key("::ffff:127.0.0.2") == "127.0.0.2"
    assert keys.key("10.1.2.3") is None and keys.key("127.0.0.9") is None and keys.key(None) is None
    with pytest.raises(ValueError, match="GATEWAY_CLIENT_CAP_EXEMPT: 'nope'"):
        parse_exempt("10.0.0.0/8,nope")


def test_the_cap_closes_the_newest_connections_past_it_and_only_that_clients():
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    accepted, clients = [], []
    try:
        for source in ["127.0.0.2"] * 5 + ["127.0.0.3"] * 2:
            clients.append(socket.create_connection(("127.0.0.1", port), source_address=(source, 0)))
            accepted.append(listener.accept()[0])
        cap = ConnectionCap(port, 2, ClientKeys())
        fds = len(os.listdir("/proc/self/fd"))
        assert fds > 2
        cap.sweep()  # first seen: the order they were accepted in is not known yet, ties keep fd order
        for sock in clients:
            sock.settimeout(0.5)
        time.sleep(0.05)
        closed = [i for i, sock in enumerate(clients) if _eof(sock)]
        assert len(closed) == 3 and all(i < 5 for i in closed), closed  # 3 of 127.0.0.2's five, none of .3's
        assert cap.sweep() == 0  # past the cap no more
    finally:
        for sock in accepted + clients + [listener]:
            sock.close()


def _eof(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_a_connection_with_only_refused_calls_is_handed_over_to_be_closed():
    closing = []
    caps = CallCaps(Settings(grpc_max_calls_per_client=2), ClientKeys(), close_peer=closing.append)
    busy, spare = "ipv4:127.0.0.2:1000", "ipv4:127.0.0.2:1001"
    assert caps.admit("127.0.0.2", busy) is None and caps.admit("127.0.0.2", busy) is None
    for _ in range(OVERFLOW_TO_CLOSE + 3):
        assert "the limit is 2" in caps.admit("127.0.0.2", spare)
        assert "the limit is 2" in caps.admit("127.0.0.2", busy)  # it has calls admitted: never closed
    assert closing == [spare]
    caps.release("127.0.0.2", busy)
    assert caps.admit("127.0.0.2", spare) is None  # a call fits again: the count starts over
    assert caps.calls == {"127.0.0.2": 2} and caps.overflow == {busy: OVERFLOW_TO_CLOSE + 3}


def test_close_peer_closes_that_connection_in_a_batch():
    async def scenario():
        server_side = []
        listener = await asyncio.start_server(lambda r, w: server_side.append(w), "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        clients = [await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0)) for _ in range(3)]
        await asyncio.sleep(0.05)
        cap = ConnectionCap(port, 64, ClientKeys())
        doomed = clients[1][1].get_extra_info("sockname")[1]
        cap.close_peer(f"ipv4:127.0.0.2:{doomed}")
        assert await asyncio.wait_for(clients[1][0].read(), 2) == b""
        for reader, _ in (clients[0], clients[2]):
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(reader.read(), 0.2)
        for _, writer in clients:
            writer.close()
        listener.close()

    asyncio.run(scenario())


def test_bytes_that_do_not_parse_are_named_by_their_message_and_metadata_is_trimmed():
    read = tolerant(pb.ModelInferRequest.FromString)
    assert read(pb.ModelInferRequest(model_name="m").SerializeToString()).model_name == "m"
    bad = read(b"\x0a\xff\xff\xff\xff\x0f")
    assert (
        type(bad) is Malformed
        and bad.detail == "the request message does not parse as inference.ModelInferRequest (protobuf)"
    )
    assert metadata_dict([("x-user-id", " u3 "), ("authorization", "Bearer k\t")]) == {
        "x-user-id": "u3",
        "authorization": "Bearer k",
    }
