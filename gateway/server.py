"""The gateway process: an HTTP/1.1 server on llhttp (httpserver.py) in front of a
pooled keep-alive HTTP/1.1 client to the Triton replicas (upstream.py); aiohttp only
polls the control plane.

Hot path of POST /v2/models/{endpoint}/infer: look the endpoint up in the current
table, check the caller's key (tenants.py), parse the request once (orjson) and check
its tensors (tensors.py), choose the variant (sticky or weighted) and check the request
against that variant's signature, pick the replica with the fewest outstanding
requests, forward the original bytes, retry once on stable when a canary/arm attempt
fails for the backend's reasons, queue a shadow copy, reply with the upstream's status,
body and tensor headers plus X-Request-Id and X-Model-Variant. Each outcome is counted
as the variant's (served, or a backend failure) or the client's (4xx, a deadline below
the endpoint's floor, a disconnect): only the former feed the judge and the breakers.

Longer than the house's ~300 lines on purpose: the request path (`infer` -> `_infer` ->
`attempt`) is read and tuned as one piece, and splitting it costs attribute lookups.
"""

from __future__ import annotations

import asyncio
import gc
import hmac
import json
import logging
import os
import random
import signal
import threading
import time

import aiohttp

from . import metrics
from .httpserver import HttpServer, Request
from .metrics import BACKEND, CLIENT, OK
from .replies import error_body, public_metadata, public_reply, rename_error
from .routes import ReplicaState, RouteTable, compile_table
from .exposures import EXPOSURES_DROPPED, ExposureLog, check_feedback
from .scores import ScoreSampler
from .settings import Settings
from .source import FileRouteSource, HttpRouteSource, SourceStatus
from .tenants import authenticate, release, retry_after
from .tensors import Parsed, Problem, inflate, parse_request
from .upstream import UpstreamError

log = logging.getLogger("gateway")
perf = time.perf_counter
IHCL = "Inference-Header-Content-Length"
# Not Accept-Encoding: replies come back uncompressed, so naming the endpoint in them is a
# prefix swap (replies.py), and Triton spends no time compressing small replies.
FORWARD_REQUEST = (("content-type", "Content-Type"), ("inference-header-content-length", IHCL),
                   ("content-encoding", "Content-Encoding"))
FORWARD_RESPONSE = (("content-type", "Content-Type"), ("inference-header-content-length", IHCL), ("content-encoding", "Content-Encoding"))
JSON_CT = "application/json"
UNAVAILABLE = frozenset((502, 503, 504))  # upstream statuses that count toward the circuit breaker
MAX_TIMEOUT_DIGITS = 7  # X-Request-Timeout-Ms up to 9999999 (then capped by the endpoint's timeout_ms)
MAX_REQUEST_ID = 128


_bits = random.SystemRandom().getrandbits(64)
_rand = random.Random(_bits)


def _new_id() -> str:
    """A 128-bit random request id without a syscall per request (os.urandom is one)."""
    return "%032x" % _rand.getrandbits(128)


def request_id(headers: dict) -> str:
    """The client's X-Request-Id when it is 1-128 printable ASCII characters (it is echoed
    in a response header), else a new one."""
    rid = headers.get("x-request-id")
    if rid and len(rid) <= MAX_REQUEST_ID and rid.isascii() and rid.isprintable():
        return rid
    return _new_id()


def _header_safe(value: str) -> bool:
    """What may be forwarded to Triton: printable ASCII only (no control characters, no obs-text)."""
    return value.isascii() and value.isprintable()


class UpstreamFailure(Exception):
    def __init__(self, reason: str, status: int = 0, headers=None, body: bytes = b""):
        self.reason, self.status, self.headers, self.body = reason, status, headers, body


def _error(status: int, code: str, detail: str, rid: str, variant: str = "none", extra: dict | None = None):
    body = error_body(code, detail)  # KServe v2: {"error": …} (replies.py)
    headers = {"Content-Type": JSON_CT, "X-Request-Id": rid, "X-Model-Variant": variant}
    if extra:
        headers.update(extra)
    return status, headers, body


def _unavailable(detail: str, rid: str, variant: str, wait_s: float):
    """503 with Retry-After while no replica of the variant can serve (down, restarting,
    loading the model); KServe-shaped body ({"error": …}) with the gateway's code."""
    status, headers, body = _error(503, "no_ready_backend", detail, rid, variant, extra={"Retry-After": retry_after(wait_s)})
    document = json.loads(body)
    document.setdefault("error", detail)
    return status, headers, json.dumps(document).encode()


class Gateway:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.table: RouteTable | None = None
        self.states: dict[tuple[str, str], ReplicaState] = {}
        self.pools: dict = {}
        self.hot = metrics.HotPath()
        self.scores = ScoreSampler()
        self.exposures = ExposureLog(settings.exposure_stream_url)
        self.session: aiohttp.ClientSession | None = None
        self.shadow_queue: asyncio.Queue | None = None
        self.tasks: list[asyncio.Task] = []
        self.stopping = False
        self.metrics_token = (settings.metrics_token or "").encode()
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
        previous_keys = self.table.keys if self.table is not None else None
        table = compile_table(document, self.states, self.pools, previous_keys)  # raises RouteTableError, nothing changed
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
        if self.exposures.enabled:
            self.tasks.append(loop.create_task(self.exposures.run()))

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.exposures.enabled:
            try:
                await asyncio.wait_for(self.exposures.close(), 2.0)
            except Exception:  # noqa: BLE001 - shutting down: what is left is counted as dropped
                EXPOSURES_DROPPED.labels("shutdown").inc(len(self.exposures.buffer))
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
    async def attempt(self, entry, body: bytes, headers: bytes, timeout: float, ep_name: str, variant_name: str,
                      client_bound: bool = False):
        """One upstream attempt. `client_bound`: `timeout` is the client's deadline, below
        the endpoint's floor, so running out of it is the client's doing: no breaker
        count, reason "client_deadline"."""
        state, line, _ = entry
        state.outstanding += 1
        t0 = perf()
        try:
            status, rheaders, data = await state.pool.request(line + headers, body, timeout)
        except asyncio.TimeoutError:
            if client_bound:
                raise UpstreamFailure("client_deadline") from None
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
        if status == 404:
            # Triton's "Request for unknown model": the route table's model is not loaded
            # on this replica (loading, or the replica restarted): the replica's fault,
            # ejected until its ready probe passes; never the client's 404.
            self._failed(state)
            raise UpstreamFailure("not_loaded", status, rheaders, data)
        state.failures = 0
        return status, rheaders, data

    def retry_wait(self, variant) -> float:
        """Seconds until a replica of `variant` may serve again: the soonest breaker probe
        (its cooldown), at least the base cooldown."""
        now = time.monotonic()
        waits = [entry[0].open_until - now for entry in variant.replicas if entry[0].broken]
        return max(self.settings.breaker_cooldown_s, min(waits, default=0.0))

    # --- handlers -----------------------------------------------------------------------
    async def handle(self, request: Request):
        path = request.path
        method = request.method
        if path.startswith("/v2/models/"):
            rest = path[11:]
            if rest.endswith("/infer"):
                if method != "POST":
                    return _error(405, "method_not_allowed", "use POST for /infer", request_id(request.headers), extra={"Allow": "POST"})
                return await self.infer(request, rest[:-6])
            if method == "GET":
                if rest.endswith("/ready"):
                    return self.model_ready(request, rest[:-6])
                if "/" not in rest:
                    return await self.model_metadata(request, rest)
        elif path == "/v2/feedback":
            if method != "POST":
                return _error(405, "method_not_allowed", "use POST for /v2/feedback", request_id(request.headers), extra={"Allow": "POST"})
            return await self.feedback(request)
        elif method == "GET" or method == "HEAD":
            if path == "/metrics":
                return self.metrics(request)
            if path == "/v2/health/live":
                return 200, {"Content-Type": JSON_CT, "X-Request-Id": request_id(request.headers), "X-Model-Variant": "none"}, b'{"live": true}'
            if path in ("/v2/health/ready", "/healthz"):
                return self.health(request)
            if path == "/status":
                return self.status_detail(request)
        return _error(404, "not_found", f"no route for {method} {path[:200]}", request_id(request.headers))

    def _operator(self, request) -> bool:
        """/metrics and /status: open when GATEWAY_METRICS_TOKEN is unset, else only with `Bearer <token>`."""
        if not self.metrics_token:
            return True
        value = request.headers.get("authorization", "")
        scheme, _, token = value.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode("latin-1"), self.metrics_token)

    def metrics(self, request):
        rid = request_id(request.headers)
        if not self._operator(request):
            return _error(401, "unauthorized", "/metrics needs Authorization: Bearer <GATEWAY_METRICS_TOKEN>", rid,
                          extra={"WWW-Authenticate": 'Bearer realm="gateway-metrics"'})
        body, content_type = metrics.exposition()
        return 200, {"Content-Type": content_type, "X-Request-Id": rid, "X-Model-Variant": "none"}, body

    def health(self, request):
        """Live and ready, nothing else: ready once a route table is loaded and until shutdown begins."""
        ready = self.table is not None and not self.stopping
        body = b'{"live": true, "ready": true}' if ready else b'{"live": true, "ready": false}'
        headers = {"Content-Type": JSON_CT, "X-Request-Id": request_id(request.headers), "X-Model-Variant": "none"}
        return (200 if ready else 503), headers, body

    def status_detail(self, request):
        """For operators (behind GATEWAY_METRICS_TOKEN): route source, version, staleness,
        last error, and each replica's breaker."""
        rid = request_id(request.headers)
        if not self._operator(request):
            return _error(401, "unauthorized", "/status needs Authorization: Bearer <GATEWAY_METRICS_TOKEN>", rid,
                          extra={"WWW-Authenticate": 'Bearer realm="gateway-metrics"'})
        table = self.table
        detail = {
            "ready": table is not None and not self.stopping,
            "routes": self.status.detail(),
            "keys": len(table.keys) if table else 0,
            "endpoints": {
                name: {
                    "public": ep.auth.public,
                    "variants": {
                        v.name: {
                            "role": v.role, "weight_bp": v.weight_bp, "triton_model": v.triton_model,
                            "signature": v.signature is not None,
                            "replicas": {e[0].base: ("open" if e[0].broken else "closed") for e in v.replicas},
                        }
                        for v in ep.variants
                    },
                }
                for name, ep in (table.endpoints.items() if table else ())
            },
        }
        return 200, {"Content-Type": JSON_CT, "X-Request-Id": rid, "X-Model-Variant": "none"}, json.dumps(detail).encode()

    def _endpoint_for_read(self, request, name: str):
        """(endpoint, None) when the caller may read this endpoint (metadata, ready), else (None, response)."""
        rid = request_id(request.headers)
        table = self.table
        ep = table.endpoints.get(name) if table else None
        if ep is None:
            return None, _error(404, "unknown_endpoint", f"unknown endpoint {name[:200]!r}", rid)
        if not ep.auth.public:
            key, rejection = authenticate(request.headers, ep.auth, table.keys, name, perf())
            if rejection is not None:
                problem, reason, wait = rejection
                return None, self._rejected(problem, reason, wait, rid, ep.name, key)
            release(key)
        return ep, None

    def model_ready(self, request, name: str):
        ep, response = self._endpoint_for_read(request, name)
        if ep is None:
            return response
        ok = ep.stable.available
        return (200 if ok else 503), {"X-Request-Id": request_id(request.headers), "X-Model-Variant": ep.stable.name}, b""

    async def model_metadata(self, request, name: str):
        ep, response = self._endpoint_for_read(request, name)
        if ep is None:
            return response
        rid = request_id(request.headers)
        stable = ep.stable
        entry = stable.pick()
        if entry is None:
            return _error(503, "no_ready_backend", f"endpoint {name!r}: stable variant has no ready replica", rid, stable.name)
        try:
            status, rheaders, body = await entry[0].pool.request(entry[2], b"", ep.timeout_s)
            ct = rheaders.get("content-type", JSON_CT)
        except (UpstreamError, asyncio.TimeoutError, OSError) as exc:
            return _error(502, "upstream_error", f"metadata from the stable variant: {type(exc).__name__}", rid, stable.name)
        if not _header_safe(ct):
            ct = JSON_CT
        body = public_metadata(body, status, name, stable)
        return status, {"Content-Type": ct, "X-Request-Id": rid, "X-Model-Variant": stable.name}, body

    def _rejected(self, problem: Problem, reason: str, wait: float, rid: str, ep_name: str, key):
        metrics.AUTH_REJECTIONS.labels(ep_name, key.team if key else "", key.id if key else "", reason).inc()
        status, code, detail = problem
        extra = None
        if status == 401:
            extra = {"WWW-Authenticate": 'Bearer realm="inference"'}
        elif status == 429:
            extra = {"Retry-After": retry_after(wait)}
        return _error(status, code, detail, rid, extra=extra)

    async def infer(self, request: Request, name: str):
        t0 = perf()
        headers = request.headers
        rid = request_id(headers)
        table = self.table
        ep = table.endpoints.get(name) if table is not None else None
        if ep is None:
            # one "(unknown)" bucket, never the client's string: metric cardinality stays bounded
            if table is None:
                return self._done(request, _error(503, "no_routes", "no route table loaded yet", rid), t0,
                                  metrics.UNKNOWN_ENDPOINT, "none", BACKEND)
            return self._done(request, _error(404, "unknown_endpoint", f"unknown endpoint {name[:200]!r}", rid), t0,
                              metrics.UNKNOWN_ENDPOINT, "none", CLIENT)
        key, rejection = authenticate(headers, ep.auth, table.keys, name, t0)
        if rejection is not None:
            problem, reason, wait = rejection
            return self._done(request, self._rejected(problem, reason, wait, rid, name, key), t0, name, "none", CLIENT, key)
        in_flight = self.hot.in_flight
        in_flight[name] = in_flight.get(name, 0) + 1
        try:
            return await self._infer(request, ep, headers, rid, t0, key)
        finally:
            in_flight[name] -= 1
            if key is not None:
                release(key)

    def _done(self, request, response, t0: float, ep_name: str, variant: str, fault: str, tenant=None):
        status = response[0]
        conn = request.conn
        if conn is not None and conn.lost and fault is not BACKEND:
            status, fault = 499, CLIENT  # nobody got the reply (nginx's "client closed request")
        self.hot.done(ep_name, variant, status, perf() - t0, fault, tenant)
        return response

    def _client_error(self, request, problem, rid: str, t0: float, name: str, tenant):
        status, code, detail = problem
        return self._done(request, _error(status, code, detail, rid), t0, name, "none", CLIENT, tenant)

    async def _infer(self, request: Request, ep, headers, rid: str, t0: float, tenant):
        name = ep.name
        body = request.body  # the HTTP server enforces the size limit (413) while reading
        timeout = ep.timeout_s
        raw_timeout = headers.get("x-request-timeout-ms")
        if raw_timeout is not None:
            if not (raw_timeout.isascii() and raw_timeout.isdigit()) or len(raw_timeout) > MAX_TIMEOUT_DIGITS or int(raw_timeout) == 0:
                return self._client_error(request, Problem(400, "bad_timeout", "X-Request-Timeout-Ms must be a positive integer "
                                                           f"of at most {MAX_TIMEOUT_DIGITS} digits, got {raw_timeout[:40]!r}"),
                                          rid, t0, name, tenant)
            timeout = min(timeout, int(raw_timeout) / 1000.0)  # a client may shorten the deadline, not lengthen it
        client_limited = timeout < ep.min_timeout_s
        deadline = t0 + timeout

        up_headers = b""
        encoding = None
        for key, out_key in FORWARD_REQUEST:
            value = headers.get(key)
            if value is not None:
                if not (value.isascii() and value.isprintable()):  # _header_safe, inlined (hot path)
                    return self._client_error(request, Problem(400, "bad_header", f"{out_key} has characters other than "
                                                               "printable ASCII"), rid, t0, name, tenant)
                if key == "content-encoding":
                    encoding = value
                up_headers += f"{out_key}: {value}\r\n".encode("latin-1")

        # One parse of the request (orjson) and its model-independent checks, then the
        # chosen variant's signature: a request that does not fit never reaches Triton.
        plain = body if encoding is None else inflate(body, encoding, self.settings.max_body_bytes)
        if type(plain) is Problem:
            return self._client_error(request, plain, rid, t0, name, tenant)
        parsed = parse_request(plain, headers.get("inference-header-content-length"))
        if type(parsed) is Problem:
            return self._client_error(request, parsed, rid, t0, name, tenant)
        variant = ep.choose(headers.get(ep.sticky_key))
        stable = ep.stable
        signature = variant.signature
        failure = None
        if signature is not None:
            problem = signature.check(parsed)
            if problem is not None:
                if variant is stable or (stable.signature is not None and stable.signature.check(parsed) is not None):
                    return self._client_error(request, problem, rid, t0, name, tenant)
                # The stable takes this request and the candidate does not (a breaking
                # signature change): the candidate's failure, served by the stable.
                failure = UpstreamFailure("incompatible")

        entry = None
        if failure is None:
            entry = variant.pick()
            if entry is None and variant is stable:
                entry = stable.pick_panic()  # every stable replica ejected: try a live one rather than refuse all
            if entry is None:
                if variant is stable:
                    return self._done(request, _unavailable(f"endpoint {name!r}: no ready replica for variant {variant.name!r}",
                                                            rid, variant.name, self.retry_wait(variant)), t0, name, variant.name, BACKEND, tenant)
                failure = UpstreamFailure("unavailable")
        if entry is not None:
            attempt_timeout = timeout if variant.attempt_timeout_s is None else min(timeout, variant.attempt_timeout_s)
            client_bound = client_limited and attempt_timeout == timeout
            try:
                status, rheaders, data = await self.attempt(entry, body, up_headers, attempt_timeout, name, variant.name, client_bound)
            except UpstreamFailure as exc:
                failure = exc
        if failure is not None:
            if failure.reason == "client_deadline":
                return self._done(request, self._deadline(name, timeout, ep, rid, variant.name), t0, name, variant.name, CLIENT, tenant)
            if failure.reason != "unavailable":
                metrics.UPSTREAM_ERRORS.labels(name, variant.name, failure.reason).inc()
            # One retry: canary/arm -> stable (failover); stable -> another stable replica
            # only when the first never reached the model (connect error). Not when the
            # request does not fit the stable's signature (a candidate with a new input).
            retry_variant = None
            if variant is not stable or failure.reason in ("connect", "not_loaded"):
                retry_variant = stable
                if variant is not stable and failure.reason != "incompatible" and stable.signature is not None \
                        and stable.signature is not signature and stable.signature.check(parsed) is not None:
                    retry_variant = None
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
                    status, rheaders, data = await self.attempt(retry_entry, body, up_headers, remaining, name, variant.name, client_limited)
                    failure = None
                except UpstreamFailure as exc:
                    failure = exc
                    if exc.reason != "client_deadline":
                        metrics.UPSTREAM_ERRORS.labels(name, variant.name, exc.reason).inc()
            if failure is not None:
                fault = BACKEND
                if failure.reason == "client_deadline":
                    response, fault = self._deadline(name, timeout, ep, rid, variant.name), CLIENT
                elif failure.reason == "timeout" or deadline - perf() <= 0:
                    response = _error(504, "deadline_exceeded", f"no reply from {name!r} within {timeout * 1000:.0f} ms", rid, variant.name)
                elif failure.reason == "5xx":
                    status, rheaders, data = failure.status, failure.headers, failure.body
                    response = None
                elif failure.reason in ("unavailable", "incompatible") and retry_entry is None:
                    response = _unavailable(f"endpoint {name!r}: no ready replica", rid, variant.name, self.retry_wait(variant))
                elif failure.reason in ("not_loaded", "connect"):
                    # the replica is restarting or loading the model: come back shortly
                    what = "is loading the model" if failure.reason == "not_loaded" else "is not accepting connections"
                    response = _unavailable(f"endpoint {name!r}: the replica of variant {variant.name!r} {what}; retry shortly",
                                            rid, variant.name, self.retry_wait(variant))
                else:
                    response = _error(502, "upstream_error", f"endpoint {name!r}: upstream {failure.reason} on variant {variant.name!r}", rid, variant.name)
                if response is not None:
                    return self._done(request, response, t0, name, variant.name, fault, tenant)

        if ep.shadows and ep.shadow_sample_rate > 0.0 and random.random() < ep.shadow_sample_rate:
            self._queue_shadow(ep, body, up_headers, parsed)

        out = {"X-Request-Id": rid, "X-Model-Variant": variant.name}
        for key, out_key in FORWARD_RESPONSE:
            value = rheaders.get(key)
            if value is not None and value.isascii() and value.isprintable():
                out[out_key] = value
        # the endpoint's name, not the Triton model's (replies.py)
        if status == 200:
            public = public_reply(data, out.get("Content-Encoding"), variant.reply_from, variant.reply_to)
            if public is not None:
                json_length = out.get(IHCL)
                if json_length is None:
                    data = public[0]
                elif json_length.isdigit():  # binary tensors follow the JSON part: its length moves
                    out[IHCL] = str(int(json_length) + public[1])
                    data = public[0]
        else:
            data = rename_error(data, out.get("Content-Encoding"), variant.triton_model.encode(), name.encode())
        fault = OK if status < 400 else (CLIENT if status < 500 else BACKEND)
        response = self._done(request, (status, out, data), t0, name, variant.name, fault, tenant)
        if status == 200:  # after the latency is taken: sampling must not tilt the judge's comparison
            self.scores.maybe_observe(name, variant.name, rheaders, data, candidate=variant is not stable,
                                      at_least=ep.stable_score_rate)
            if ep.experiment:  # the assigned arm (intention to treat), even when failed over to stable
                self.exposures.record(rid, ep.experiment, name, variant.name, headers.get(ep.sticky_key), data,
                                      rheaders.get("content-encoding"))
        return response

    async def feedback(self, request: Request):
        """POST /v2/feedback: a batch for one endpoint, with the endpoint's key (like /infer)."""
        rid = request_id(request.headers)
        ok = {"Content-Type": JSON_CT, "X-Request-Id": rid, "X-Model-Variant": "none"}
        try:
            checked = check_feedback(json.loads(request.body or b"null"))
        except ValueError:
            checked = "the body is not JSON"
        if isinstance(checked, str):
            return _error(400, "invalid_feedback", checked, rid)
        name, events = checked
        table = self.table
        ep = table.endpoints.get(name) if table is not None else None
        if ep is None:
            return _error(404, "unknown_endpoint", f"unknown endpoint {name[:200]!r}", rid)
        key, rejection = authenticate(request.headers, ep.auth, table.keys, name, perf())
        if rejection is not None:
            problem, reason, wait = rejection
            return self._rejected(problem, reason, wait, rid, name, key)
        try:
            if not self.exposures.enabled:
                return _error(503, "no_feedback_stream", "this gateway has no feedback stream (GATEWAY_EXPOSURE_STREAM_URL); "
                                                         "POST /api/v1/feedback/ on the control plane", rid)
            await self.exposures.relay_feedback(name, events, getattr(key, "id", None))
        except Exception:  # noqa: BLE001 - the stream is down: the client retries (event ids keep it idempotent)
            return _error(503, "feedback_unavailable", "the feedback stream cannot be reached; retry", rid, extra={"Retry-After": "1"})
        finally:
            if key is not None:
                release(key)
        return 202, ok, json.dumps({"accepted": len(events)}).encode()

    @staticmethod
    def _deadline(name: str, timeout: float, ep, rid: str, variant: str):
        return _error(504, "deadline_exceeded", f"no reply from {name!r} within the client's {timeout * 1000:.0f} ms "
                      f"(below this endpoint's floor of {ep.min_timeout_s * 1000:.0f} ms: counted as the client's)", rid, variant)

    # --- shadow -------------------------------------------------------------------------
    def _queue_shadow(self, ep, body: bytes, up_headers: bytes, parsed: Parsed) -> None:
        queue = self.shadow_queue
        for shadow in ep.shadows:
            if shadow.signature is not None and shadow.signature.check(parsed) is not None:
                # the primary took this request and the shadow's model cannot: the shadow's failure
                metrics.SHADOW_REQUESTS.labels(ep.name, shadow.name, "incompatible").inc()
                continue
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


async def serve(settings: Settings, ready: asyncio.Event | None = None) -> None:
    gateway = Gateway(settings)
    await gateway.start()
    loop = asyncio.get_running_loop()
    server = HttpServer(gateway.handle, limits=settings.limits())
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

    def on_signal():
        if stop.is_set():  # a second signal: no more waiting
            os._exit(1)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    await stop.wait()
    # Shutdown: readiness turns 503 and new connections are refused; replies in progress
    # finish (with Connection: close) within the grace period; then the process exits.
    # A watchdog thread makes sure of the exit even if something below hangs.
    grace = settings.shutdown_grace_s
    watchdog = threading.Timer(grace + 3.0, os._exit, (1,))
    watchdog.daemon = True
    watchdog.start()
    log.info("shutting down: finishing requests in progress (up to %.1f s)", grace)
    gateway.stopping = True
    await server.close(grace)
    await gateway.close()
    watchdog.cancel()
