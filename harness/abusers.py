"""The abusers the adversarial suite and `make bench-gateway` set on a gateway (harness/abuse.py
starts the gateway and the honest tenant beside them): idle connections by the thousand, big
bodies, slow heads. Each comes from its own loopback address (`connect_from`) and runs at a
lower CPU priority than the gateway, as a remote attacker spends its own CPU; HTTP replies are
read by llhttp's response parser (httptools). Half-open gRPC streams: harness/h2streams.py."""

from __future__ import annotations

import os
import socket
import threading
import time

import httptools

ABUSER_NICE = 10  # on one machine the abuser's own CPU would come out of the gateway's: it takes what is left


def lower_priority() -> None:
    """Lower the calling thread's CPU priority (Linux: nice is per thread) to ABUSER_NICE: a
    remote attacker spends its own CPU, not the gateway host's."""
    os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), ABUSER_NICE)


def niced(function, *args, **kwargs):
    """`function(*args, **kwargs)` run in a thread at the abuser's priority; its result."""
    out = []
    worker = threading.Thread(target=lambda: (lower_priority(), out.append(function(*args, **kwargs))), daemon=True)
    worker.start()
    worker.join()
    return out[0]


# Linux: the source port is chosen at connect, unique per connection rather than per address
# (thousands of connections from one loopback address while other runs use it too).
IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)


def connect_from(source: str, port: int, timeout: float = 5.0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def reply_status(sock: socket.socket, timeout: float = 5.0) -> int | None:
    """The status of the first reply on `sock` (llhttp parses it), None if it closed without one."""
    status = []

    class Head:
        def on_headers_complete(self):
            status.append(parser.get_status_code())

    parser = httptools.HttpResponseParser(Head())
    sock.settimeout(timeout)
    try:
        while not status:
            data = sock.recv(65536)
            if not data:
                return None
            parser.feed_data(data)
    except (OSError, httptools.HttpParserError):
        return None
    return status[0]


def hoard(port: int, count: int, source: str) -> tuple[list[socket.socket], dict]:
    """Open `count` idle HTTP connections from `source`; ({outcome: n}: held, or the status that refused)."""
    held, outcomes = [], {}
    for _ in range(count):
        try:
            sock = connect_from(source, port)
        except OSError:
            outcomes["connect_failed"] = outcomes.get("connect_failed", 0) + 1
            continue
        held.append(sock)
    time.sleep(0.5)  # refusals arrive at once; what is still open after this was admitted
    kept = []
    for sock in held:
        sock.setblocking(False)
        try:
            data = sock.recv(65536)
        except BlockingIOError:
            kept.append(sock)
            continue
        except OSError:
            data = b""
        sock.close()
        key = data[9:12].decode() if data.startswith(b"HTTP/1.1 ") else "closed"
        outcomes[key] = outcomes.get(key, 0) + 1
    outcomes["held"] = len(kept)
    return kept, outcomes


def close_all(socks) -> None:
    for sock in socks:
        try:
            sock.close()
        except OSError:
            pass


class Abuser(threading.Thread):
    """Runs `attack(self)` until `stop_event`, at most once every `every_s` (None: back to back);
    counts what it got in `outcomes`. A pace keeps an abuse class what it says: big bodies, say,
    not a flood of requests (a class of its own)."""

    def __init__(self, attack, every_s: float | None = None):
        super().__init__(daemon=True)
        self.attack = attack
        self.every_s = every_s
        self.stop_event = threading.Event()
        self.outcomes: dict = {}
        self.seconds: list[float] = []

    def count(self, outcome) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def run(self) -> None:
        lower_priority()
        while not self.stop_event.is_set():
            started = time.monotonic()
            self.attack(self)
            if self.every_s is not None:
                self.stop_event.wait(max(0.0, started + self.every_s - time.monotonic()))

    def finish(self) -> None:
        self.stop_event.set()
        self.join(30)


def big_body(port: int, source: str, size: int, *, chunked: bool = False, path: bytes = b"/v2/models/ctr/infer"):
    """An attack: one request to `ctr` with a `size`-byte body (Content-Length, or chunked),
    sent until the gateway answers (then it hangs up); counts the status and how long the
    answer took."""
    filler = b'{"inputs": [{"name": "dense", "datatype": "FP32", "shape": [1, 13], "data": [' + b"0.5, " * 100

    def attack(abuser: Abuser) -> None:
        head = b"POST %s HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n" % path
        head += b"Transfer-Encoding: chunked\r\n\r\n" if chunked else b"Content-Length: %d\r\n\r\n" % size
        t0 = time.perf_counter()
        try:
            sock = connect_from(source, port)
        except OSError:
            abuser.count("connect_failed")
            time.sleep(0.05)
            return
        sender = threading.Thread(target=_send_body, args=(sock, head, filler, size, chunked), daemon=True)
        sender.start()
        status = reply_status(sock, timeout=10)
        abuser.seconds.append(time.perf_counter() - t0)
        abuser.count(status)
        sock.close()
        sender.join(5)

    return attack


def _send_body(sock, head: bytes, filler: bytes, size: int, chunked: bool) -> None:
    piece = (filler * (1 + (1 << 16) // len(filler)))[: 1 << 16]
    try:
        sock.sendall(head)
        sent = 0
        while sent < size:
            part = piece[: size - sent]
            sock.sendall(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
            sent += len(part)
        if chunked:
            sock.sendall(b"0\r\n\r\n")
    except OSError:
        pass  # the gateway closed after its answer


def slowloris(port: int, source: str, connections: int, interval_s: float = 0.5):
    """An attack: `connections` requests whose head comes a byte every `interval_s`, for as long
    as the gateway lets each live; counts each connection's end (its status: 408, 429; or closed)."""

    def attack(abuser: Abuser) -> None:
        socks = []
        for _ in range(connections):
            try:
                socks.append(connect_from(source, port))
            except OSError:
                abuser.count("connect_failed")
        head = b"POST /v2/models/ctr/infer HTTP/1.1\r\nHost: gw\r\nX-Slow: " + b"a" * 10_000
        for i in range(len(head)):
            if abuser.stop_event.is_set() or not socks:
                break
            alive = []
            for sock in socks:
                ended = _ended(sock)
                if ended is None:
                    try:
                        sock.sendall(head[i : i + 1])
                        alive.append(sock)
                        continue
                    except OSError:
                        ended = "closed"
                abuser.count(ended)
                sock.close()
            socks = alive
            time.sleep(interval_s)
        abuser.outcomes["open_at_stop"] = len(socks)
        close_all(socks)

    return attack


def _ended(sock: socket.socket):
    """None while the gateway has said nothing on `sock`; else the status it answered, or "closed"."""
    sock.setblocking(False)
    try:
        data = sock.recv(65536)
    except BlockingIOError:
        return None
    except OSError:
        return "closed"
    finally:
        sock.setblocking(True)
    if not data:
        return "closed"
    status = []

    class Head:
        def on_headers_complete(self):
            status.append(parser.get_status_code())

    parser = httptools.HttpResponseParser(Head())
    try:
        parser.feed_data(data)
    except httptools.HttpParserError:
        return "garbage"
    return status[0] if status else "partial"
