"""The OpenAI API of the gateway: POST /v1/chat/completions, POST /v1/completions,
GET /v1/models.

One request: check the body (requests.py); find the endpoint its `model` names and who may
call it (a public endpoint: anyone, credentials ignored; otherwise a valid key scoped to it;
an unknown model and one the key may not call get the same 404 model_not_found); fit
max_tokens to the context; take the key's limits (quotas.py); choose the variant (sticky
header, else `user`, else the weighted split); try backends in order (routing.chain) until
one gives a first token within first_token_timeout_ms; then stream it (SSE) or collect it.

After the first token a stream is never retried on another backend: the client has text
from one model already, and a second model would continue someone else's sentence. A
failure then ends the stream with an error event (`data: {"error": {...}}`, which OpenAI's
clients raise as an APIError) and `data: [DONE]`; a reply that is not streamed gets a 502.
A client that goes away cancels the handler (httpserver's `cancellable`): the upstream
connection is closed at once, so the backend stops generating.

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
from ..feedback_rules import sign_exposure
from ..headers import deadline_s
from ..httpserver import Streamed
from ..ids import new_id, request_id
from ..metrics import AUTH_REJECTIONS, UNKNOWN_ENDPOINT
from ..tenants import MAX_KEY_LENGTH, presented_key
from ..tensors import Problem
from . import quotas, routing
from .backends import Attempt, BackendFailure, Piece
from .errors import LlmError, headers, model_not_found, reply
from .metrics import ITL_BUCKETS, LlmMetrics
from .requests import MAX_USER, estimate_tokens, fit_context, parse

PATHS = {"/v1/chat/completions": "POST", "/v1/completions": "POST", "/v1/models": "GET, HEAD"}
SSE = "text/event-stream"
DONE = b"data: [DONE]\n\n"
MAX_REPLY_CHARS = 16 << 20  # a reply that is not streamed is held whole: bounded whatever the backend sends


class LlmService:
    def __init__(self, gateway):
        self.gateway = gateway
        self.metrics = LlmMetrics()
        self.breakers = Breakers(gateway.settings, gateway.llm_states)  # its `failed`; no probe loop (routing.py)
        self.session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=30.0)
        self.session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()

    async def handle(self, request):
        path, method = request.path, request.method
        rid = request_id(request.headers)
        allowed = PATHS.get(path)
        if allowed is None:
            return reply(LlmError(404, "not_found", f"no route for {method} {path[:200]}"), rid)
        if method not in allowed.split(", "):
            status, out, body = reply(LlmError(405, "method_not_allowed", f"use {allowed} for {path}"), rid)
            out["Allow"] = allowed
            return status, out, body
        if path == "/v1/models":
            return self.models(request, rid)
        return await self.complete(request, rid, chat=path == "/v1/chat/completions")

    # --- who may call what ---------------------------------------------------------------
    def _key(self, table, headers_):
        """The caller's Key, None when it sent none; raises LlmError 401 for a key that is not one."""
        token = presented_key(headers_)
        if token is None:
            return None
        key = None
        if type(token) is not Problem and len(token) <= MAX_KEY_LENGTH:
            key = table.keys.get(sha256(token.encode("latin-1")).hexdigest())
        if key is None:
            raise LlmError(401, "invalid_api_key", "Incorrect API key provided (unknown or revoked).")
        return key

    def models(self, request, rid: str):
        table = self.gateway.table
        if table is None:
            return reply(LlmError(503, "no_routes", "no route table loaded yet", None, 1.0), rid)
        try:
            key = self._key(table, request.headers)
        except LlmError:  # as for a public model's call, credentials that are no key are ignored
            key = None
        names = sorted(
            name for name, ep in table.llm.items() if ep.auth.public or (key is not None and key.id in ep.auth.allowed)
        )
        data = [{"id": name, "object": "model", "created": 0, "owned_by": "modelplane"} for name in names]
        return 200, headers(rid), orjson.dumps({"object": "list", "data": data})

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
                key = self._key(table, request.headers)
                if key is None:
                    raise LlmError(
                        401, "missing_api_key", "You didn't provide an API key: send Authorization: Bearer <key>."
                    )
                if ep is None or key.id not in ep.auth.allowed:
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
            admission = quotas.admit(tenant, t0, cost) if tenant is not None else None
        except LlmError as exc:
            self.metrics.done(name, variant_name, exc.status, BACKEND if exc.status >= 500 else CLIENT)
            if exc.status == 429 and tenant is not None:  # a key over its limits, as on the tensor path
                AUTH_REJECTIONS.labels(name, tenant.team, tenant.id, exc.code).inc()
            return reply(exc, rid)
        variant = ep.choose(sticky)
        call = Call(self, ep, variant, req, tenant, admission, rid, t0, t0 + timeout, cost, sticky)
        if request.conn is not None:
            request.conn.cancellable = True  # a client that leaves cancels this task (and the upstream)
        streamed = False
        try:
            await call.first()
            if req.stream:
                streamed = True
                return 200, call.reply_headers(SSE), Streamed(call.events(), call.finish)
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


class Call:
    """One LLM request from its first attempt to its accounting (done once, in `finish`)."""

    def __init__(self, service, ep, variant, req, tenant, admission, rid, t0, deadline, cost, sticky):
        self.service, self.ep, self.variant, self.req = service, ep, variant, req
        self.tenant, self.admission, self.rid, self.t0, self.deadline = tenant, admission, rid, t0, deadline
        self.cost, self.sticky = cost, sticky
        self.metrics: LlmMetrics = service.metrics
        self.attempt: Attempt | None = None
        self.backend = None
        self.pieces = None
        self.first_piece: Piece | None = None
        self.text_chars = 0
        self.prompt_tokens = None
        self.completion_tokens = None
        self.finish_reason = None
        self.status, self.fault = 200, OK
        self.finished = False
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
                routing.taken(replica, breakers.cooldown_s)
                replica.outstanding += 1
                replica.tokens += self.cost
                attempt = Attempt(self.service.session, backend, replica, req)
                pieces = attempt.pieces()
                queued = perf_counter() - self.t0  # arrival -> this attempt's request sent
                try:
                    async with asyncio.timeout(min(ep.first_token_timeout_s, remaining)):
                        await attempt.open()
                        try:
                            piece = await anext(pieces)
                        except StopAsyncIteration:
                            piece = Piece("", "stop")
                except TimeoutError:
                    last = BackendFailure("timeout", f"no first token within {ep.first_token_timeout_s * 1000:g} ms")
                except BackendFailure as failure:
                    last = failure
                except BaseException:
                    self._release(attempt, replica)
                    await pieces.aclose()
                    raise
                else:
                    self.metrics.observe(self.metrics.queue, (ep.name, self.variant.name), queued)
                    routing.succeeded(replica)
                    self.attempt, self.backend, self.pieces, self.first_piece = attempt, backend, pieces, piece
                    self._count(piece)
                    return
                self._release(attempt, replica)
                await pieces.aclose()
                if last.reason == "refused":
                    if last.status in (400, 413, 422):
                        raise LlmError(400, "backend_refused", last.message)
                    routing.failed(replica, breakers)
                    raise LlmError(502, "upstream_error", last.message)
                reason = "5xx" if last.reason == "protocol" else last.reason
                routing.failed(replica, breakers, refused=reason == "connect")
                self.metrics.fallback(ep.name, backend.id, reason)
        if not saw_replica:
            raise LlmError(
                503, "no_ready_backend", f"no backend of model {ep.name!r} can serve now (all cooling down)", None, 1.0
            )
        if last is not None and last.reason == "429":
            raise LlmError(429, "upstream_rate_limited", f"every backend is rate limited: {last.message}", None, 1.0)
        if last is not None and last.reason == "timeout":
            raise LlmError(504, "first_token_timeout", f"no backend gave a first token: {last.message}")
        raise LlmError(502, "upstream_error", f"no backend could serve: {last.message if last else 'none'}")

    def _release(self, attempt: Attempt, replica) -> None:
        attempt.close()
        replica.outstanding -= 1
        replica.tokens -= self.cost

    def _count(self, piece: Piece) -> None:
        self.text_chars += len(piece.text)
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
        """After the finish: what the backend still sends (its usage), text ignored, to its end."""
        chars = self.text_chars
        try:
            while True:
                await self._next()
        except StopAsyncIteration:
            pass
        self.text_chars = chars

    # --- replies -------------------------------------------------------------------------
    def reply_headers(self, content_type: str) -> dict:
        out = headers(self.rid, self.variant.name, content_type)
        ep = self.ep
        if ep.exposure_token_key:
            out["X-Exposure-Token"] = sign_exposure(
                ep.exposure_token_key, ep.experiment, ep.name, self.variant.name, self.rid, time.time()
            )
        if content_type == SSE:
            out["Cache-Control"] = "no-cache"
        return out

    def usage(self) -> dict:
        prompt = self.prompt_tokens if self.prompt_tokens is not None else self.req.prompt_estimate
        completion = self.completion_tokens
        if completion is None:
            completion = estimate_tokens("x" * self.text_chars)
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
        return b"data: " + orjson.dumps(body) + b"\n\n"

    def _id(self) -> str:
        return ("chatcmpl-" if self.req.chat else "cmpl-") + self.id

    async def events(self):
        """The SSE reply: the first token's chunk, one chunk per piece, the finish, usage, [DONE]."""
        ep_v = (self.ep.name, self.variant.name)
        metrics = self.metrics
        piece = self.first_piece
        first = True
        last_sent = 0.0
        try:
            while True:
                if piece.text or first:
                    now = perf_counter()
                    if first:
                        metrics.observe(metrics.ttft, ep_v, now - self.t0)
                    else:
                        metrics.observe(metrics.itl, ep_v, now - last_sent, ITL_BUCKETS)
                    last_sent = now
                    yield self._chunk(piece.text, None, first)
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
        ep_v = (self.ep.name, self.variant.name)
        self.metrics.observe(self.metrics.ttft, ep_v, perf_counter() - self.t0)
        parts = [self.first_piece.text]
        piece = self.first_piece
        try:
            while not piece.finish_reason:
                try:
                    piece = await self._next()
                except StopAsyncIteration:
                    break
                parts.append(piece.text)
                if self.text_chars > MAX_REPLY_CHARS:
                    raise BackendFailure("protocol", f"a reply longer than {MAX_REPLY_CHARS} characters")
            await self._rest()
        except BackendFailure as failure:
            raise LlmError(502, "upstream_error", f"the generation failed: {failure.message}") from None
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

    # --- accounting, once ----------------------------------------------------------------
    def finish(self) -> None:
        if self.finished:
            return
        self.finished = True
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
                ep.name, variant.name, self.tenant, usage["prompt_tokens"], usage["completion_tokens"], cost
            )
            if self.status == 200 and ep.experiment:  # the assigned arm (intention to treat)
                self.service.gateway.exposures.record(self.rid, ep.experiment, ep.name, variant.name, self.sticky, None)
        if self.pieces is not None:
            pieces, self.pieces = self.pieces, None
            asyncio.get_running_loop().create_task(pieces.aclose())  # its connection is closed already
        if self.admission is not None:
            quotas.finish(self.admission, used)
        self.metrics.done(ep.name, variant.name, self.status, self.fault)
