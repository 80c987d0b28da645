"""The OpenAI request bodies the gateway accepts, checked strictly before any backend sees
them: POST /v1/chat/completions (`messages`) and POST /v1/completions (`prompt`).

Rules (each a 400 in the OpenAI error shape naming the parameter):
  body        a JSON object (orjson), at most the HTTP server's body limit (413);
  model       a string of 1-256 characters (then the endpoint's; unknown: 404, handler.py);
  messages    1..MAX_MESSAGES objects, role system|developer|user|assistant, content a string or
              an array of at most MAX_PARTS {"type": "text", "text": str} parts; `name` <= 64;
  prompt      a string, or an array holding exactly one string (one prompt per request);
  max_tokens  (chat also max_completion_tokens) an integer 1..context_length; absent: the
              endpoint's max_tokens_default, capped to what the context leaves;
  context     estimated prompt tokens + max_tokens > context_length: 400 context_length_exceeded
              (the estimate is characters / 4 + 4 per message: the gateway has no tokenizer;
              the backend's count corrects the quota afterwards, quotas.py);
  n           1..MAX_N choices (admission reserves n x the estimate; a Triton backend runs n
              generations, seeds seed+i; an OpenAI-compatible one gets n); temperature 0..2; top_p 0..1; presence/frequency_penalty -2..2;
  seed        an integer; stop a string or at most 4 strings of <= 256 characters (null: none);
  ignore_eos  a boolean: generate max_tokens whatever the model's end-of-sequence says (vLLM's
              extension, which benchmark tools send with a fixed output length);
  min_tokens  an integer 0..max_tokens: the end-of-sequence is not taken before that many
              (vLLM's); both are passed to the backend, and a backend that does not take them
              refuses the request naming them (a Triton model without that input, an
              OpenAI-compatible server that does not know the argument): never dropped;
  stream      a boolean; stream_options only with stream, {"include_usage": bool,
              "continuous_usage_stats": bool} (vLLM's: with include_usage, every chunk carries
              the usage so far);
  user        a string of at most MAX_USER characters (the sticky unit when no header is sent);
  logprobs    chat: a boolean, each token's log-probability (choices[i].logprobs.content);
              top_logprobs 0..20, only with logprobs: that many alternatives per token;
              completions: the legacy integer 0..5 (alternatives), its own shape (logprobs.py).
              Passed to the backend; one that cannot give them refuses the request naming them.
Any other field is refused (400 unknown_parameter), as OpenAI's API refuses an unrecognized
argument: a field the gateway would silently drop (tools, echo, response_format, ...) would
give the caller an answer to a question it did not ask.
"""

from __future__ import annotations

import math

import orjson

from gateway.contracts.feedback_rules import max_unit_key
from gateway.llm.errors import LlmError
from gateway.llm.logprobs import checked_logprobs

MAX_MESSAGES = 1024
MAX_PARTS = 64
MAX_STOP = 4
MAX_STOP_CHARS = 256
MAX_NAME = 64
MAX_N = 8
MAX_USER = max_unit_key()  # `user` is the sticky unit of exposures: the sticky header's bound
ROLES = frozenset(("system", "developer", "user", "assistant"))
COMMON = frozenset(
    (
        "model",
        "max_tokens",
        "temperature",
        "top_p",
        "n",
        "stop",
        "stream",
        "stream_options",
        "user",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "ignore_eos",
        "min_tokens",
    )
)
CHAT_FIELDS = COMMON | {"messages", "max_completion_tokens", "logprobs", "top_logprobs"}
COMPLETION_FIELDS = COMMON | {"prompt", "logprobs"}


class LlmRequest:
    __slots__ = (
        "chat",
        "model",
        "messages",
        "prompt",
        "rendered",
        "max_tokens",
        "temperature",
        "top_p",
        "stop",
        "stream",
        "include_usage",
        "continuous_usage",
        "ignore_eos",
        "min_tokens",
        "user",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "prompt_estimate",
        "generate",
        "logprobs",
        "top_logprobs",
        "n",
    )

    def upstream_options(self) -> dict:
        """Sampling options an OpenAI-compatible backend receives (only those the client set)."""
        out = {"max_tokens": self.max_tokens}
        if self.n > 1:
            out["n"] = self.n
        for name in ("temperature", "top_p", "seed", "presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.stop:
            out["stop"] = self.stop
        if self.ignore_eos is not None:
            out["ignore_eos"] = self.ignore_eos
        if self.min_tokens is not None:
            out["min_tokens"] = self.min_tokens
        if self.logprobs:  # chat: a boolean and top_logprobs; completions: the legacy integer
            out["logprobs"] = True if self.chat else self.top_logprobs
            if self.chat and self.top_logprobs is not None:
                out["top_logprobs"] = self.top_logprobs
        return out


def bad(message: str, param: str | None, code: str = "invalid_value") -> LlmError:
    return LlmError(400, code, message, param)


def _number(body: dict, name: str, low: float, high: float):
    value = body.get(name)
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value) or not low <= value <= high:
        raise bad(f"{name} must be a number between {low:g} and {high:g}", name)
    return value


def _integer(body: dict, name: str, low: int, high: int):
    value = body.get(name)
    if value is None:
        return None
    if type(value) is not int or not low <= value <= high:
        raise bad(f"{name} must be an integer between {low} and {high}", name)
    return value


def _content(message: dict, index: int) -> str:
    content = message.get("content")
    where = f"messages[{index}].content"
    if type(content) is str:
        return content
    if type(content) is list:
        if len(content) > MAX_PARTS:
            raise bad(f"{where} has more than {MAX_PARTS} parts", where)
        texts = []
        for j, part in enumerate(content):
            if type(part) is not dict or part.get("type") != "text" or type(part.get("text")) is not str:
                raise bad(f"{where}[{j}] must be a text part {{'type': 'text', 'text': str}}", where)
            if len(part) != 2:
                raise bad(f"{where}[{j}] has fields other than type and text", where)
            texts.append(part["text"])
        return "".join(texts)
    raise bad(f"{where} must be a string or an array of text parts", where)


def _messages(body: dict) -> list[dict]:
    messages = body.get("messages")
    if type(messages) is not list or not messages:
        raise bad("messages must be a non-empty array", "messages")
    if len(messages) > MAX_MESSAGES:
        raise bad(f"messages has more than {MAX_MESSAGES} entries", "messages")
    out = []
    for i, message in enumerate(messages):
        if type(message) is not dict:
            raise bad(f"messages[{i}] must be an object", "messages")
        role = message.get("role")
        if type(role) is not str or role not in ROLES:
            raise bad(f"messages[{i}].role must be one of {sorted(ROLES)}", f"messages[{i}].role")
        extra = set(message) - {"role", "content", "name"}
        if extra:
            raise bad(f"messages[{i}] has unsupported fields {sorted(extra)[:5]}", f"messages[{i}]")
        entry = {"role": role, "content": _content(message, i)}
        name = message.get("name")
        if name is not None:
            if type(name) is not str or not 1 <= len(name) <= MAX_NAME:
                raise bad(f"messages[{i}].name must be a string of 1-{MAX_NAME} characters", f"messages[{i}].name")
            entry["name"] = name
        out.append(entry)
    return out


def _stop(body: dict) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    if type(stop) is str:
        stop = [stop]
    if type(stop) is not list or len(stop) > MAX_STOP:
        raise bad(f"stop must be a string or an array of at most {MAX_STOP} strings", "stop")
    for s in stop:
        if type(s) is not str or not 1 <= len(s) <= MAX_STOP_CHARS:
            raise bad(f"each stop sequence must be a string of 1-{MAX_STOP_CHARS} characters", "stop")
    return stop


STREAM_OPTIONS = ("include_usage", "continuous_usage_stats")


def _stream(body: dict) -> tuple[bool, bool, bool]:
    """(stream, include_usage, usage in every chunk)."""
    stream = body.get("stream", False)
    if type(stream) is not bool:
        raise bad("stream must be a boolean", "stream")
    options = body.get("stream_options")
    if options is None:
        return stream, False, False
    if not stream:
        raise bad("stream_options is only allowed with stream: true", "stream_options")
    if type(options) is not dict or set(options) - set(STREAM_OPTIONS):
        raise bad(f"stream_options may only hold {' and '.join(STREAM_OPTIONS)}", "stream_options")
    flags = []
    for name in STREAM_OPTIONS:
        value = options.get(name, False)
        if type(value) is not bool:
            raise bad(f"stream_options.{name} must be a boolean", f"stream_options.{name}")
        flags.append(value)
    include, continuous = flags
    return stream, include, include and continuous


def estimate_tokens(text: str | int, messages: int = 0) -> int:
    """Tokens of a text (or of that many characters) before a backend counts them: ~4
    characters a token, 4 per message."""
    chars = text if type(text) is int else len(text)
    return math.ceil(chars / 4) + 4 * messages


def json_object(raw: bytes) -> dict:
    """The body as a JSON object, or raises LlmError (invalid_json)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise bad("the body is not valid JSON", None, "invalid_json") from None
    if type(body) is not dict:
        raise bad("the body must be a JSON object", None, "invalid_json")
    return body


def parse(raw: bytes, *, chat: bool) -> LlmRequest:
    """The checked request (its model not yet resolved), or raises LlmError."""
    return checked(json_object(raw), chat=chat)


def checked(body: dict, *, chat: bool) -> LlmRequest:
    """The checked request of a decoded body (its model not yet resolved), or raises LlmError."""
    allowed = CHAT_FIELDS if chat else COMPLETION_FIELDS
    unknown = [k for k in body if k not in allowed]
    if unknown:
        name = unknown[0][:64]
        raise bad(f"unrecognized or unsupported request argument: {name}", name, "unknown_parameter")
    model = body.get("model")
    if type(model) is not str or not 1 <= len(model) <= 256:
        raise bad("model must be a string of 1-256 characters", "model")
    req = LlmRequest()
    req.chat = chat
    req.generate = False
    req.model = model
    if chat:
        req.messages = _messages(body)
        req.prompt = None
        req.rendered = "".join(f"{m['role']}: {m['content']}\n" for m in req.messages)
        req.prompt_estimate = estimate_tokens(req.rendered, len(req.messages))
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        param = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    else:
        prompt = body.get("prompt")
        if type(prompt) is list and len(prompt) == 1:
            prompt = prompt[0]
        if type(prompt) is not str:
            raise bad("prompt must be a string (or an array of exactly one string)", "prompt")
        req.messages = None
        req.prompt = req.rendered = prompt
        req.prompt_estimate = estimate_tokens(prompt)
        max_tokens = body.get("max_tokens")
        param = "max_tokens"
    if max_tokens is not None and (type(max_tokens) is not int or max_tokens < 1):
        raise bad(f"{param} must be a positive integer", param)
    req.max_tokens = max_tokens
    req.n = _integer(body, "n", 1, MAX_N) or 1
    req.temperature = _number(body, "temperature", 0.0, 2.0)
    req.top_p = _number(body, "top_p", 0.0, 1.0)
    req.presence_penalty = _number(body, "presence_penalty", -2.0, 2.0)
    req.frequency_penalty = _number(body, "frequency_penalty", -2.0, 2.0)
    req.seed = _integer(body, "seed", -(2**63), 2**63 - 1)
    req.stop = _stop(body)
    req.stream, req.include_usage, req.continuous_usage = _stream(body)
    ignore_eos = body.get("ignore_eos")
    if ignore_eos is not None and type(ignore_eos) is not bool:
        raise bad("ignore_eos must be a boolean", "ignore_eos")
    req.ignore_eos = ignore_eos
    req.min_tokens = _integer(body, "min_tokens", 0, 2**31 - 1)
    user = body.get("user")
    if user is not None and (type(user) is not str or len(user) > MAX_USER):
        raise bad(f"user must be a string of at most {MAX_USER} characters", "user")
    req.user = user
    req.logprobs, req.top_logprobs = checked_logprobs(body, chat)
    return req


def _prompt_param(req: LlmRequest) -> str:
    return "messages" if req.chat else "text_input" if req.generate else "prompt"


def fit_context(req: LlmRequest, context_length: int, max_tokens_default: int) -> None:
    """Set max_tokens against the endpoint's context (raises LlmError when it does not fit)."""
    _fit(req, context_length, max_tokens_default)
    if req.min_tokens is not None and req.min_tokens > req.max_tokens:
        raise bad(f"min_tokens must be at most max_tokens ({req.max_tokens})", "min_tokens")


def _fit(req: LlmRequest, context_length: int, max_tokens_default: int) -> None:
    param = "max_tokens"
    if req.max_tokens is None:
        room = context_length - req.prompt_estimate
        if room < 1:
            raise LlmError(
                400,
                "context_length_exceeded",
                f"This model's maximum context length is {context_length} tokens; the prompt has about "
                f"{req.prompt_estimate}.",
                _prompt_param(req),
            )
        req.max_tokens = min(max_tokens_default, room)
        return
    if req.max_tokens > context_length:
        raise bad(f"max_tokens must be at most the model's context length, {context_length}", param)
    if req.prompt_estimate + req.max_tokens > context_length:
        raise LlmError(
            400,
            "context_length_exceeded",
            f"This model's maximum context length is {context_length} tokens; the request asks for about "
            f"{req.prompt_estimate + req.max_tokens} ({req.prompt_estimate} in the prompt, {req.max_tokens} "
            "to generate).",
            _prompt_param(req),
        )
