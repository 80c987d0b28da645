"""The gateway process: a small asyncio HTTP/1.1 server (httpserver.py) in front of a
pooled keep-alive HTTP/1.1 client to the Triton replicas (upstream.py); aiohttp only
polls the control plane.

Hot path of POST /v2/models/{endpoint}/infer: look the endpoint up in the current
table, choose the variant (sticky or weighted), pick the replica with the fewest
outstanding requests, forward the body untouched, check (while the model works) that
it is a KServe v2 JSON request (or the JSON header of a binary-extension request),
retry once on stable when a canary/arm attempt fails, queue a shadow copy, reply with
the upstream's status, body and tensor headers plus X-Request-Id and X-Model-Variant.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from . import metrics
from .httpserver import HttpServer, Request
from .routes import ReplicaState, RouteTable, compile_table
from .scores import ScoreSampler
from .source import FileRouteSource, HttpRouteSource, SourceStatus
from .upstream import UpstreamError

try:
    from orjson import loads as _loads  # ~9x faster than json.loads for a request body
except ImportError:  # pragma: no cover - orjson is a declared dependency
    from json import loads as _loads

log = logging.getLogger("gateway")
perf = time.perf_counter
IHCL = "Inference-Header-Content-Length"
FORWARD_REQUEST = (("content-type", "Content-Type"), ("inference-header-content-length", IHCL),
                   ("content-encoding", "Content-Encoding"), ("accept-encoding", "Accept-Encoding"))
FORWARD_RESPONSE = (("content-type", "Content-Type"), ("inference-header-content-length", IHCL), ("content-encoding", "Content-Encoding"))
JSON_CT = "application/json"
UNAVAILABLE = frozenset((502, 503, 504))  # upstream statuses that count toward the circuit breaker


@dataclass
class Settings:
    host: str = "0.0.0.0"
    port: int = 8080
    routes_url: str | None = None
    routes_file: Path | None = None
    token: str | None = None
    poll_interval_s: float = 0.3
    stale_after_s: float = 3.0
    max_body_bytes: int = 8 * 1024 * 1024
    breaker_failures: int = 3
    breaker_cooldown_s: float = 0.5
    breaker_max_cooldown_s: float = 8.0
    shadow_queue: int = 1024
    shadow_workers: int = 16
    idle_timeout_s: float = 75.0

    @classmethod
    def from_env(cls, **overrides) -> "Settings":
        env = os.environ
        values = dict(
            host=env.get("GATEWAY_HOST", cls.host),
            port=int(env.get("GATEWAY_PORT", cls.port)),
            routes_url=env.get("GATEWAY_ROUTES_URL") or None,
            routes_file=Path(env["GATEWAY_ROUTES_FILE"]) if env.get("GATEWAY_ROUTES_FILE") else None,
            token=env.get("GATEWAY_TOKEN") or None,
            poll_interval_s=float(env.get("GATEWAY_POLL_INTERVAL_MS", cls.poll_interval_s * 1000)) / 1000,
            stale_after_s=float(env.get("GATEWAY_STALE_AFTER_MS", cls.stale_after_s * 1000)) / 1000,
            max_body_bytes=int(env.get("GATEWAY_MAX_BODY_BYTES", cls.max_body_bytes)),
            breaker_failures=int(env.get("GATEWAY_BREAKER_FAILURES", cls.breaker_failures)),
            breaker_cooldown_s=float(env.get("GATEWAY_BREAKER_COOLDOWN_MS", cls.breaker_cooldown_s * 1000)) / 1000,
            shadow_queue=int(env.get("GATEWAY_SHADOW_QUEUE", cls.shadow_queue)),
            shadow_workers=int(env.get("GATEWAY_SHADOW_WORKERS", cls.shadow_workers)),
            idle_timeout_s=float(env.get("GATEWAY_IDLE_TIMEOUT_S", cls.idle_timeout_s)),
        )
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


_bits = random.SystemRandom().getrandbits(64)
_rand = random.Random(_bits)


def _new_id() -> str:
    """A 128-bit random request id without a syscall per request (os.urandom is one)."""
    return "%032x" % _rand.getrandbits(128)


class UpstreamFailure(Exception):
    def __init__(self, reason: str, status: int = 0, headers=None, body: bytes = b""):
        self.reason, self.status, self.headers, self.body = reason, status, headers, body


def _error(status: int, code: str, detail: str, rid: str, variant: str = "none"):
    body = json.dumps({"detail": detail, "code": code}).encode()
    return status, {"Content-Type": JSON_CT, "X-Request-Id": rid, "X-Model-Variant": variant}, body


class Gateway:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.table: RouteTable | None = None
        self.states: dict[tuple[str, str], ReplicaState] = {}
        self.pools: dict = {}
        self.hot = metrics.HotPath()
        self.scores = ScoreSampler()
        self.session: aiohttp.ClientSession | None = None
        self.shadow_queue: asyncio.Queue | None = None
        self.tasks: list[asyncio.Task] = []
        if settings.routes_url:
            self.status = SourceStatus("http", settings.routes_url, settings.stale_after_s)
            self.source = HttpRouteSource(self.install, self.status, settings.poll_interval_s, settings.routes_url, settings.token)
        elif settings.routes_file:
            self.status = SourceStatus("file", str(settings.routes_file), settings.stale_after_s)
            self.source = FileRouteSource(self.install, self.status, settings.poll_interval_s, settings.routes_file)
        else:
            raise ValueError("no route source: set GATEWAY_ROUTES_URL or pass --routes-file")

    # --- routes -------------------------------------------------------------------------
    def install(self, document) -> None:
        table = compile_table(document, self.states, self.pools)  # raises RouteTableError, nothing changed
        keep = table.replica_keys()
        for key in list(self.states):
            if key not in keep:
                state = self.states.pop(key)
                if state.broken:
                    metrics.BREAKER_OPEN.labels(state.base, state.model).set(0)
        bases = {base for base, _ in keep}
        for base in list(self.pools):
            if base not in bases:
                self.pools.pop(base).close()
        self.table = table
        metrics.ROUTE_ENDPOINTS.set(len(table.endpoints))
        metrics.ROUTE_LOADED_AT.set(time.time())

    # --- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        self.session = aiohttp.ClientSession()  # control plane only; replicas use upstream.Pool
        self.shadow_queue = asyncio.Queue(maxsize=self.settings.shadow_queue)
        metrics.SHADOW_QUEUE.set_function(self.shadow_queue.qsize)
        if isinstance(self.source, FileRouteSource):
            self.source.check()  # serve from the first request on when the file is good
        else:
            await self.source.fetch_once(self.session)
        loop = asyncio.get_running_loop()
        self.tasks = [loop.create_task(self.source.run()), loop.create_task(self.probe_loop())]
        self.tasks += [loop.create_task(self.shadow_worker()) for _ in range(self.settings.shadow_workers)]

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.session:
            await self.session.close()
        for pool in self.pools.values():
            pool.close()

    # --- circuit breaker ----------------------------------------------------------------
    def _failed(self, state: ReplicaState, *, refused: bool = False) -> None:
        state.failures += 1
        state.refused = refused
        if not state.broken and state.failures >= self.settings.breaker_failures:
            state.broken = True
            state.cooldown = self.settings.breaker_cooldown_s
            state.open_until = time.monotonic() + state.cooldown
            metrics.BREAKER_OPEN.labels(state.base, state.model).set(1)
            log.warning("circuit open for %s %s after %d consecutive failures", state.base, state.model, state.failures)

    async def probe_loop(self) -> None:
        """Probe ejected replicas (GET /v2/models/{model}/ready) after their cooldown;
        close the breaker on success, double the cooldown on failure."""
        while True:
            await asyncio.sleep(0.1)
            now = time.monotonic()
            due = [s for s in list(self.states.values()) if s.broken and s.open_until <= now]
            for state in due:
                try:
                    status, _, _ = await state.pool.request(state.ready_line, b"", 1.0)
                    ok = status == 200
                except (UpstreamError, asyncio.TimeoutError, OSError):
                    ok = False
                if ok:
                    state.broken = False
                    state.failures = 0
                    metrics.BREAKER_OPEN.labels(state.base, state.model).set(0)
                    log.info("circuit closed for %s %s (probe ok)", state.base, state.model)
                else:
                    state.cooldown = min(state.cooldown * 2, self.settings.breaker_max_cooldown_s)
                    state.open_until = time.monotonic() + state.cooldown

    # --- upstream -----------------------------------------------------------------------
    async def attempt(self, entry, body: bytes, headers: bytes, timeout: float, ep_name: str, variant_name: str, during=None):
        state, line, _ = entry
        state.outstanding += 1
        t0 = perf()
        try:
            status, rheaders, data = await state.pool.request(line + headers, body, timeout, during)
        except asyncio.TimeoutError:
            self._failed(state)
            raise UpstreamFailure("timeout") from None
        except UpstreamError as exc:
            self._failed(state, refused=exc.reason == "connect")
            raise UpstreamFailure(exc.reason) from None
        except OSError:
            self._failed(state)
            raise UpstreamFailure("disconnect") from None
        finally:
            state.outstanding -= 1
        self.hot.observe_upstream(ep_name, variant_name, perf() - t0)
        if status >= 500:
            # Triton answers 500 for some malformed requests too, so only "cannot serve"
            # statuses count toward ejection; every 5xx is still retried off a canary.
            if status in UNAVAILABLE:
                self._failed(state)
            raise UpstreamFailure("5xx", status, rheaders, data)
        state.failures = 0
        return status, rheaders, data

    # --- handlers -----------------------------------------------------------------------
    async def handle(self, request: Request):
        path = request.path
        method = request.method
        if path.startswith("/v2/models/"):
            rest = path[11:]
            if rest.endswith("/infer"):
                if method != "POST":
                    return _error(405, "method_not_allowed", "use POST for /infer", self._rid(request))
                return await self.infer(request, rest[:-6])
            if method == "GET":
                if rest.endswith("/ready"):
                    return self.model_ready(request, rest[:-6])
                if "/" not in rest:
                    return await self.model_metadata(request, rest)
        elif method == "GET":
            if path == "/metrics":
                body, content_type = metrics.exposition()
                return 200, {"Content-Type": content_type, "X-Request-Id": self._rid(request), "X-Model-Variant": "none"}, body
            if path == "/v2/health/live":
                return 200, {"X-Request-Id": self._rid(request), "X-Model-Variant": "none"}, b""
            if path in ("/v2/health/ready", "/healthz"):
                return self.health(request)
        return _error(404, "not_found", f"no route for {method} {path}", self._rid(request))

    @staticmethod
    def _rid(request) -> str:
        return request.headers.get("x-request-id") or _new_id()

    def health(self, request):
        table = self.table
        detail = {
            "ready": table is not None,
            "routes": self.status.detail(),
            "endpoints": {
                name: {
                    "variants": {
                        v.name: {
                            "role": v.role, "weight_bp": v.weight_bp, "triton_model": v.triton_model,
                            "replicas": {e[0].base: ("open" if e[0].broken else "closed") for e in v.replicas},
                        }
                        for v in ep.variants
                    }
                }
                for name, ep in (table.endpoints.items() if table else ())
            },
        }
        headers = {"Content-Type": JSON_CT, "X-Request-Id": self._rid(request), "X-Model-Variant": "none"}
        return (200 if table is not None else 503), headers, json.dumps(detail).encode()

    def model_ready(self, request, name: str):
        rid = self._rid(request)
        ep = self.table.endpoints.get(name) if self.table else None
        if ep is None:
            return _error(404, "unknown_endpoint", f"unknown endpoint {name!r}", rid)
        ok = ep.stable.available
        return (200 if ok else 503), {"X-Request-Id": rid, "X-Model-Variant": ep.stable.name}, b""

    async def model_metadata(self, request, name: str):
        rid = self._rid(request)
        ep = self.table.endpoints.get(name) if self.table else None
        if ep is None:
            return _error(404, "unknown_endpoint", f"unknown endpoint {name!r}", rid)
        stable = ep.stable
        entry = stable.pick()
        if entry is None:
            return _error(503, "no_ready_backend", f"endpoint {name!r}: stable variant has no ready replica", rid, stable.name)
        try:
            status, rheaders, body = await entry[0].pool.request(entry[2], b"", ep.timeout_s)
            ct = rheaders.get("content-type", JSON_CT)
        except (UpstreamError, asyncio.TimeoutError, OSError) as exc:
            return _error(502, "upstream_error", f"metadata from {entry[0].base}: {type(exc).__name__}", rid, stable.name)
        return status, {"Content-Type": ct, "X-Request-Id": rid, "X-Model-Variant": stable.name}, body

    async def infer(self, request: Request, name: str):
        t0 = perf()
        headers = request.headers
        rid = headers.get("x-request-id") or _new_id()
        table = self.table
        ep = table.endpoints.get(name) if table is not None else None
        if ep is None:
            detail = f"unknown endpoint {name!r}" if table is not None else "no route table loaded yet"
            # label "unknown", never the client's string: metric cardinality stays bounded
            return self._done(_error(404 if table is not None else 503, "unknown_endpoint" if table else "no_routes", detail, rid), t0, "unknown", "none")
        in_flight = self.hot.in_flight
        in_flight[name] = in_flight.get(name, 0) + 1
        try:
            return await self._infer(request, ep, headers, rid, t0)
        finally:
            in_flight[name] -= 1

    def _done(self, response, t0: float, ep_name: str, variant: str):
        self.hot.done(ep_name, variant, response[0], perf() - t0)
        return response

    async def _infer(self, request: Request, ep, headers, rid: str, t0: float):
        name = ep.name
        body = request.body  # the HTTP server enforces the size limit (413) while reading
        timeout = ep.timeout_s
        raw_timeout = headers.get("x-request-timeout-ms")
        if raw_timeout is not None:
            try:
                timeout = int(raw_timeout) / 1000.0
                if timeout <= 0:
                    raise ValueError
            except ValueError:
                return self._done(_error(400, "bad_timeout", f"X-Request-Timeout-Ms must be a positive integer, got {raw_timeout!r}", rid), t0, name, "none")
        deadline = t0 + timeout

        up_headers = b""
        for key, out_key in FORWARD_REQUEST:
            value = headers.get(key)
            if value is not None:
                up_headers += f"{out_key}: {value}\r\n".encode("latin-1")

        # The body check (is it a KServe v2 JSON request?) runs right after the request
        # is written upstream, so it overlaps the model's work instead of adding to the
        # latency; its verdict is applied before anything about the reply is (a
        # malformed request is a 400 and never counts as a backend error or failover).
        check = _BodyCheck(body, headers.get("inference-header-content-length"))
        variant = ep.choose(headers.get(ep.sticky_key))
        stable = ep.stable
        entry = variant.pick()
        if entry is None and variant is stable:
            entry = stable.pick_panic()  # every stable replica ejected: try a live one rather than refuse all
        failure = None
        if entry is None:
            if variant is stable and check.result() is None:
                return self._done(_error(503, "no_ready_backend", f"endpoint {name!r}: no ready replica for variant {variant.name!r}", rid, variant.name), t0, name, variant.name)
            failure = UpstreamFailure("unavailable")
        if entry is not None:
            attempt_timeout = timeout if variant.attempt_timeout_s is None else min(timeout, variant.attempt_timeout_s)
            try:
                status, rheaders, data = await self.attempt(entry, body, up_headers, attempt_timeout, name, variant.name, check)
            except UpstreamFailure as exc:
                failure = exc
        problem = check.result()
        if problem is not None:
            return self._done(_error(400, problem[0], problem[1], rid), t0, name, "none")
        if failure is not None:
            if failure.reason != "unavailable":
                metrics.UPSTREAM_ERRORS.labels(name, variant.name, failure.reason).inc()
            # One retry: canary/arm -> stable (failover); stable -> another stable replica
            # only when the first never reached the model (connect error).
            retry_variant = None
            if variant is not stable:
                retry_variant = stable
            elif failure.reason == "connect":
                retry_variant = stable
            retry_entry = retry_variant.pick() if retry_variant is not None else None
            if retry_entry is None and retry_variant is stable and variant is not stable:
                retry_entry = stable.pick_panic()
            if retry_variant is stable and variant is stable and retry_entry is entry:
                retry_entry = None
            remaining = deadline - perf()
            if retry_entry is not None and remaining > 0.0005:
                if failure.reason != "unavailable":
                    metrics.RETRIES.labels(name, variant.name).inc()
                if variant is not stable:
                    metrics.FAILOVERS.labels(name, variant.name, stable.name, failure.reason).inc()
                variant = retry_variant
                try:
                    status, rheaders, data = await self.attempt(retry_entry, body, up_headers, remaining, name, variant.name)
                    failure = None
                except UpstreamFailure as exc:
                    failure = exc
                    metrics.UPSTREAM_ERRORS.labels(name, variant.name, exc.reason).inc()
            if failure is not None:
                if failure.reason == "timeout" or deadline - perf() <= 0:
                    response = _error(504, "deadline_exceeded", f"no reply from {name!r} within {timeout * 1000:.0f} ms", rid, variant.name)
                elif failure.reason == "5xx":
                    status, rheaders, data = failure.status, failure.headers, failure.body
                    response = None
                elif failure.reason == "unavailable" and retry_entry is None:
                    response = _error(503, "no_ready_backend", f"endpoint {name!r}: no ready replica", rid, variant.name)
                else:
                    response = _error(502, "upstream_error", f"endpoint {name!r}: upstream {failure.reason} on variant {variant.name!r}", rid, variant.name)
                if response is not None:
                    return self._done(response, t0, name, variant.name)

        if ep.shadows and ep.shadow_sample_rate > 0.0 and random.random() < ep.shadow_sample_rate:
            self._queue_shadow(ep, body, up_headers)

        out = {"X-Request-Id": rid, "X-Model-Variant": variant.name}
        for key, out_key in FORWARD_RESPONSE:
            value = rheaders.get(key)
            if value is not None:
                out[out_key] = value
        response = self._done((status, out, data), t0, name, variant.name)
        if status == 200:  # after the latency is taken: sampling must not tilt the judge's comparison
            self.scores.maybe_observe(name, variant.name, rheaders, data, candidate=variant is not stable)
        return response

    # --- shadow -------------------------------------------------------------------------
    def _queue_shadow(self, ep, body: bytes, up_headers: bytes) -> None:
        queue = self.shadow_queue
        for shadow in ep.shadows:
            try:
                queue.put_nowait((ep.name, shadow, body, up_headers, ep.timeout_s))
            except asyncio.QueueFull:
                metrics.SHADOW_DROPPED.labels(ep.name, shadow.name).inc()

    async def shadow_worker(self) -> None:
        queue = self.shadow_queue
        while True:
            ep_name, shadow, body, up_headers, timeout = await queue.get()
            entry = shadow.pick()
            t0 = perf()
            if entry is None:
                metrics.SHADOW_REQUESTS.labels(ep_name, shadow.name, "unavailable").inc()
                continue
            state, line, _ = entry
            state.outstanding += 1
            try:
                status, rheaders, reply = await state.pool.request(line + up_headers, body, shadow.attempt_timeout_s or timeout)
                result = str(status)
                if status == 200:
                    self.scores.maybe_observe(ep_name, shadow.name, rheaders, reply, candidate=True)
                if status in UNAVAILABLE:
                    self._failed(state)
                else:
                    state.failures = 0
            except asyncio.TimeoutError:
                result = "timeout"
                self._failed(state)
            except (UpstreamError, OSError):
                result = "error"
                self._failed(state)
            except Exception:  # a shadow never takes the worker down
                log.exception("shadow copy failed")
                result = "error"
            finally:
                state.outstanding -= 1
            metrics.SHADOW_REQUESTS.labels(ep_name, shadow.name, result).inc()
            metrics.SHADOW_LATENCY.labels(ep_name, shadow.name).observe(perf() - t0)


class _BodyCheck:
    """_check_body, run once: when called (by the upstream client right after the
    write) or at the latest when the verdict is needed."""

    __slots__ = ("body", "ihcl", "done", "problem")

    def __init__(self, body: bytes, ihcl: str | None):
        self.body, self.ihcl, self.done, self.problem = body, ihcl, False, None

    def __call__(self) -> None:
        if not self.done:
            self.problem = _check_body(self.body, self.ihcl)
            self.done = True

    def result(self):
        if not self.done:
            self()
        return self.problem


def _check_body(body: bytes, ihcl: str | None):
    """(code, detail) when the body is not a KServe v2 inference request, else None."""
    header = body
    if ihcl is not None:
        try:
            n = int(ihcl)
        except ValueError:
            return "bad_request", f"{IHCL} must be an integer, got {ihcl!r}"
        if n < 0 or n > len(body):
            return "bad_request", f"{IHCL} is {n} but the body has {len(body)} bytes"
        header = body[:n] if n else body
    if not header:
        return "malformed_json", "empty request body: expected a KServe v2 inference request (JSON)"
    try:
        document = _loads(header)
    except ValueError as exc:
        return "malformed_json", f"request body is not valid JSON: {exc}"
    if not isinstance(document, dict) or not isinstance(document.get("inputs"), list):
        return "bad_request", "request body must be a JSON object with an 'inputs' list (KServe v2)"
    return None


async def serve(settings: Settings, ready: asyncio.Event | None = None) -> None:
    gateway = Gateway(settings)
    await gateway.start()
    loop = asyncio.get_running_loop()
    server = HttpServer(gateway.handle, max_body=settings.max_body_bytes, idle_timeout=settings.idle_timeout_s)
    try:
        await server.start(settings.host, settings.port)
    except OSError:
        await gateway.close()
        raise
    log.info("gateway listening on http://%s:%d (routes: %s %s)", settings.host, settings.port, gateway.status.kind, gateway.status.where)
    print(f"gateway listening on http://{settings.host}:{settings.port}", flush=True)
    # What exists now (modules, route table, metrics) lives as long as the process: keep
    # it out of the collector's way, and collect the young generation less often, which
    # trims the tail latency of the hot path (it allocates little that survives).
    gc.collect()
    gc.freeze()
    gc.set_threshold(20000, 20, 50)
    if ready is not None:
        ready.set()
    stop = asyncio.Event()
    import signal

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.close(2.0)
    await gateway.close()
