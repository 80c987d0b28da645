"""The OpenAI API of the gateway: POST /v1/chat/completions, POST /v1/completions,
GET /v1/models and GET /v1/models/{model} (models.py); and Triton's generate extension on the
same endpoints, POST /v2/models/{endpoint}/generate and /generate_stream (a completion whose
body and reply are Triton's: `text_input` in, `text_output` out; refusals in the v2 shape):
the same keys, quotas, split, failover, metrics and judge.

One request: check the body (requests.py); find the endpoint its `model` names and who may
call it (a public endpoint: anyone, credentials ignored; otherwise a valid key scoped to it,
looked up as the tensor path looks it up, tenants.lookup_key; an unknown model and one the
caller may not call get the same 404 model_not_found, whatever credentials came with it: no
key, one that is no key, another team's — so a mistyped name is named as unknown even with a
client's placeholder key, and nothing tells a private model from a name that does not exist);
fit max_tokens to the context; take the key's limits (quotas.py); choose the variant (sticky
header, else `user`, else the weighted split); then the request is a `Call` (call.py): its
backends tried in order until one gives a first token, the reply streamed (SSE) or collected,
and its accounting done once.

What a tenant's backend may cost the others: it is reached only at addresses the outbound
guard allows (guard.py, checked at every connection; a refused attempt moves on to the next
backend like a failed one, and a request no backend may serve gets 502 `backend_not_allowed`);
a request carrying this installation's hop mark came back through a loop and gets 508
`loop_detected`; a reply that is not streamed is bounded in bytes, per request and per key and
team on the host (buffers.py). Each refusal is counted in gateway_llm_refusals{endpoint,reason}.
"""

from __future__ import annotations

import asyncio
from time import perf_counter

import aiohttp

from gateway.keys.tenants import lookup_key
from gateway.llm import failover, models, quotas
from gateway.llm.call import SSE, Call
from gateway.llm.errors import LlmError, model_not_found, reply, reply_v2
from gateway.llm.generate import parse_generate
from gateway.llm.guard import HOP_KEY, OutboundGuard
from gateway.llm.metrics import LlmMetrics
from gateway.llm.requests import MAX_USER, fit_context, parse
from gateway.table.breaker import Breakers
from gateway.telemetry.metrics import AUTH_REJECTIONS, UNKNOWN_ENDPOINT
from gateway.wire.faults import CLIENT, Problem
from gateway.wire.headers import deadline_s
from gateway.wire.httpserver import Streamed
from gateway.wire.ids import exposure_id, request_id

PATHS = {"/v1/chat/completions": "POST", "/v1/completions": "POST", "/v1/models": "GET, HEAD"}
MODEL_TEMPLATE = "/v1/models/{model}"
MODEL_PREFIX = "/v1/models/"
TEMPLATES = {MODEL_TEMPLATE: "GET, HEAD"}  # paths with a part of the client's (server.http_routes lists them)
UPSTREAM_CONNECTIONS = 4096  # connections to LLM backends at once, in this worker (one per stream in flight)


class LlmService:
    def __init__(self, gateway):
        self.gateway = gateway
        self.metrics = LlmMetrics()
        self.breakers = Breakers(gateway.settings, gateway.llm_states)  # its `failed`; no probe loop (routing.py)
        self.session: aiohttp.ClientSession | None = None  # platform pools (kind triton)
        self.tenant_session: aiohttp.ClientSession | None = None  # tenants' URLs (kind openai): the guard's sockets
        settings = gateway.settings
        # this gateway's own ports, at every address of the host (a backend there is a loop)
        self.guard = OutboundGuard(
            [("0.0.0.0", port) for port in (settings.port, settings.grpc_port, settings.control_port) if port]
        )
        self.closing: set[asyncio.Task] = set()  # upstream streams being closed (a task is kept until it ran)

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=UPSTREAM_CONNECTIONS, keepalive_timeout=30.0)
        self.session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))
        guarded = aiohttp.TCPConnector(
            limit=UPSTREAM_CONNECTIONS, keepalive_timeout=30.0, socket_factory=self.guard.socket
        )
        self.tenant_session = aiohttp.ClientSession(connector=guarded, timeout=aiohttp.ClientTimeout(total=None))

    async def close(self) -> None:
        for session in (self.session, self.tenant_session):
            if session is not None:
                await session.close()

    def configure(self, document: dict, platform_urls) -> None:
        """A new route table: its outbound rules and the pool addresses it names (never a tenant's)."""
        self.guard.configure(document.get("llm_rules", {}), platform_urls)
        if self.guard.names:
            task = asyncio.get_running_loop().create_task(self.guard.refresh())
            self.closing.add(task)
            task.add_done_callback(self.closing.discard)

    async def handle(self, request):
        path, method = request.path, request.method
        rid = request_id(request.headers)
        if request.headers.get(HOP_KEY) == self.guard.hop_mark:
            self.metrics.refused(UNKNOWN_ENDPOINT, "loop")
            return reply(
                LlmError(508, "loop_detected", "this request came back through a gateway of this platform: a loop"), rid
            )
        allowed = PATHS.get(path) or (TEMPLATES[MODEL_TEMPLATE] if path.startswith(MODEL_PREFIX) else None)
        if allowed is None:
            return reply(LlmError(404, "not_found", f"no route for {method} {path[:200]}"), rid)
        if method not in allowed.split(", "):
            status, out, body = reply(LlmError(405, "method_not_allowed", f"use {allowed} for {path}"), rid)
            out["Allow"] = allowed
            return status, out, body
        if path == "/v1/models":
            return models.listing(self.gateway.table, self._known_key, request, rid)
        if path.startswith(MODEL_PREFIX):
            return models.one(self.gateway.table, self._known_key, request, rid, path[len(MODEL_PREFIX) :])
        return await self.complete(request, rid, chat=path == "/v1/chat/completions")

    # --- who may call what ---------------------------------------------------------------
    @staticmethod
    def _known_key(table, headers_):
        """The caller's Key; None when it sent none or one that is no key (unknown, revoked,
        malformed), looked up as the tensor path looks it up (tenants.lookup_key)."""
        return lookup_key(headers_, table.keys)[1]

    # --- one completion ------------------------------------------------------------------
    async def generate(self, request, name: str, version: str | None, *, stream: bool):
        """POST /v2/models/{name}[/versions/{v}]/generate[_stream] on an LLM endpoint."""
        rid = request_id(request.headers)
        if request.headers.get(HOP_KEY) == self.guard.hop_mark:
            self.metrics.refused(UNKNOWN_ENDPOINT, "loop")
            return reply_v2(
                LlmError(508, "loop_detected", "this request came back through a gateway of this platform: a loop"), rid
            )
        if version is not None:  # an LLM endpoint's split picks the version; a path cannot
            return reply_v2(LlmError(404, "not_found", "an LLM endpoint is called without a version in its path"), rid)
        return await self.complete(request, rid, chat=False, generate=(name, stream))

    async def complete(self, request, rid: str, *, chat: bool, generate: tuple[str, bool] | None = None):
        t0 = perf_counter()
        table = self.gateway.table
        name, variant_name, tenant = UNKNOWN_ENDPOINT, "none", None
        answer = reply if generate is None else reply_v2
        try:
            if table is None:
                raise LlmError(503, "no_routes", "no route table loaded yet", None, 1.0)
            if generate is None:
                req = parse(request.body, chat=chat)
            else:
                req = parse_generate(request.body, generate[0], stream=generate[1])
            ep = table.llm.get(req.model)
            if ep is None or not ep.auth.public:
                key = self._known_key(table, request.headers)
                if ep is None or key is None or key.id not in ep.auth.allowed:
                    raise model_not_found(req.model)
                tenant = key
            name = ep.name
            sticky = request.headers.get(ep.sticky_key) or req.user
            if sticky is not None and len(sticky) > MAX_USER:
                raise LlmError(400, "invalid_header", f"{ep.sticky_header} is longer than {MAX_USER} characters")
            fit_context(req, ep.context_length, ep.max_tokens_default)
            timeout = deadline_s(request.headers, ep.timeout_s)
            if type(timeout) is Problem:
                raise LlmError(400, timeout[1], timeout[2], "X-Request-Timeout-Ms")
            cost = (req.prompt_estimate + req.max_tokens) * req.n  # n choices: n generations at most
            admission = quotas.admit_call(tenant, name, t0, cost, self.gateway.settings.llm_anonymous_streams)
        except LlmError as exc:
            self.metrics.done(name, variant_name, exc.status, failover.fault(exc.status, exc.code))
            if tenant is not None:
                self.gateway.hot.count_tenant(name, exc.status, tenant)
                if exc.status == 429:  # a key over its limits, as on the tensor path
                    AUTH_REJECTIONS.labels(name, tenant.team, tenant.id, exc.code).inc()
            return answer(exc, rid)
        variant = ep.choose(sticky)
        rid = exposure_id(request.headers, rid, ep.experiment)  # in an experiment, the gateway's own (ids.py)
        call = Call(self, ep, variant, req, tenant, admission, rid, t0, t0 + timeout, cost, sticky)
        if request.conn is not None:
            request.conn.cancellable = True  # a client that leaves cancels this task (and the upstream)
        streamed = False
        try:
            await call.first()
            if req.stream:
                streamed = True
                call.body = Streamed(call.events(), call.finish)  # its generator reads the writer's drains
                return 200, call.reply_headers(SSE), call.body
            return await call.collect()
        except LlmError as exc:
            call.status, call.fault = exc.status, failover.fault(exc.status, exc.code)
            return answer(exc, rid, variant.name)
        except asyncio.CancelledError:
            call.status, call.fault = 499, CLIENT
            raise
        finally:
            if not streamed:
                call.finish()
