"""The gateway process: an HTTP/1.1 server on llhttp (httpserver.py) in front of a pooled
keep-alive HTTP/1.1 client to the Triton replicas (upstream.py); the route table is polled
from the control plane by a thread (source.py), and /metrics and health are also answered off
the event loop on the control port (control.py).

This module holds the process together: the route table and its source, the components
each request path uses (breakers, metrics, score sampler, exposure log, shadows), the
dispatch of paths to their handlers, and start/stop. The handlers live beside it:
infer.py (the hot path, with failover.py's pure decisions), metadata.py (ready, model
metadata), feedback.py, admin.py (health, /metrics, /status).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import threading
import time

from gateway.keys.tenants import set_replicas
from gateway.llm.handler import PATHS as LLM_PATHS
from gateway.llm.handler import TEMPLATES as LLM_TEMPLATES
from gateway.llm.handler import LlmService
from gateway.process import admin
from gateway.process.bodybounds import BodyBounds
from gateway.process.control import ControlThread
from gateway.process.settings import Settings
from gateway.table.breaker import Breakers
from gateway.table.llm import llm_replicas
from gateway.table.routes import ReplicaState, RouteTable, compile_table
from gateway.table.source import FileRouteSource, HttpRouteSource, SourceStatus
from gateway.telemetry import metrics
from gateway.telemetry.eventlog import NatsLog
from gateway.telemetry.exposures import EXPOSURES_DROPPED, ExposureLog
from gateway.telemetry.feedback_stream import FEEDBACK_BODIES_REFUSED, FeedbackRelay
from gateway.telemetry.scores import ScoreSampler
from gateway.v2.feedback import FEEDBACK_TOO_LARGE, EventBuckets, feedback
from gateway.v2.infer import Inference
from gateway.v2.metadata import model_config, model_metadata, model_ready, model_stats, server_metadata
from gateway.v2.paths import MODELS, POST_ACTIONS, model_route, model_templates
from gateway.v2.shadow import Shadows
from gateway.wire.httpserver import HttpServer, Request
from gateway.wire.ids import request_id
from gateway.wire.peers import ClientKeys
from gateway.wire.responses import error, method_not_allowed

__all__ = ["Gateway", "Settings", "serve"]

log = logging.getLogger("gateway")


class Gateway:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.table: RouteTable | None = None
        self.bounds: BodyBounds | None = None  # the table's body bounds (bodybounds.py)
        self.states: dict[tuple[str, str], ReplicaState] = {}
        self.pools: dict = {}
        self.hot = metrics.HotPath()
        self.scores = ScoreSampler()
        log = NatsLog(settings.event_log_url, settings.event_log_prefix) if settings.event_log_url else None
        self.exposures = ExposureLog(settings.exposure_stream_url, log=log)
        self.feedback_buckets = EventBuckets(settings.feedback_events_per_s)
        self.feedback_relay = FeedbackRelay(
            self.exposures,
            floor_per_s=settings.feedback_token_floor_per_s,
            floor_burst=settings.feedback_token_floor_burst,
        )
        self.breakers = Breakers(settings, self.states)
        self.llm_states: dict = {}  # (base URL, model) -> llm.table.LlmReplica, kept across reloads
        self.llm = LlmService(self)
        self.shadows = Shadows(settings.shadow_queue, self.breakers, self.scores)
        self.inference = Inference(self)
        self.grpc_service = None  # gateway/v2/grpc/service.py, set when the gRPC port is served
        self.control = None  # control.ControlThread: /metrics and health off the event loop
        self.poll_offset_s = 0.0
        self.tasks: list[asyncio.Task] = []
        self.stopping = False
        self.metrics_token = (settings.metrics_token or "").encode()
        if settings.routes_url:
            workers = settings.workers if settings.run_dir else 1
            wait_s = max(0.0, settings.route_wait_s)
            # a long poll in flight has not confirmed the table yet: stale only past its wait and timeout
            stale_after_s = max(settings.stale_after_s, 3 * settings.poll_interval_s * workers, wait_s + 3.0)
            self.status = SourceStatus("http", settings.routes_url, stale_after_s)
            # N workers (workers.py) poll in turn, each every N intervals: the control plane sees
            # one gateway's poll rate, one worker sees a change within an interval, all within N.
            # Where the control plane holds a poll until the table changes (long poll), a worker
            # asks again as soon as it is answered, and sees a change as the control plane does.
            self.source = HttpRouteSource(
                self.install,
                self.status,
                settings.poll_interval_s * workers,
                settings.routes_url,
                settings.token,
                wait_s=wait_s,
            )
            self.poll_offset_s = settings.poll_interval_s * (settings.worker_row % workers)
        elif settings.routes_file:
            self.status = SourceStatus("file", str(settings.routes_file), settings.stale_after_s)
            self.source = FileRouteSource(self.install, self.status, settings.poll_interval_s, settings.routes_file)
        else:
            raise ValueError("no route source: set GATEWAY_ROUTES_URL or pass --routes-file")

    # --- routes -------------------------------------------------------------------------
    def install(self, document) -> list:
        """Apply a new table: every entry and key that passes its checks; the refused ones
        are returned (table/checks.Refusal) and counted in gateway_route_refused. Raises
        RouteTableError (nothing changed) only for a document that is not a route table."""
        previous_keys = self.table.keys if self.table is not None else None
        table = compile_table(document, self.states, self.pools, previous_keys, self.llm_states)
        in_use = {(r.base, r.model) for ep in table.llm.values() for r in llm_replicas(ep)}
        for key in list(self.llm_states):
            if key not in in_use:
                state = self.llm_states.pop(key)
                if state.broken:
                    metrics.BREAKER_OPEN.labels(state.base, state.model).set(0)
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
        if self.grpc_service is not None:  # channels to gRPC addresses no route names any more
            targets = {e[3] for ep in table.endpoints.values() for v in ep.variants for e in v.replicas}
            asyncio.get_running_loop().create_task(self.grpc_service.channels.retain(targets))
        self.bounds = BodyBounds(table, self.settings.max_body_bytes)
        self.llm.configure(document, table.pool_addresses())  # the outbound rules of tenant backends
        self.exposures.teams = {name: ep.team for name, ep in table.endpoints.items()}  # the log's subjects
        self.table = table
        metrics.ROUTE_ENDPOINTS.set(len(table.endpoints))
        metrics.ROUTE_LOADED_AT.set(time.time())
        metrics.ROUTE_REFUSED.clear()
        for refusal in table.refusals:
            metrics.ROUTE_REFUSED.labels(refusal.kind, refusal.name, refusal.code).set(1)
        return table.refusals

    # --- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        await self.llm.start()  # LLM backends: their own client (gateway/llm/backends.py says why)
        self.shadows.start()
        if isinstance(self.source, FileRouteSource):
            self.source.check()  # serve from the first request on when the file is good
        else:
            await self.source.fetch_once()
        loop = asyncio.get_running_loop()
        self.tasks = [loop.create_task(self._poll()), loop.create_task(self.breakers.probe_loop())]
        self.tasks += [loop.create_task(self.shadows.worker()) for _ in range(self.settings.shadow_workers)]
        if self.exposures.enabled:
            self.tasks.append(loop.create_task(self.exposures.run()))

    async def _poll(self) -> None:
        await asyncio.sleep(self.poll_offset_s)
        await self.source.run()

    async def close(self) -> None:
        if self.grpc_service is not None:
            await self.grpc_service.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.exposures.enabled:
            try:
                await asyncio.wait_for(self.exposures.close(), 2.0)
            except Exception:  # noqa: BLE001 - shutting down: what is left is counted as dropped
                EXPOSURES_DROPPED.labels("shutdown").inc(len(self.exposures.buffer))
        await self.llm.close()
        for pool in self.pools.values():
            pool.close()

    # --- dispatch -----------------------------------------------------------------------
    def body_bound(self, method: bytes, path: str, headers: dict):
        """The HTTP server's hook, before a body is read: (bytes, why) or None (bodybounds.py)."""
        bounds = self.bounds
        return None if bounds is None else bounds.limit(method, path, headers)

    async def handle(self, request: Request):
        path = request.path
        method = request.method
        if path.startswith(MODELS):
            rest = path[len(MODELS) :]
            if method == "POST" and rest.endswith("/infer") and "/" not in rest[:-6]:  # the hot path
                return await self.inference.infer(request, rest[:-6])
            return await self._model_path(request, rest, method)
        if path.startswith("/v1/"):  # the OpenAI API of LLM endpoints
            return await self.llm.handle(request)
        handler = POST_PATHS.get(path)
        if handler is not None:
            if method != "POST":
                return method_not_allowed("POST", path, request_id(request.headers))
            return await handler(self, request)
        handler = ADMIN_PATHS.get(path)
        if handler is not None:
            if method == "GET" or method == "HEAD":
                result = handler(self, request)
                return result if type(result) is tuple else await result
            return method_not_allowed("GET, HEAD", path, request_id(request.headers))
        return error(404, "not_found", f"no route for {method} {path[:200]}", request_id(request.headers))

    async def _model_path(self, request: Request, rest: str, method: str):
        """/v2/models/{endpoint}[/versions/{v}][/ready|/config|/stats|/infer|/generate|/generate_stream], and
        /v2/models/stats (generate*: Triton's generate extension on an LLM endpoint, llm/handler.py)."""
        route = model_route(rest)
        if route is None:
            return error(404, "not_found", f"no route for {method} {MODELS}{rest[:200]}", request_id(request.headers))
        name, version, action = route
        allowed = "POST" if action in POST_ACTIONS else "GET, HEAD"
        if method not in allowed.split(", "):
            return method_not_allowed(allowed, f"{MODELS}{rest[:200]}", request_id(request.headers))
        if action == "infer":
            return await self.inference.infer(request, name, version)
        if action.startswith("generate"):
            return await self.llm.generate(request, name, version, stream=action == "generate_stream")
        if action == "ready":
            return model_ready(self, request, name, version)
        if action == "config":
            return await model_config(self, request, name, version)
        if action == "stats":
            return await model_stats(self, request, name, version)
        return await model_metadata(self, request, name, version)


POST_PATHS = {"/v2/feedback": feedback}
ADMIN_PATHS = {
    "/v2": server_metadata,
    "/metrics": admin.metrics_page,
    "/v2/health/live": admin.live,
    "/v2/health/ready": admin.ready,
    "/healthz": admin.ready,
    "/health": admin.ready,  # vLLM's name for it, which LLM benchmark tools check first (guidellm)
    "/status": admin.status_page,
}


def http_routes() -> list[str]:
    """`METHOD /template` of every HTTP route the dispatch above serves (HEAD goes with GET):
    the adversarial suite fails when one is missing from its registry."""
    routes = model_templates()
    routes += [f"POST {path}" for path in POST_PATHS]
    routes += [f"GET {path}" for path in ADMIN_PATHS]
    routes += [f"{methods.split(', ')[0]} {path}" for path, methods in (LLM_PATHS | LLM_TEMPLATES).items()]
    return routes


def body_refused(code: str) -> None:
    """A body refused past its route's bound before it was read: counted where its route counts."""
    if code == FEEDBACK_TOO_LARGE:
        FEEDBACK_BODIES_REFUSED.labels(code).inc()


def http_rejected(code: str) -> None:
    metrics.HTTP_REJECTIONS.labels(code).inc()


async def serve(settings: Settings, ready: asyncio.Event | None = None) -> None:
    set_replicas(settings.replicas)
    gateway = Gateway(settings)
    await gateway.start()
    loop = asyncio.get_running_loop()
    server = HttpServer(
        gateway.handle,
        limits=settings.limits(),
        body_bound=gateway.body_bound,
        on_body_refused=body_refused,
        on_rejected=http_rejected,
        on_reaped=metrics.CONNECTIONS_REAPED.inc,
        client_keys=ClientKeys(settings.client_cap_exempt),
    )
    grpc_server = None
    try:
        await server.start(settings.host, settings.port, sock=settings.http_socket)
        # the control port and, with several workers, this worker's metrics socket (/metrics adds
        # up all of them), answered by threads outside this loop (control.py)
        gateway.control = ControlThread(gateway, settings)
        gateway.control.start()
        if settings.grpc_port:
            from gateway.v2.grpc.service import start as start_grpc  # grpcio only where gRPC is served

            grpc_server, _ = await start_grpc(gateway, settings)
    except (OSError, RuntimeError):
        await server.close(0)
        await gateway.close()
        raise
    log.info(
        "gateway listening on http://%s:%d%s (routes: %s %s)",
        settings.host,
        settings.port,
        f" and grpc://{settings.host}:{settings.grpc_port}" if grpc_server else "",
        gateway.status.kind,
        gateway.status.where,
    )
    print(f"gateway listening on http://{settings.host}:{settings.port}", flush=True)
    if grpc_server is not None:
        print(f"gateway gRPC (KServe v2) on {settings.host}:{settings.grpc_port}", flush=True)
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
    if settings.run_dir:  # a worker whose supervisor died (workers.py): serve on while another starts

        def orphaned():
            log.warning(
                "the supervisor is gone: serving %.1f s more while a new gateway starts", settings.shutdown_grace_s
            )
            loop.call_later(settings.shutdown_grace_s, on_signal)

        loop.add_signal_handler(signal.SIGUSR1, orphaned)
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
    closing = [server.close(grace)]
    if grpc_server is not None:
        from gateway.v2.grpc.sockets import stop_listening

        stop_listening(settings.grpc_port)  # out of the port's SO_REUSEPORT group before the GOAWAY
        closing.append(grpc_server.stop(grace))  # GOAWAY, RPCs in progress finish within the grace
    await asyncio.gather(*closing)
    if gateway.control is not None:
        gateway.control.close()
    await gateway.close()
    watchdog.cancel()
