"""Closing gRPC connections grpc core owns, for the per-client caps (transport.py says why
grpcio cannot): the worker lists its own descriptors (/proc/self/fd), learns once per socket
its local port and its peer (getsockname/getpeername on a duplicate; a socket is known by its
inode, so a reused descriptor is learnt again), and shuts the chosen ones down — shutdown(2)
on a duplicate of core's descriptor: core sees the peer go, ends the connection's streams and
closes its descriptor itself. Nothing host-wide is read (/proc/net/tcp lists every socket of
the network namespace and costs tens of ms on a busy host).

Two reasons to close one: a client address past GATEWAY_GRPC_MAX_CONNECTIONS_PER_CLIENT (its
newest connections, by when a sweep first saw them; swept once a second, and only when the
worker holds more descriptors than the cap, so a quiet worker looks at nothing), and a
connection CallCaps hands over (`close_peer`: it carries only calls past its client's cap),
closed in one batch within CLOSE_BATCH_S.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import stat
import time
from concurrent.futures import ThreadPoolExecutor

from gateway.v2.grpc.transport import peer_host
from gateway.wire.peers import ClientKeys

log = logging.getLogger("gateway.grpc")
SWEEP_S = 1.0
CLOSE_BATCH_S = 0.02


class ConnectionCap:
    def __init__(self, port: int, cap: int, client_keys: ClientKeys, on_closed=None):
        self.port = port
        self.cap = cap
        self.client_keys = client_keys
        self.first_seen: dict[int, float] = {}  # socket inode -> when a sweep first saw it
        self.known: dict[int, tuple] = {}  # fd -> (inode, local port, peer): learnt once per socket
        self.on_closed = on_closed  # (code, count) -> None
        self.doomed: set[tuple[str, int]] = set()  # (host, port) of peers to close in the next batch
        self.batch: asyncio.TimerHandle | None = None
        self.task: asyncio.Task | None = None
        # one thread does the looking and the closing: thousands of descriptors take tens of ms of
        # system calls, which must not hold the event loop (the GIL is let go at each call)
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grpc-connection-cap")

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        if self.batch is not None:
            self.batch.cancel()
        self.worker.shutdown(wait=False, cancel_futures=True)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(SWEEP_S)
            try:
                await loop.run_in_executor(self.worker, self.sweep)
            except Exception:  # the cap must outlive any surprise from /proc
                log.exception("gRPC connection sweep failed")

    def close_peer(self, peer: str) -> None:
        """Close the connection of grpc peer `peer` (`ipv4:1.2.3.4:5`) in the next batch."""
        host, port = peer_host(peer), peer.rpartition(":")[2]
        if host is None or not port.isdigit():
            return
        self.doomed.add((host, int(port)))
        if self.batch is None:
            self.batch = asyncio.get_running_loop().call_later(CLOSE_BATCH_S, self._close_doomed)

    def _close_doomed(self) -> None:
        self.batch = None
        doomed, self.doomed = self.doomed, set()
        self.worker.submit(self._close, doomed)

    def _close(self, doomed: set) -> None:
        try:
            chosen = [(fd, inode) for fd, (inode, peer) in self._sockets().items() if peer in doomed]
        except Exception:
            log.exception("listing gRPC connections failed")
            return
        closed = sum(self._shutdown(fd, inode) for fd, inode in chosen)
        if closed and self.on_closed is not None:
            self.on_closed("connection_over_call_cap", closed)

    def sweep(self) -> int:
        """Close what is past the per-client cap; the number closed."""
        sockets = self._sockets(at_least=self.cap + 1)
        now = time.monotonic()
        seen = self.first_seen
        inodes = {inode for inode, _ in sockets.values()}
        for inode in list(seen):
            if inode not in inodes:
                del seen[inode]
        by_client: dict[str, list] = {}
        for fd, (inode, peer) in sockets.items():
            client = self.client_keys.key(peer[0])
            if client is not None:
                by_client.setdefault(client, []).append((seen.setdefault(inode, now), inode, fd))
        closed = 0
        for held in by_client.values():
            if len(held) > self.cap:
                held.sort()
                closed += sum(self._shutdown(fd, inode) for _, inode, fd in held[self.cap :])
        if closed and self.on_closed is not None:
            self.on_closed("too_many_connections", closed)
        return closed

    def _sockets(self, at_least: int = 0) -> dict[int, tuple[int, tuple[str, int]]]:
        """fd -> (inode, (peer host, peer port)) of this worker's open connections on the gRPC
        port; {} when the worker holds fewer than `at_least` descriptors."""
        names = os.listdir("/proc/self/fd")
        if len(names) < at_least:
            self.known.clear()
            return {}
        known, out, alive = self.known, {}, set()
        for name in names:
            fd = int(name)
            try:
                st = os.fstat(fd)
            except OSError:
                continue
            if not stat.S_ISSOCK(st.st_mode):
                continue
            alive.add(fd)
            entry = known.get(fd)
            if entry is None or entry[0] != st.st_ino:
                entry = known[fd] = (st.st_ino, *_describe(fd))
            inode, local_port, peer = entry
            if local_port == self.port and peer is not None:
                out[fd] = (inode, peer)
        for fd in [fd for fd in known if fd not in alive]:
            del known[fd]
        return out

    def _shutdown(self, fd: int, inode: int) -> int:
        closed = _shutdown(fd, inode)
        if closed:
            self.known[fd] = (inode, None, None)  # shut down: core closes it; never counted again
        return closed


def _describe(fd: int) -> tuple[int | None, tuple[str, int] | None]:
    """(local port, (peer host, peer port)) of the TCP socket behind `fd`, (None, None) for
    others; the peer None for a socket that is not connected (a listener)."""
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return None, None
    try:
        if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
            return None, None
        local = sock.getsockname()[1]
        try:
            host, port = sock.getpeername()[:2]
        except OSError:
            return local, None
        return local, (host[7:] if host.startswith("::ffff:") and "." in host else host, port)
    finally:
        sock.close()


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


def stop_listening(port: int) -> int:
    """Take this worker's gRPC listener(s) on `port` out of the SO_REUSEPORT group at once, by
    shutdown(2) on a duplicate of core's descriptor, before the server sends GOAWAY: a client
    told to go away reconnects at once, and a connection the kernel hashed to a listener that
    core closes later is reset in its backlog (the client's channel then fails every call fast
    for its reconnect backoff: thousands of UNAVAILABLE in a rolling restart under load). Core
    logs one "Closing acceptor. Failed accept4: Invalid argument" for it. Returns the listeners
    shut."""
    shut = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            fd = int(name)
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            sock = socket.socket(fileno=os.dup(fd))
        except (OSError, ValueError):
            continue
        try:
            listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
            if listening and sock.type == socket.SOCK_STREAM and sock.getsockname()[1] == port:
                sock.shutdown(socket.SHUT_RDWR)
                shut += 1
        except OSError:
            pass
        finally:
            sock.close()
    return shut
