"""One attempt against one LLM backend replica, read as a stream of `Piece`s whatever the
backend's kind:

  triton  POST {url}/v2/models/{model}/generate_stream (Triton's generate extension, the
          model decoupled): {"text_input": prompt} for /v1/completions or {"messages_json":
          the messages as JSON} for chat (the model applies its own chat template),
          "max_tokens", and the sampling options the client set (temperature, top_p, seed,
          presence_penalty, frequency_penalty: the model's inputs of those names; a model
          without one refuses the request, never drops the option). Each SSE event is one response: `text_output`
          (the new text), and on the last one `prompt_tokens`/`completion_tokens` (and
          `finish_reason` when the model sends it); {"error": ...} is a failure. Stop
          sequences are applied here (the model takes none), holding back the few characters
          that could start one.
  openai  POST {url}/chat/completions or {url}/completions with the upstream model id, always
          `stream: true` with `stream_options.include_usage` (so the gateway sees the first
          token, to fail over before it, and the usage), and `Authorization: Bearer <secret>`
          when the backend names one. Chunks are read for their text, finish_reason and usage
          and the gateway writes its own (the client's model name, the gateway's id).

Why aiohttp's client and not upstream.py's: upstream.py reads a whole reply into one buffer,
which is what a tensor reply wants and a stream must not do; aiohttp's StreamReader hands
out lines as they arrive, pauses reading the socket past its high-water mark (so a slow
client's backpressure reaches the backend through TCP), speaks TLS (external providers) and
closes the connection when the response is released early (a client that went away cancels
its generation upstream). Its per-request cost (~0.25 ms) is small beside a generation.

Tenant backends (kind openai: a URL a team registered) go through their own session, whose
connector vets every address before connecting (gateway/llm/guard.py): the URL is built from
the replica's parsed parts (table.py), redirects are not followed, the request carries the
hop mark, a secret goes only to an origin it is bound to (checked here again, before the
request exists), and a backend's error body reaches the client only as a bounded, sanitized
message (`sanitized`: its JSON error message, printable characters, at most ERROR_SHOWN).
SSE framing: sse.py.
"""

from __future__ import annotations

import asyncio
import re

import aiohttp
import orjson

from gateway.llm.failover import BackendFailure, FailureReason
from gateway.llm.guard import ATTEMPT, HOP_HEADER
from gateway.llm.logprobs import carried, ignored, logprob_entries, split_logprobs
from gateway.llm.sse import sse_events

MAX_ERROR_BODY = 16 * 1024
ERROR_SHOWN = 200  # characters of a backend's error message a client may see
_UNPRINTABLE = re.compile(r"[^\x20-\x7e\u00a0-\ufffd]+")


class Piece:
    """What one backend event carried: text, the finish, the usage (at the end), and `generated`,
    the completion tokens so far counted by the model's own tokenizer, when the backend says
    (the platform's Triton adapter does on every event: a stream cut before its usage is still
    charged what it generated); `index` the choice it belongs to (n > 1 choices)."""

    __slots__ = ("text", "finish_reason", "prompt_tokens", "completion_tokens", "generated", "logprobs", "index")

    def __init__(
        self,
        text: str = "",
        finish_reason=None,
        prompt_tokens=None,
        completion_tokens=None,
        generated=None,
        logprobs=None,
        index: int = 0,
    ):
        self.text = text
        self.finish_reason = finish_reason
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.generated = generated
        self.logprobs = logprobs  # the tokens of `text` with their log-probabilities (OpenAI's chat shape), or None
        self.index = index


def _int(value):
    if isinstance(value, list) and value:
        value = value[0]
    return value if type(value) is int and value >= 0 else None


def _str(value):
    if isinstance(value, list) and value:
        value = value[0]
    return value if type(value) is str else None


def redact(message: str, authorization: str | None) -> str:
    """A backend's words with the secret it was sent taken out (a provider may quote the key)."""
    if authorization:
        return message.replace(authorization.removeprefix("Bearer "), "[secret]")
    return message


def sanitized(message, authorization: str | None) -> str:
    """What a client may see of a backend's message: the secret taken out, printable characters
    only (no control characters, no line breaks to forge log lines with), at most ERROR_SHOWN."""
    text = _UNPRINTABLE.sub(" ", redact(str(message), authorization)).strip()
    return text[:ERROR_SHOWN] + ("…" if len(text) > ERROR_SHOWN else "")


async def _failed_status(resp: aiohttp.ClientResponse, authorization: str | None) -> BackendFailure:
    try:
        raw = await resp.content.read(MAX_ERROR_BODY)
    except (aiohttp.ClientError, OSError):
        raw = b""
    try:
        body = orjson.loads(raw)
        message = body.get("error") if isinstance(body, dict) else None
        if isinstance(message, dict):
            message = message.get("message")
    except orjson.JSONDecodeError:
        message = None
    # only an OpenAI-shaped error's message is passed on: never a page of whatever answered
    message = sanitized(message, authorization) if isinstance(message, str) else "no error message"
    status = resp.status
    if status in (401, 403):
        return BackendFailure(
            FailureReason.REFUSED, f"the backend refused the gateway's credentials ({status})", status
        )
    if status == 429:
        return BackendFailure(FailureReason.RATE_LIMITED, f"the backend is rate limited (429): {message}", status)
    if status >= 500 or status == 404 or "unknown model" in message.lower():
        # 404 / Triton's "unknown model": the model is not loaded there (a replica restarting
        # or loading it): the replica's failure, tried elsewhere (counted with the 5xx)
        return BackendFailure(FailureReason.UPSTREAM_5XX, f"the backend failed ({status}): {message}", status)
    return BackendFailure(FailureReason.REFUSED, f"the backend refused the request ({status}): {message}", status)


class Attempt:
    """An upstream request in progress: `pieces()` yields its Pieces; `close()` releases the
    connection (closing it when the stream is not finished: the backend sees the cancel)."""

    def __init__(self, session: aiohttp.ClientSession, backend, replica, req, hop_mark: str = "", index: int = 0):
        self.session, self.backend, self.replica, self.req = session, backend, replica, req
        self.hop_mark, self.index = hop_mark, index  # index: which of n generations (fanout.py), seed + index
        self.resp: aiohttp.ClientResponse | None = None
        self.sent_at = 0.0
        self.finished = False  # the backend ended the stream: its connection may be reused

    def _request(self):
        backend, req = self.backend, self.req
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if backend.kind == "triton":
            url = self.replica.url.joinpath("v2", "models", backend.model, "generate_stream")
            body = req.upstream_options()
            body.pop("stop", None)  # applied here (above): a generate model need not take stop strings
            body.pop("n", None)  # n choices are n generations (fanout.py)
            if req.logprobs and not req.chat:  # the legacy integer: the adapter's boolean and top_logprobs
                body["logprobs"], body["top_logprobs"] = True, req.top_logprobs
            if self.index and req.seed is not None:  # int64, wrapped
                body["seed"] = (req.seed + self.index + 2**63) % 2**64 - 2**63
            for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty"):
                if name in body:
                    body[name] = float(body[name])  # FP32 inputs: Triton reads a JSON integer as no float
            if req.chat:
                body["messages_json"] = orjson.dumps(req.messages).decode()
            else:
                body["text_input"] = req.prompt
        else:
            url = self.replica.url.joinpath(*(("chat", "completions") if req.chat else ("completions",)))
            headers[HOP_HEADER] = self.hop_mark
            body = {"model": backend.model, "stream": True, "stream_options": {"include_usage": True}}
            if req.chat:
                body["messages"] = req.messages
            else:
                body["prompt"] = req.prompt
            body.update(req.upstream_options())
            if backend.authorization:
                if self.replica.origin not in backend.secret_origins:  # the table's checks refused it too
                    raise BackendFailure(
                        FailureReason.GUARD,
                        f"secret {backend.secret} is not bound to {self.replica.origin}",
                        rule="secret_origin",
                    )
                headers["Authorization"] = backend.authorization
        return url, headers, orjson.dumps(body)

    async def open(self) -> None:
        """Send the request and read the reply's head (raises BackendFailure)."""
        url, headers, body = self._request()
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.backend.connect_timeout_s)
        loop = asyncio.get_running_loop()
        self.sent_at = loop.time()
        refusals: list = []
        token = ATTEMPT.set((url.host or "", refusals))  # what the guard's socket factory reads
        try:
            self.resp = resp = await self.session.post(
                url, data=body, headers=headers, timeout=timeout, allow_redirects=False
            )
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
            if refusals:
                refusal = refusals[0]
                raise BackendFailure(
                    FailureReason.GUARD, f"the gateway may not connect there: {refusal.sentence}", rule=refusal.rule
                ) from None
            raise BackendFailure(
                FailureReason.CONNECT, f"cannot connect to the backend: {type(exc).__name__}"
            ) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise BackendFailure(
                FailureReason.UPSTREAM_5XX, f"the backend connection failed: {type(exc).__name__}"
            ) from None
        finally:
            ATTEMPT.reset(token)
        if resp.status != 200:
            failure = await _failed_status(resp, self.backend.authorization)
            self.close()
            raise failure

    async def pieces(self):
        try:
            if self.backend.kind == "triton":
                async for piece in self._triton():
                    yield piece
            else:
                async for piece in self._openai():
                    yield piece
            self.finished = self.resp is not None and self.resp.content.at_eof()
        except (aiohttp.ClientError, OSError) as exc:
            raise BackendFailure(
                FailureReason.UPSTREAM_5XX, f"the backend connection failed: {type(exc).__name__}"
            ) from None

    async def _triton(self):
        stops = self.req.stop
        hold = max((len(s) for s in stops), default=1) - 1
        pending = ""
        wanted = self.req.logprobs
        held: list = []  # log-probabilities of the held text's tokens
        async for data in sse_events(self.resp):
            event = _event(data)
            error = event.get("error")
            if error is not None:
                raise BackendFailure(FailureReason.UPSTREAM_5XX, f"the backend failed: {sanitized(error, None)}")
            text = _str(event.get("text_output")) or ""
            finish = _str(event.get("finish_reason"))
            prompt_tokens, completion_tokens = _int(event.get("prompt_tokens")), _int(event.get("completion_tokens"))
            generated = _int(event.get("generated_tokens"))
            if wanted:
                if text and "logprobs" not in event:
                    raise ignored()
                held += logprob_entries(event.get("logprobs")) or []
            if stops:
                pending += text
                cut = min((i for i in (pending.find(s) for s in stops) if i >= 0), default=-1)
                if cut >= 0:
                    logprobs = split_logprobs(held, cut)[0] or None
                    yield Piece(pending[:cut], "stop", prompt_tokens, completion_tokens, generated, logprobs)
                    return
                keep = len(pending) - hold if not (finish or completion_tokens is not None) else len(pending)
                text, pending = pending[: max(0, keep)], pending[max(0, keep) :]
            logprobs, held = split_logprobs(held, len(text)) if pending else (held, [])
            if text or finish or prompt_tokens is not None or completion_tokens is not None or generated is not None:
                yield Piece(text, finish, prompt_tokens, completion_tokens, generated, logprobs or None)
            else:
                held = logprobs + held
        if pending or held:
            yield Piece(pending, logprobs=held or None)

    async def _openai(self):
        chat = self.req.chat
        done = False
        async for data in sse_events(self.resp):
            # after [DONE] the body ends (read to its end so the connection can be reused)
            if done or data == "[DONE]":
                done = True
                continue
            event = _event(data)
            if "error" in event:
                error = event["error"]
                message = error.get("message") if isinstance(error, dict) else error
                raise BackendFailure(
                    FailureReason.UPSTREAM_5XX, f"the backend failed: {sanitized(message, self.backend.authorization)}"
                )
            choices = event.get("choices")
            for choice in choices if isinstance(choices, list) else ():
                index, text, finish, logprobs = (
                    choice.get("index", 0) if isinstance(choice, dict) else -1,
                    "",
                    None,
                    None,
                )
                if type(index) is not int or not 0 <= index < self.req.n:
                    raise BackendFailure(
                        FailureReason.PROTOCOL, "the backend sent a choice of no index it was asked for"
                    )
                if chat:
                    delta = choice.get("delta")
                    text = _str(delta.get("content")) if isinstance(delta, dict) else None
                else:
                    text = _str(choice.get("text"))
                if self.req.logprobs and text:
                    logprobs = carried(choice, chat)
                    if logprobs is None:
                        raise ignored()
                finish = _str(choice.get("finish_reason"))
                if text or finish or logprobs:
                    yield Piece(text or "", finish, logprobs=logprobs, index=index)
            usage = event.get("usage")
            prompt_tokens = completion_tokens = None
            if isinstance(usage, dict):
                prompt_tokens, completion_tokens = (
                    _int(usage.get("prompt_tokens")),
                    _int(usage.get("completion_tokens")),
                )
            if prompt_tokens is not None:
                yield Piece("", None, prompt_tokens, completion_tokens)

    def close(self) -> None:
        resp, self.resp = self.resp, None
        if resp is not None:
            if self.finished:
                resp.release()
            else:
                resp.close()  # an unfinished stream's connection is closed (the backend sees the cancel)


def _event(data: str) -> dict:
    try:
        event = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise BackendFailure(FailureReason.PROTOCOL, "the backend sent an event that is not JSON") from None
    if type(event) is not dict:
        raise BackendFailure(FailureReason.PROTOCOL, "the backend sent an event that is not a JSON object")
    return event
