"""The platform's load generator: HTTP POSTs to one URL over the gateway's own upstream
client (gateway/wire/upstream.py: keep-alive connections, replies parsed by llhttp), in two
modes, each a window of wall time after a warm-up:

- open loop: arrivals at `rate` per second with exponential gaps (Poisson), whatever the
  server does — queueing shows in the latencies instead of slowing the sender (no
  coordinated omission). The generator's own lateness is reported (`late_p99_ms`): when
  it is large, the generator, not the server, was the limit.
- closed loop: `concurrency` clients, each sending its next request when the last reply
  came: the capacity at that concurrency.

Requests cycle over several bodies (distinct rows), each answer is timed with
perf_counter. It runs as its own process so that it never shares an interpreter (or a GIL)
with what it measures: `python -m harness.loadgen URL BODY_FILE...` reads one JSON command
per line on stdin and writes one JSON line per command on stdout:

    {"mode": "closed", "concurrency": 8, "seconds": 1.0, "warmup": 0.2}
    {"mode": "open", "rate": 2000, "seconds": 1.5, "warmup": 0.3, "latencies": true}
    (optional: "timeout" per request, default 10 s; "drain": how long an open-loop window
    waits for its backlog after the last arrival, default min(timeout, max(1 s, seconds)),
    what is still unanswered counts as status "unfinished")
    -> {"mode", "rate"|"concurrency", "sent", "ok", "errors": {status: n}, "achieved_rps",
        "p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms", "late_p99_ms", "cpu_s"[, "latencies_ms"]}

Users: the factory's tune stage (registry/factory/tune/measure.py) and the benchmarks
(bench/openloop.py). It imports nothing from Django.
"""

from __future__ import annotations

import asyncio
import json
import random
import resource
import sys
import time
from collections import Counter
from pathlib import Path

from gateway.wire.upstream import Pool, UpstreamError

REQUEST_TIMEOUT_S = 10.0  # a reply slower than this counts as status "timeout"
MAX_RATE = 100_000.0
MAX_CONCURRENCY = 1024
MAX_SECONDS = 600.0


def _quantiles(latencies: list[float]) -> dict:
    if not latencies:
        return {k: None for k in ("p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms")}
    ordered = sorted(latencies)
    n = len(ordered)

    def q(p: float) -> float:
        return round(ordered[min(n - 1, int(p * n))] * 1000, 4)

    return {"p50_ms": q(0.5), "p90_ms": q(0.9), "p99_ms": q(0.99), "p999_ms": q(0.999), "max_ms": q(1.0)}


class Generator:
    """Sends to `url` (an http:// URL with a path) cycling over `bodies`."""

    def __init__(self, url: str, bodies: list[bytes], *, timeout: float = REQUEST_TIMEOUT_S):
        if not bodies:
            raise ValueError("at least one request body")
        scheme_host, _, path = url.partition("//")[2].partition("/")
        self.pool = Pool(f"http://{scheme_host}", max_idle=MAX_CONCURRENCY)
        self.head = f"POST /{path} HTTP/1.1\r\nContent-Type: application/json\r\n".encode()
        self.bodies = bodies
        self.timeout = timeout
        self._next = 0

    def _body(self) -> bytes:
        self._next = (self._next + 1) % len(self.bodies)
        return self.bodies[self._next]

    async def _one(self, record: bool, latencies: list, statuses: Counter) -> None:
        sent = time.perf_counter()
        try:
            status, _, _ = await self.pool.request(self.head, self._body(), timeout=self.timeout)
        except UpstreamError as exc:
            status = exc.reason
        except TimeoutError:
            status = "timeout"
        if record:
            statuses[status] += 1
            if status == 200:
                latencies.append(time.perf_counter() - sent)

    async def open_loop(self, rate: float, seconds: float, warmup: float, seed: int = 1, drain: float = 2.0) -> dict:
        latencies: list[float] = []
        statuses: Counter = Counter()
        lateness: list[float] = []
        pending: set = set()
        loop = asyncio.get_running_loop()
        rng = random.Random(seed)
        start = time.perf_counter() + 0.02
        measure_from = start + warmup
        end = measure_from + seconds
        t = start
        while t < end:
            now = time.perf_counter()
            if t > now:
                await asyncio.sleep(t - now)
            if t >= measure_from:
                lateness.append(time.perf_counter() - t)
            task = loop.create_task(self._one(t >= measure_from, latencies, statuses))
            pending.add(task)
            task.add_done_callback(pending.discard)
            t += rng.expovariate(rate)
        if pending:  # the backlog of an overloaded server: waited for at most `drain` seconds
            _, unfinished = await asyncio.wait(pending, timeout=drain)
            for task in unfinished:
                task.cancel()
            if unfinished:
                statuses["unfinished"] += len(unfinished)
        late = sorted(lateness)
        return {
            "mode": "open",
            "rate": rate,
            "late_p99_ms": round(late[int(0.99 * (len(late) - 1))] * 1000, 3) if late else 0.0,
            **self._summary(latencies, statuses, seconds),
        }

    async def closed_loop(self, concurrency: int, seconds: float, warmup: float) -> dict:
        latencies: list[float] = []
        statuses: Counter = Counter()
        measure_from = time.perf_counter() + warmup
        end = measure_from + seconds

        async def client():
            while (now := time.perf_counter()) < end:
                await self._one(now >= measure_from, latencies, statuses)

        await asyncio.gather(*(client() for _ in range(concurrency)))
        return {"mode": "closed", "concurrency": concurrency, **self._summary(latencies, statuses, seconds)}

    @staticmethod
    def _summary(latencies: list[float], statuses: Counter, seconds: float) -> dict:
        sent = sum(statuses.values())
        return {
            "sent": sent,
            "ok": statuses.get(200, 0),
            "errors": {str(k): v for k, v in statuses.items() if k != 200},
            "achieved_rps": round(statuses.get(200, 0) / seconds, 2),
            "seconds": seconds,
            **_quantiles(latencies),
            "_latencies": latencies,
        }

    def close(self) -> None:
        self.pool.close()


def _bounded(command: dict, key: str, default: float, low: float, high: float) -> float:
    value = float(command.get(key, default))
    if not low <= value <= high:
        raise ValueError(f"{key} must be in [{low}, {high}], got {value}")
    return value


async def run_command(generator: Generator, command: dict) -> dict:
    """One window as a JSON command says (see the module docstring); bounds every value."""
    seconds = _bounded(command, "seconds", 1.0, 0.05, MAX_SECONDS)
    warmup = _bounded(command, "warmup", 0.2, 0.0, MAX_SECONDS)
    generator.timeout = _bounded(command, "timeout", REQUEST_TIMEOUT_S, 0.01, MAX_SECONDS)
    drain = _bounded(command, "drain", min(generator.timeout, max(1.0, seconds)), 0.0, MAX_SECONDS)
    before = resource.getrusage(resource.RUSAGE_SELF)
    if command.get("mode") == "open":
        rate = _bounded(command, "rate", 100, 0.1, MAX_RATE)
        result = await generator.open_loop(rate, seconds, warmup, drain=drain)
    elif command.get("mode") == "closed":
        concurrency = int(_bounded(command, "concurrency", 1, 1, MAX_CONCURRENCY))
        result = await generator.closed_loop(concurrency, seconds, warmup)
    else:
        raise ValueError(f"mode must be open or closed, got {command.get('mode')!r}")
    after = resource.getrusage(resource.RUSAGE_SELF)
    result["cpu_s"] = round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 4)
    raw = result.pop("_latencies")
    if command.get("latencies"):
        result["latencies_ms"] = [round(x * 1000, 4) for x in raw]
    return result


async def _serve(url: str, bodies: list[bytes]) -> None:
    generator = Generator(url, bodies)
    loop = asyncio.get_running_loop()
    try:
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                return
            try:
                reply = await run_command(generator, json.loads(line))
            except (ValueError, TypeError) as exc:
                reply = {"error": str(exc)}
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
    finally:
        generator.close()


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m harness.loadgen URL BODY_FILE...", file=sys.stderr)
        return 2
    bodies = [Path(p).read_bytes() for p in argv[1:]]
    try:
        import uvloop

        uvloop.run(_serve(argv[0], bodies))
    except ImportError:  # pragma: no cover (uvloop is a dependency)
        asyncio.run(_serve(argv[0], bodies))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
