"""Token log-probabilities on chat completions (`logprobs`, `top_logprobs`): the request's
check, and the entries a backend sends, checked before a client sees them.

OpenAI's chat shape, which the gateway relays as is: `choices[i].logprobs.content` is a list of
{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}, one per generated token; a
stream carries each token's entry in the chunk that carries its text. The platform's Triton
adapter sends them as a JSON string output `logprobs` on each response (the tokens that
response's text covers); an OpenAI-compatible server in `choices[0].logprobs.content`. A
backend that sends text without them refuses the request (`ignored`), as one that does not
take the option does.
"""

from __future__ import annotations

import orjson

from gateway.llm.errors import LlmError
from gateway.llm.failover import BackendFailure, FailureReason

MAX_TOP_LOGPROBS = 20  # OpenAI's bound
MAX_LEGACY_LOGPROBS = 5  # /v1/completions' integer logprobs (OpenAI's bound)


def bad(message: str, param: str) -> LlmError:
    return LlmError(400, "invalid_value", message, param)


def checked_logprobs(body: dict, chat: bool) -> tuple[bool, int | None]:
    """(logprobs, top_logprobs) of a chat body (top_logprobs only with logprobs true), or of a
    completion's legacy integer logprobs (that many alternatives per token)."""
    logprobs = body.get("logprobs")
    if not chat:
        if logprobs is not None and (type(logprobs) is not int or not 0 <= logprobs <= MAX_LEGACY_LOGPROBS):
            raise bad(f"logprobs must be an integer between 0 and {MAX_LEGACY_LOGPROBS}", "logprobs")
        return logprobs is not None, logprobs
    if logprobs is not None and type(logprobs) is not bool:
        raise bad("logprobs must be a boolean", "logprobs")
    top = body.get("top_logprobs")
    if top is not None and (type(top) is not int or not 0 <= top <= MAX_TOP_LOGPROBS):
        raise bad(f"top_logprobs must be an integer between 0 and {MAX_TOP_LOGPROBS}", "top_logprobs")
    if top is not None and not logprobs:
        raise bad("top_logprobs is only allowed with logprobs: true", "top_logprobs")
    return bool(logprobs), top


def _logprob(entry, top: bool) -> dict:
    """One token's entry as a client may see it, {token, logprob, bytes[, top_logprobs]}
    (OpenAI's chat shape), or raises BackendFailure (PROTOCOL) for another shape."""
    if type(entry) is not dict or type(entry.get("token")) is not str:
        raise BackendFailure(FailureReason.PROTOCOL, "the backend sent a log-probability that is not {token, logprob}")
    value = entry.get("logprob")
    if type(value) not in (int, float):
        raise BackendFailure(FailureReason.PROTOCOL, "the backend sent a log-probability that is not a number")
    raw = entry.get("bytes")
    if raw is not None and (type(raw) is not list or not all(type(b) is int and 0 <= b < 256 for b in raw)):
        raw = None
    out = {"token": entry["token"], "logprob": float(value), "bytes": raw}
    if top:
        alternatives = entry.get("top_logprobs") or []
        if type(alternatives) is not list:
            raise BackendFailure(FailureReason.PROTOCOL, "the backend sent top_logprobs that is not an array")
        out["top_logprobs"] = [_logprob(a, False) for a in alternatives[:MAX_TOP_LOGPROBS]]
    return out


def logprob_entries(value) -> list | None:
    """The token entries a backend sent (a list, or a JSON string of one: the Triton adapter's
    `logprobs` output), checked; None when it sent none."""
    if isinstance(value, list) and len(value) == 1 and type(value[0]) is str:
        value = value[0]
    if type(value) is str:
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            raise BackendFailure(
                FailureReason.PROTOCOL, "the backend sent log-probabilities that are not JSON"
            ) from None
    if value is None:
        return None
    if type(value) is not list:
        raise BackendFailure(FailureReason.PROTOCOL, "the backend sent log-probabilities that are not an array")
    return [_logprob(entry, True) for entry in value]


def carried(choice: dict, chat: bool) -> list | None:
    """The entries of an OpenAI-compatible server's choice: chat's `logprobs.content`, or the
    legacy completion shape {tokens, token_logprobs, top_logprobs: [{token: logprob}]}."""
    value = choice.get("logprobs")
    if not isinstance(value, dict):
        return None
    if chat:
        return logprob_entries(value.get("content"))
    tokens, values, tops = value.get("tokens"), value.get("token_logprobs"), value.get("top_logprobs")
    if type(tokens) is not list or type(values) is not list or len(tokens) != len(values):
        raise BackendFailure(FailureReason.PROTOCOL, "the backend sent legacy logprobs of another shape")
    tops = tops if type(tops) is list and len(tops) == len(tokens) else [None] * len(tokens)
    entries = []
    for token, value, top in zip(tokens, values, tops, strict=True):
        alternatives = [{"token": t, "logprob": v} for t, v in (top.items() if isinstance(top, dict) else ())]
        entries.append({"token": token, "logprob": value, "top_logprobs": alternatives})
    return logprob_entries(entries)


def legacy(entries: list, offset: int) -> tuple[dict, int]:
    """The legacy completion shape of `entries` (text_offset from `offset`, the characters of
    the choice's text before them), and the offset after them."""
    out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for entry in entries:
        out["tokens"].append(entry["token"])
        out["token_logprobs"].append(entry["logprob"])
        out["top_logprobs"].append({t["token"]: t["logprob"] for t in entry.get("top_logprobs", ())})
        out["text_offset"].append(offset)
        offset += len(entry["token"])
    return out, offset


def ignored() -> BackendFailure:
    """A backend that sent text without the log-probabilities it was asked for (an
    OpenAI-compatible server that takes the argument and ignores it; a model that takes the
    input and has no such output): its refusal of the request, naming the option, as a backend
    that does not take it at all: never a reply without what the client asked for."""
    return BackendFailure(
        FailureReason.REFUSED, "the backend does not return the 'logprobs' it was asked for", status=400
    )


def split_logprobs(entries: list, chars: int) -> tuple[list, list]:
    """(the entries whose tokens fit in the first `chars` characters, the rest)."""
    used = 0
    for i, entry in enumerate(entries):
        used += len(entry["token"])
        if used > chars:
            return entries[:i], entries[i:]
    return entries, []
