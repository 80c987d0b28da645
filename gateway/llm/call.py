"""One LLM request from its first attempt to its accounting (llm/handler.py admits it).

Before the first token the endpoint's backends are tried in order (routing.chain), a few
replicas each, until one gives a first token within first_token_timeout_ms; what a failed
attempt does and the answer when none served are failover.py's (pure, table-tested).
After the first token a stream is never retried on another backend: the client has text
from one model already, and a second model would continue someone else's sentence. A
failure then ends the stream with an error event (`data: {"error": {...}}`, which OpenAI's
clients raise as an APIError) and `data: [DONE]`; a reply that is not streamed gets a 502.
A client that goes away cancels the handler (httpserver's `cancellable`): the upstream
connection is closed at once, so the backend stops generating.

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

Why this is one long module: `Call` is one request's state (its attempt, the pieces read,
the token counts, the buffer, the status and fault) that the attempts, both reply shapes
and the accounting every exit must do once all read and write; split across modules, each
part would reach into the others' halves of the same object.
"""

from __future__ import annotations

import asyncio
import time
from time import perf_counter

import orjson

from gateway.contracts.feedback_rules import endpoint_token
from gateway.llm import failover, quotas, routing
from gateway.llm.backends import Attempt, BackendFailure, Piece
from gateway.llm.buffers import ReplyBuffer
from gateway.llm.errors import LlmError, headers
from gateway.llm.failover import FailureReason
from gateway.llm.fanout import FanOut
from gateway.llm.logprobs import legacy
from gateway.llm.metrics import ITL_BUCKETS, LlmMetrics
from gateway.llm.requests import estimate_tokens
from gateway.wire.faults import BACKEND, CLIENT, OK
from gateway.wire.httpserver import Streamed
from gateway.wire.ids import new_id

SSE = "text/event-stream"
DONE = b"data: [DONE]\n\n"
FALLBACK = "fallback"  # the variant label of requests the endpoint's fallbacks served (never a variant's name: v<n>-…)
TAIL_S = 5.0  # after the finish: how long the backend may take to send its usage and end the stream
DEADLINE_PASSED = "the request's deadline passed during the generation"


def paced_by_client(drained: bool, held: float, gap: float) -> bool:
    """Whether the client's reading, not the backend, set a gap between two chunks: the writer
    waited for the client to drain its full socket (`drained`), for more than half of the gap."""
    return drained and held * 2 > gap


def _given_up(ep, last: BackendFailure | None, saw_replica: bool) -> LlmError:
    """The error of a request no backend served (the rule: failover.given_up)."""
    answer = failover.given_up(last.reason if last is not None else None, saw_replica=saw_replica)
    if not saw_replica:
        message = f"no backend of model {ep.name!r} can serve now (all cooling down)"
    else:
        message = answer.prefix + (last.message if last is not None else "none")
    return LlmError(answer.status, answer.code, message, None, answer.retry_after_s)


NAMED = ("top_logprobs", "logprobs", "ignore_eos", "min_tokens")  # options a backend may not take


def _named(message: str) -> str | None:
    """The request option a backend's refusal names (quoted, as Triton and OpenAI's API quote
    an input or argument they do not know), so the client is told which one."""
    for name in NAMED:
        if f"'{name}'" in message or f"`{name}`" in message or message.endswith(f": {name}"):
            return name
    return None


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
        self.finishes: dict = {}  # choice index -> its finish_reason (n choices: the reply ends with the last)
        self.logprobs: dict = {}  # choice index -> token log-probabilities not yet sent (all, when collected)
        self.opened: set = set()  # the choices whose first chunk went out (it carries the role)
        self.offsets: dict = {}  # choice index -> characters of its text sent (a completion's text_offset)
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
        own_failure = FailureReason.COOLDOWN  # what kept the variant's own backends from serving
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
                step = failover.after_failure(last.reason, last.status)
                if step.breaker:
                    routing.failed(replica, breakers, refused=step.at_once)
                if step.error is not None:  # the backend's answer to this request: never retried
                    status, code = step.error
                    message = last.message.replace(backend.model, ep.name) if status == 400 else last.message
                    raise LlmError(status, code, message, _named(message) if status == 400 else None)
                if step.refusal:  # nothing was sent
                    self.metrics.refused(ep.name, last.rule)
                if step.label is not None:
                    self.metrics.fallback(ep.name, backend.id, step.label)
                if any(backend is b for b in own):
                    own_failure = step.rescue
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
        n, hop = self.req.n, service.guard.hop_mark
        if backend.kind == "triton" and n > 1:  # a generate model answers one text: n generations
            attempt = FanOut([Attempt(session, backend, replica, self.req, hop, i) for i in range(n)])
        else:
            attempt = Attempt(session, backend, replica, self.req, hop)
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
            failure = BackendFailure(
                FailureReason.TIMEOUT, f"no first token within {ep.first_token_timeout_s * 1000:g} ms"
            )
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
            self.finishes[piece.index] = piece.finish_reason
        if piece.logprobs and self.req.logprobs:
            self.logprobs.setdefault(piece.index, []).extend(piece.logprobs)

    async def _next(self, *, timed: bool = True):
        """The next piece; `timed=False`: the caller holds the request's deadline itself (one
        timer for a whole collected reply, not one per piece: `collect`)."""
        try:
            if timed:
                remaining = self.deadline - perf_counter()
                if remaining <= 0:
                    raise BackendFailure(FailureReason.TIMEOUT, "the request's deadline passed")
                async with asyncio.timeout(remaining):
                    piece = await anext(self.pieces)
            else:
                piece = await anext(self.pieces)
        except TimeoutError:
            raise BackendFailure(FailureReason.TIMEOUT, DEADLINE_PASSED) from None
        except StopAsyncIteration:
            if self.req.n > 1 and not self._all_finished():  # a backend that ignored n: never a short reply
                done = len(self.finishes)
                raise BackendFailure(
                    FailureReason.PROTOCOL, f"the backend ended with {done} of the n={self.req.n} choices asked for"
                ) from None
            raise
        self._count(piece)
        return piece

    async def _rest(self, *, timed: bool = True) -> None:
        """After the finish: what the backend still sends (its usage), text ignored, to its end;
        a backend that stalls there is left after TAIL_S (the reply goes out without its usage)."""
        chars, events = self.text_chars, self.text_events
        logprobs = {index: len(entries) for index, entries in self.logprobs.items()}
        try:
            async with asyncio.timeout(TAIL_S):
                while True:
                    await self._next(timed=timed)
        except (StopAsyncIteration, TimeoutError):
            pass
        self.text_chars, self.text_events = chars, events
        for index, entries in self.logprobs.items():
            del entries[logprobs.get(index, 0) :]

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

    def _all_finished(self) -> bool:
        return len(self.finishes) >= self.req.n

    def _finish_reason(self, index: int = 0) -> str:
        reason = self.finishes.get(index)
        if reason in ("stop", "length"):
            return reason
        done = self.completion_tokens
        return "length" if done is not None and done >= self.req.max_tokens * self.req.n else "stop"

    def _generated(self, text: str) -> bytes:
        """Triton's generate reply (one event of generate_stream, or the whole of generate)."""
        return orjson.dumps(
            {"model_name": self.ep.name, "model_version": self.variant.model_version, "text_output": text}
        )

    def _chunk(self, text: str | None, finish: str | None, index: int = 0) -> bytes:
        if self.req.generate:
            return b"data: " + self._generated(text or "") + b"\n\n"
        if self.req.chat:
            delta = {} if text is None else {"content": text}
            if index not in self.opened:  # a choice's first chunk
                self.opened.add(index)
                delta = {"role": "assistant", **delta}
            carried = None
            if self.req.logprobs and (text or self.logprobs.get(index)):  # the tokens relayed since the last chunk
                carried = {"content": self.logprobs.pop(index, [])}
            choice = {"index": index, "delta": delta, "logprobs": carried, "finish_reason": finish}
            kind = "chat.completion.chunk"
        else:
            choice = {"index": index, "text": text or "", "logprobs": self._legacy(index), "finish_reason": finish}
            kind = "text_completion"
        body = {"id": self._id(), "object": kind, "created": self.created, "model": self.ep.name, "choices": [choice]}
        if self.req.continuous_usage:  # vLLM's stream_options.continuous_usage_stats: the usage so far
            body["usage"] = self.usage()
        return b"data: " + orjson.dumps(body) + b"\n\n"

    def _legacy(self, index: int) -> dict | None:
        """A completion choice's log-probabilities since its last chunk, in the legacy shape."""
        if not self.req.logprobs:
            return None
        shape, self.offsets[index] = legacy(self.logprobs.pop(index, []), self.offsets.get(index, 0))
        return shape

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
                        self._gap(ep_v, tenant, now - last_sent)
                    last_sent = now
                    drains = body.drains
                    yield self._chunk(piece.text, None, piece.index)
                    resumed = perf_counter()  # the writer took the chunk (a slow reader: after it drained)
                    first = False
                if piece.finish_reason and self._all_finished():
                    await self._rest()
                    break
                try:
                    piece = await self._next()
                except StopAsyncIteration:
                    break
        except BackendFailure as failure:
            self.status, self.fault = 502, BACKEND
            error = {"message": f"the generation failed after its first token: {failure.message}"[:500]}
            if self.req.generate:  # Triton's stream error event; its streams end without [DONE]
                yield b"data: " + orjson.dumps({"error": error["message"]}) + b"\n\n"
                return
            error.update({"type": "server_error", "param": None, "code": "upstream_error"})
            yield b"data: " + orjson.dumps({"error": error}) + b"\n\n" + DONE
            return
        except asyncio.CancelledError:
            self.status, self.fault = 499, CLIENT
            raise
        except GeneratorExit:
            self.status, self.fault = 499, CLIENT
            raise
        if self.req.generate:  # Triton's generate_stream: the text events, and the stream ends
            return
        tail = b"".join(self._chunk(None, self._finish_reason(i), i) for i in range(self.req.n))
        if self.req.include_usage:
            usage = {"id": self._id(), "object": "chat.completion.chunk" if self.req.chat else "text_completion"}
            usage.update({"created": self.created, "model": self.ep.name, "choices": [], "usage": self.usage()})
            tail += b"data: " + orjson.dumps(usage) + b"\n\n"
        yield tail + DONE

    def _gap(self, ep_v, tenant, gap_s: float) -> None:
        """An inter-token gap the backend set; none with n > 1 choices (their tokens interleave:
        the gap between two chunks is no one generation's)."""
        if self.req.n == 1:
            self.metrics.observe(self.metrics.itl, ep_v, gap_s, ITL_BUCKETS)
            if tenant is not None:
                self.metrics.observe(self.metrics.tenant_itl, tenant, gap_s, ITL_BUCKETS)

    async def collect(self):
        """The whole reply of a request that did not ask for a stream."""
        ttft = perf_counter() - self.t0
        self.metrics.observe(self.metrics.ttft, (self.ep.name, self.label), ttft)
        if self.tenant is not None:
            self.metrics.observe(self.metrics.tenant_ttft, (self.tenant.team, self.tenant.id), ttft)
        piece = self.first_piece
        self.buffer = buffer = self._buffer()
        parts = [[] for _ in range(self.req.n)]
        try:
            # one timer for the whole reply (the deadline is the request's, whatever the piece)
            async with asyncio.timeout(max(0.0, self.deadline - perf_counter())):
                while True:
                    if piece.text:
                        buffer.grow(len(piece.text.encode("utf-8", "surrogatepass")))
                        parts[piece.index].append(piece.text)
                    if piece.logprobs and self.req.logprobs:
                        buffer.grow(len(orjson.dumps(piece.logprobs)))
                    if piece.finish_reason and self._all_finished():
                        break
                    try:
                        piece = await self._next(timed=False)
                    except StopAsyncIteration:
                        break
                await self._rest(timed=False)
        except TimeoutError:
            raise LlmError(502, "upstream_error", f"the generation failed: {DEADLINE_PASSED}") from None
        except BackendFailure as failure:
            raise LlmError(502, "upstream_error", f"the generation failed: {failure.message}") from None
        except LlmError as exc:
            self.metrics.refused(self.ep.name, exc.code)
            raise
        texts = ["".join(texts) for texts in parts]
        if self.req.generate:
            return 200, self.reply_headers("application/json"), self._generated(texts[0])
        choices = []
        for index, text in enumerate(texts):
            if self.req.chat:
                carried = {"content": self.logprobs.get(index, [])} if self.req.logprobs else None
                choice = {"index": index, "message": {"role": "assistant", "content": text}, "logprobs": carried}
            else:
                choice = {"index": index, "text": text, "logprobs": self._legacy(index)}
            choice["finish_reason"] = self._finish_reason(index)
            choices.append(choice)
        kind = "chat.completion" if self.req.chat else "text_completion"
        body = {"id": self._id(), "object": kind, "created": self.created, "model": self.ep.name}
        body.update({"choices": choices, "usage": self.usage()})
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
