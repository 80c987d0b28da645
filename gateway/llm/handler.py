"""The OpenAI API of the gateway: POST /v1/chat/completions, POST /v1/completions,
GET /v1/models and GET /v1/models/{model} (models.py).

One request: check the body (requests.py); find the endpoint its `model` names and who may
call it (a public endpoint: anyone, credentials ignored; otherwise a valid key scoped to it;
an unknown model and one the caller may not call get the same 404 model_not_found, whatever
credentials came with it: no key, one that is no key, another team's — so a mistyped name is
named as unknown even with a client's placeholder key, and nothing tells a private model from
a name that does not exist); fit
max_tokens to the context; take the key's limits (quotas.py); choose the variant (sticky
header, else `user`, else the weighted split); try backends in order (routing.chain) until
one gives a first token within first_token_timeout_ms; then stream it (SSE) or collect it.

After the first token a stream is never retried on another backend: the client has text
from one model already, and a second model would continue someone else's sentence. A
failure then ends the stream with an error event (`data: {"error": {...}}`, which OpenAI's
clients raise as an APIError) and `data: [DONE]`; a reply that is not streamed gets a 502.
A client that goes away cancels the handler (httpserver's `cancellable`): the upstream
connection is closed at once, so the backend stops generating.

What a tenant's backend may cost the others: it is reached only at addresses the outbound
guard allows (guard.py, checked at every connection; a refused attempt moves on to the next
backend like a failed one, and a request no backend may serve gets 502 `backend_not_allowed`);
a request carrying this installation's hop mark came back through a loop and gets 508
`loop_detected`; a reply that is not streamed is bounded in bytes, per request and per key and
team on the host (buffers.py). Each refusal is counted in gateway_llm_refusals{endpoint,reason}.
A stream that ends without the backend's usage (a client that hung up) is charged what passed:
the model's own count when the backend sends one (`generated_tokens`), else the text events
relayed or characters / 4, whichever is more.

A request its variant's own backends did not serve (they failed before the first token, or
every replica's breaker is open) and the endpoint's fallbacks did is the variant's failure
for the judge: `gateway_llm_rescued{endpoint,variant,reason}` counts it, and its outcome,
TTFT, ITL and tokens go under variant="fallback" (FALLBACK), so a canary whose backend is
dead is neither timed on another backend's tokens nor seen as healthy because the fallbacks
answered for it. Each key's requests by status (errors per tenant) go to the tensor path's
gateway_tenant_requests, and its TTFT and ITL to gateway_llm_tenant_*_seconds.

Why this is one long module: the request's life (admission, attempts, the two
reply shapes, the accounting every exit must do once) shares one set of locals; split, each
part would pass all of them around.
"""

from __future__ import annotations

import asyncio
import time
from hashlib import sha256
from time import perf_counter

import aiohttp
import orjson

from ..breaker import Breakers
from ..failover import BACKEND, CLIENT, OK
from ..feedback_rules import endpoint_token
from ..headers import deadline_s
from ..httpserver import Streamed
from ..ids import exposure_id, new_id, request_id
from ..metrics import AUTH_REJECTIONS, UNKNOWN_ENDPOINT
from ..tenants import MAX_KEY_LENGTH, presented_key
from ..tensors import Problem
from . import models, quotas, routing
from .backends import Attempt, BackendFailure, Piece
from .buffers import ReplyBuffer
from .errors import LlmError, headers, model_not_found, reply
from .guard import HOP_KEY, OutboundGuard
from .metrics import ITL_BUCKETS, LlmMetrics
from .requests import MAX_USER, estimate_tokens, fit_context, parse

PATHS = {"/v1/chat/completions": "POST", "/v1/completions": "POST", "/v1/models": "GET, HEAD"}
MODEL_TEMPLATE = "/v1/models/{model}"
MODEL_PREFIX = "/v1/models/"
TEMPLATES = {MODEL_TEMPLATE: "GET, HEAD"}  # paths with a part of the client's (server.http_routes lists them)
SSE = "text/event-stream"
DONE = b"data: [DONE]\n\n"
FALLBACK = "fallback"  # the variant label of requests the endpoint's fallbacks served (never a variant's name: v<n>-…)
TAIL_S = 5.0  # after the finish: how long the backend may take to send its usage and end the stream
UPSTREAM_CONNECTIONS = 4096  # connections to LLM backends at once, in this worker (one per stream in flight)


def paced_by_client(drained: bool, held: float, gap: float) -> bool:
    """Whether the client's reading, not the backend, set a gap between two chunks: the writer
    waited for the client to drain its full socket (`drained`), for more than half of the gap."""
    return drained and held * 2 > gap


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
        malformed): the hash is looked up whenever something was presented, so both cost alike."""
        token = presented_key(headers_)
        if token is None or type(token) is Problem or len(token) > MAX_KEY_LENGTH:
            return None
        return table.keys.get(sha256(token.encode("latin-1")).hexdigest())

    # --- one completion ------------------------------------------------------------------
    async def complete(self, request, rid: str, *, chat: bool):
        t0 = perf_counter()
        table = self.gateway.table
        name, variant_name, tenant = UNKNOWN_ENDPOINT, "none", None
        try:
            if table is None:
                raise LlmError(503, "no_routes", "no route table loaded yet", None, 1.0)
            req = parse(request.body, chat=chat)
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
            cost = req.prompt_estimate + req.max_tokens
            admission = quotas.admit_call(tenant, name, t0, cost, self.gateway.settings.llm_anonymous_streams)
        except LlmError as exc:
            self.metrics.done(name, variant_name, exc.status, BACKEND if exc.status >= 500 else CLIENT)
            if tenant is not None:
                self.gateway.hot.count_tenant(name, exc.status, tenant)
                if exc.status == 429:  # a key over its limits, as on the tensor path
                    AUTH_REJECTIONS.labels(name, tenant.team, tenant.id, exc.code).inc()
            return reply(exc, rid)
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
            call.status, call.fault = (
                exc.status,
                BACKEND if exc.status >= 500 or exc.code == "upstream_rate_limited" else CLIENT,
            )
            return reply(exc, rid, variant.name)
        except asyncio.CancelledError:
            call.status, call.fault = 499, CLIENT
            raise
        finally:
            if not streamed:
                call.finish()


def _given_up(ep, last: BackendFailure | None, saw_replica: bool) -> LlmError:
    """The error of a request no backend served."""
    if not saw_replica:
        return LlmError(
            503, "no_ready_backend", f"no backend of model {ep.name!r} can serve now (all cooling down)", None, 1.0
        )
    if last is not None and last.reason == "429":
        return LlmError(429, "upstream_rate_limited", f"every backend is rate limited: {last.message}", None, 1.0)
    if last is not None and last.reason == "timeout":
        return LlmError(504, "first_token_timeout", f"no backend gave a first token: {last.message}")
    if last is not None and last.reason == "guard":
        return LlmError(502, "backend_not_allowed", f"no backend the gateway may call: {last.message}")
    return LlmError(502, "upstream_error", f"no backend could serve: {last.message if last else 'none'}")


class Call:
    """One LLM request from its first attempt to its accounting (done once, in `finish`)."""

    def __init__(self, service, ep, variant, req, tenant, admission, rid, t0, deadline, cost, sticky):
        self.service, self.ep, self.variant, self.req = service, ep, variant, req
        self.tenant, self.admission, self.rid, self.t0, self.deadline = tenant, admission, rid, t0, deadline
        self.cost, self.sticky = cost, sticky
        self.label = variant.name  # FALLBACK once the endpoint's fallbacks serve it
        self.metrics: LlmMetrics = service.metrics
        self.attempt: Attempt | None = None
        self.backend = None
        self.pieces = None
        self.first_piece: Piece | None = None
        self.text_chars = 0
        self.text_events = 0  # backend events that carried text (each at least one token)
        self.generated = None  # completion tokens so far by the backend's own count (generated_tokens)
        self.prompt_tokens = None
        self.completion_tokens = None
        self.finish_reason = None
        self.status, self.fault = 200, OK
        self.finished = False
        self.body: Streamed | None = None  # the streamed reply (its writer's drains: paced_by_client)
        self.buffer: ReplyBuffer | None = None  # the bytes a collected reply holds (buffers.py)
        self.id = new_id()
        self.created = int(time.time())
        streams = self.metrics.streams
        streams[ep.name] = streams.get(ep.name, 0) + 1

    # --- before the first token: the fallback chain --------------------------------------
    async def first(self) -> None:
        ep, req = self.ep, self.req
        breakers = self.service.breakers
        # a session's key keeps its conversation on one replica (its growing prompt's prefix
        # would move once it passes prefix_affinity_chars); without one, the prompt's prefix
        prefix = self.sticky.encode("utf-8", "surrogatepass") if self.sticky else routing.prefix_of(ep, req.rendered)
        last: BackendFailure | None = None
        saw_replica = False
        own = self.variant.backends
        own_failure = "cooldown"  # what kept the variant's own backends from serving (none tried: breakers open)
        for backend in routing.chain(ep, self.variant):
            excluded = []
            for _ in range(routing.MAX_REPLICAS_PER_BACKEND):
                replica = routing.pick(backend, prefix, self.cost, time.monotonic(), excluded)
                if replica is None:
                    break
                saw_replica = True
                excluded.append(replica)
                remaining = self.deadline - perf_counter()
                if remaining <= 0:
                    raise LlmError(504, "deadline_exceeded", "the request's deadline passed before a backend answered")
                outcome = await self._attempt(backend, replica, remaining)
                if not isinstance(outcome, BackendFailure):
                    if not any(backend is b for b in own):
                        self.label = FALLBACK
                        self.metrics.rescue(ep.name, self.variant.name, own_failure)
                    self.metrics.observe(self.metrics.queue, (ep.name, self.label), outcome)
                    return
                last = outcome
                if last.reason == "guard":  # nothing was sent: not the replica's failure, no breaker
                    self.metrics.refused(ep.name, last.rule)
                    if any(backend is b for b in own):
                        own_failure = "guard"
                    continue
                if last.reason == "refused":
                    if last.status in (400, 413, 422):  # its words name what it cannot take (ignore_eos, ...)
                        raise LlmError(400, "backend_refused", last.message.replace(backend.model, ep.name))
                    routing.failed(replica, breakers)
                    raise LlmError(502, "upstream_error", last.message)
                reason = "5xx" if last.reason == "protocol" else last.reason
                routing.failed(replica, breakers, refused=reason == "connect")
                self.metrics.fallback(ep.name, backend.id, reason)
                if any(backend is b for b in own):
                    own_failure = reason
        raise _given_up(ep, last, saw_replica)

    async def _attempt(self, backend, replica, remaining: float):
        """One attempt up to its first token: the queue time (arrival -> request sent) when it
        gave one (the Call then holds the attempt), else the BackendFailure (released)."""
        ep = self.ep
        routing.taken(replica, self.service.breakers.cooldown_s)
        replica.outstanding += 1
        replica.tokens += self.cost
        service = self.service
        session = service.tenant_session if backend.kind == "openai" else service.session
        attempt = Attempt(session, backend, replica, self.req, service.guard.hop_mark)
        pieces = attempt.pieces()
        queued = perf_counter() - self.t0
        try:
            async with asyncio.timeout(min(ep.first_token_timeout_s, remaining)):
                await attempt.open()
                try:
                    piece = await anext(pieces)
                except StopAsyncIteration:
                    piece = Piece("", "stop")
        except TimeoutError:
            failure = BackendFailure("timeout", f"no first token within {ep.first_token_timeout_s * 1000:g} ms")
        except BackendFailure as exc:
            failure = exc
        except BaseException:
            self._release(attempt, replica)
            await pieces.aclose()
            raise
        else:
            routing.succeeded(replica)
            self.attempt, self.backend, self.pieces, self.first_piece = attempt, backend, pieces, piece
            self._count(piece)
            return queued
        self._release(attempt, replica)
        await pieces.aclose()
        return failure

    def _release(self, attempt: Attempt, replica) -> None:
        attempt.close()
        replica.outstanding -= 1
        replica.tokens -= self.cost

    def _count(self, piece: Piece) -> None:
        if piece.text:
            self.text_chars += len(piece.text)
            self.text_events += 1
        if piece.generated is not None and (self.generated is None or piece.generated > self.generated):
            self.generated = piece.generated
        if piece.prompt_tokens is not None:
            self.prompt_tokens = piece.prompt_tokens
        if piece.completion_tokens is not None:
            self.completion_tokens = piece.completion_tokens
        if piece.finish_reason:
            self.finish_reason = piece.finish_reason

    async def _next(self):
        remaining = self.deadline - perf_counter()
        if remaining <= 0:
            raise BackendFailure("timeout", "the request's deadline passed")
        try:
            async with asyncio.timeout(remaining):
                piece = await anext(self.pieces)
        except TimeoutError:
            raise BackendFailure("timeout", "the request's deadline passed during the generation") from None
        self._count(piece)
        return piece

    async def _rest(self) -> None:
        """After the finish: what the backend still sends (its usage), text ignored, to its end;
        a backend that stalls there is left after TAIL_S (the reply goes out without its usage)."""
        chars, events = self.text_chars, self.text_events
        try:
            async with asyncio.timeout(TAIL_S):
                while True:
                    await self._next()
        except (StopAsyncIteration, TimeoutError):
            pass
        self.text_chars, self.text_events = chars, events

    # --- replies -------------------------------------------------------------------------
    def reply_headers(self, content_type: str) -> dict:
        out = headers(self.rid, self.variant.name, content_type)
        ep = self.ep
        if ep.exposure_token_key:
            out["X-Exposure-Token"] = endpoint_token(ep, self.variant.name, self.rid, self.sticky)
        if content_type == SSE:
            out["Cache-Control"] = "no-cache"
        return out

    def usage(self) -> dict:
        prompt = self.prompt_tokens if self.prompt_tokens is not None else self.req.prompt_estimate
        completion = self.completion_tokens
        if completion is None:  # the stream ended before its usage: what passed, counted
            completion = max(self.generated or 0, self.text_events, estimate_tokens(self.text_chars))
        else:  # each event that carried text was at least one token, whatever a usage says
            completion = max(completion, self.text_events)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def _finish_reason(self) -> str:
        if self.finish_reason in ("stop", "length"):
            return self.finish_reason
        done = self.completion_tokens
        return "length" if done is not None and done >= self.req.max_tokens else "stop"

    def _chunk(self, text: str | None, finish: str | None, first: bool = False) -> bytes:
        if self.req.chat:
            delta = {} if text is None else {"content": text}
            if first:
                delta = {"role": "assistant", **delta}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            kind = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
            kind = "text_completion"
        body = {"id": self._id(), "object": kind, "created": self.created, "model": self.ep.name, "choices": [choice]}
        if self.req.continuous_usage:  # vLLM's stream_options.continuous_usage_stats: the usage so far
            body["usage"] = self.usage()
        return b"data: " + orjson.dumps(body) + b"\n\n"

    def _id(self) -> str:
        return ("chatcmpl-" if self.req.chat else "cmpl-") + self.id

    async def events(self):
        """The SSE reply: the first token's chunk, one chunk per piece, the finish, usage, [DONE]."""
        ep_v = (self.ep.name, self.label)
        metrics = self.metrics
        tenant = None if self.tenant is None else (self.tenant.team, self.tenant.id)
        piece = self.first_piece
        first = True
        last_sent = resumed = 0.0
        body, drains = self.body, 0
        try:
            while True:
                if piece.text or first:
                    now = perf_counter()
                    if first:
                        metrics.observe(metrics.ttft, ep_v, now - self.t0)
                        if tenant is not None:
                            metrics.observe(metrics.tenant_ttft, tenant, now - self.t0)
                    elif paced_by_client(body.drains != drains, resumed - last_sent, now - last_sent):
                        metrics.client_paced(ep_v)
                    else:
                        metrics.observe(metrics.itl, ep_v, now - last_sent, ITL_BUCKETS)
                        if tenant is not None:
                            metrics.observe(metrics.tenant_itl, tenant, now - last_sent, ITL_BUCKETS)
                    last_sent = now
                    drains = body.drains
                    yield self._chunk(piece.text, None, first)
                    resumed = perf_counter()  # the writer took the chunk (a slow reader: after it drained)
                    first = False
                if piece.finish_reason:
                    await self._rest()
                    break
                try:
                    piece = await self._next()
                except StopAsyncIteration:
                    break
        except BackendFailure as failure:
            self.status, self.fault = 502, BACKEND
            error = {"message": f"the generation failed after its first token: {failure.message}"[:500]}
            error.update({"type": "server_error", "param": None, "code": "upstream_error"})
            yield b"data: " + orjson.dumps({"error": error}) + b"\n\n" + DONE
            return
        except asyncio.CancelledError:
            self.status, self.fault = 499, CLIENT
            raise
        except GeneratorExit:
            self.status, self.fault = 499, CLIENT
            raise
        tail = self._chunk(None, self._finish_reason())
        if self.req.include_usage:
            usage = {"id": self._id(), "object": "chat.completion.chunk" if self.req.chat else "text_completion"}
            usage.update({"created": self.created, "model": self.ep.name, "choices": [], "usage": self.usage()})
            tail += b"data: " + orjson.dumps(usage) + b"\n\n"
        yield tail + DONE

    async def collect(self):
        """The whole reply of a request that did not ask for a stream."""
        ttft = perf_counter() - self.t0
        self.metrics.observe(self.metrics.ttft, (self.ep.name, self.label), ttft)
        if self.tenant is not None:
            self.metrics.observe(self.metrics.tenant_ttft, (self.tenant.team, self.tenant.id), ttft)
        piece = self.first_piece
        self.buffer = buffer = self._buffer()
        parts = []
        try:
            while True:
                if piece.text:
                    buffer.grow(len(piece.text.encode("utf-8", "surrogatepass")))
                    parts.append(piece.text)
                if piece.finish_reason:
                    break
                try:
                    piece = await self._next()
                except StopAsyncIteration:
                    break
            await self._rest()
        except BackendFailure as failure:
            raise LlmError(502, "upstream_error", f"the generation failed: {failure.message}") from None
        except LlmError as exc:
            self.metrics.refused(self.ep.name, exc.code)
            raise
        text = "".join(parts)
        finish = self._finish_reason()
        if self.req.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None}
            kind = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None}
            kind = "text_completion"
        choice["finish_reason"] = finish
        body = {"id": self._id(), "object": kind, "created": self.created, "model": self.ep.name}
        body.update({"choices": [choice], "usage": self.usage()})
        return 200, self.reply_headers("application/json"), orjson.dumps(body)

    def _buffer(self) -> ReplyBuffer:
        settings = self.service.gateway.settings
        tenant, ep = self.tenant, self.ep
        key_id = tenant.id if tenant is not None else f"\x1eanonymous\x1f{ep.name}"
        team = tenant.team if tenant is not None else (ep.team or f"\x1eendpoint\x1f{ep.name}")
        return ReplyBuffer(
            key_id=key_id,
            team=team,
            per_key=settings.llm_buffer_bytes_per_key,
            per_team=settings.llm_buffer_bytes_per_team,
            max_reply=settings.llm_max_reply_bytes,
        )

    # --- accounting, once ----------------------------------------------------------------
    def finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        if self.buffer is not None:
            self.buffer.release()
        ep, variant = self.ep, self.variant
        streams = self.metrics.streams
        streams[ep.name] -= 1
        used = 0  # nothing served: the estimate goes back
        if self.attempt is not None:
            replica = self.attempt.replica
            self._release(self.attempt, replica)
            usage = self.usage()
            used = usage["total_tokens"]
            backend = self.backend
            cost = usage["prompt_tokens"] * backend.cost_prompt + usage["completion_tokens"] * backend.cost_completion
            self.metrics.usage(
                ep.name, self.label, self.tenant, usage["prompt_tokens"], usage["completion_tokens"], cost
            )
            if self.status == 200 and ep.experiment:  # the assigned arm (intention to treat)
                self.service.gateway.exposures.record(self.rid, ep.experiment, ep.name, variant.name, self.sticky, None)
        if self.pieces is not None:
            pieces, self.pieces = self.pieces, None
            task = asyncio.get_running_loop().create_task(pieces.aclose())  # its connection is closed already
            closing = self.service.closing
            closing.add(task)
            task.add_done_callback(closing.discard)
        if self.admission is not None:
            quotas.finish(self.admission, used)
        self.metrics.done(ep.name, self.label, self.status, self.fault)
        if self.tenant is not None:
            self.service.gateway.hot.count_tenant(ep.name, self.status, self.tenant)
