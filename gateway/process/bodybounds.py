"""How many bytes a request body may have, per route, decided from the request line and
headers before a byte of the body is read (the HTTP server's `body_bound` hook): a body
larger than anything its route can need is refused from its Content-Length, or as soon as
a chunked body passes the bound, never parsed whole (413 `body_too_large` naming the limit
and whose rule it is).

  infer     POST /v2/models/{endpoint}[/versions/{v}]/infer: the largest any variant's
            signature can need — per input the elements of its shape (the batch dimension at
            most the signature's `max_batch_size`) times JSON_BYTES_PER_ELEMENT, plus
            HEAD_ALLOWANCE for the JSON around them. A variant without a signature, a BYTES
            input (its elements have no size) or a dynamic dimension other than the batch
            leaves the endpoint at GATEWAY_MAX_BODY_BYTES. The binary tensor extension needs
            at most 8 bytes per element, less than JSON; an inflated (gzip) body is held to
            the same bound.
  LLM       POST /v1/chat/completions and /v1/completions: the model is named inside the
            body, so the bound is the largest of the LLM endpoints the caller may call
            (public ones, and those its key is scoped to) by their context length: the
            gateway's estimate (characters / 4, + 4 tokens per message) lets at most
            4 x context_length characters in, each at most 12 bytes of JSON (an escaped
            surrogate pair), plus MESSAGE_ALLOWANCE per message that fits.
  generate  POST /v2/models/{endpoint}/generate[_stream] (Triton's generate extension on an LLM
            endpoint): that endpoint's LLM bound, for the callers who may call it.
  feedback  POST /v2/feedback: the feedback rules' 1 MiB with a valid key, 64 KiB without one.
  the rest  reads, health, admin, /v1/models and unknown paths: NO_BODY_ALLOWANCE.

No name oracle: a request that may not call a closed endpoint (no key, another team's key,
an unknown one) is held to NO_BODY_ALLOWANCE, as a name the table lacks is, with the same
words; only a caller who may know the endpoint (its public callers, its keys and its
team's) is told the endpoint's own bound. The refusal then costs what a 404 would.
"""

from __future__ import annotations

from gateway.keys.tenants import lookup_key
from gateway.llm.requests import MAX_MESSAGES
from gateway.v2.feedback import FEEDBACK_TOO_LARGE, MAX_FEEDBACK_BODY, MAX_KEYLESS_BODY
from gateway.v2.paths import MODELS, model_route

HEAD_ALLOWANCE = 64 << 10  # the JSON around the tensors: names, datatypes, parameters, outputs, an id
# A number in JSON is at most ~24 characters ("-2.2250738585072014e-308"), then ", "; the rest
# is room for clients that indent nested lists (json.dumps(indent=4) puts each value on a line).
JSON_BYTES_PER_ELEMENT = 64
NO_BODY_ALLOWANCE = 64 << 10  # routes that take no body, and requests that may not call the endpoint
LLM_BYTES_PER_TOKEN = 4 * 12  # 4 characters a token (the estimate), 12 bytes of JSON a character at most
MESSAGE_ALLOWANCE = 2 << 10  # a message's role, name and up to 64 {"type": "text"} parts
LLM_TOKENS_PER_MESSAGE = 4  # what the estimate charges a message: no more messages than this allows fit
LLM_PATHS = frozenset((b"/v1/chat/completions", b"/v1/completions"))
CONCEALED = " (for a request to an unknown endpoint or one this request may not call)"


def signature_bytes(signature) -> int | None:
    """The most bytes a request fitting `signature` (signature.Signature) can need, or None
    when the signature does not bound it (a BYTES input, a dynamic dimension past the batch)."""
    total = HEAD_ALLOWANCE
    max_batch = signature.max_batch_size
    for spec in signature.inputs.values():
        if spec.datatype == "BYTES":
            return None
        elements = 1
        for axis, dim in enumerate(spec.shape):
            if dim < 0:
                if axis != 0 or max_batch <= 0:
                    return None
                dim = max_batch
            elements *= dim
        total += elements * JSON_BYTES_PER_ELEMENT
    return total


def endpoint_bytes(ep) -> int | None:
    """The largest of `signature_bytes` over the endpoint's variants; None when one is unbounded."""
    most = 0
    for variant in ep.variants:
        if variant.signature is None:
            return None
        need = signature_bytes(variant.signature)
        if need is None:
            return None
        most = max(most, need)
    return most


def llm_bytes(context_length: int) -> int:
    messages = min(MAX_MESSAGES, max(1, context_length // LLM_TOKENS_PER_MESSAGE))
    return HEAD_ALLOWANCE + context_length * LLM_BYTES_PER_TOKEN + messages * MESSAGE_ALLOWANCE


class BodyBounds:
    """The bounds of one route table (built when it is installed; `limit` is the hook)."""

    __slots__ = ("table", "max_body", "infer", "llm_public", "llm_keys", "llm_closed")

    def __init__(self, table, max_body: int):
        self.table, self.max_body = table, max_body
        self.infer: dict[str, tuple[int, str]] = {}
        for name, ep in table.endpoints.items():
            need = endpoint_bytes(ep)
            if need is not None and need < max_body:
                self.infer[name] = (need, f" (the most endpoint {name!r}'s signature can need)")
        self.llm_public = None  # (bytes, why) over the public LLM endpoints
        self.llm_keys: dict[str, tuple[int, str]] = {}  # key id -> over the endpoints it may call
        self.llm_closed = False
        for name, ep in table.llm.items():
            need = (min(max_body, llm_bytes(ep.context_length)), f" (the most model {name!r} can need)")
            if ep.auth.public:
                if self.llm_public is None or need[0] > self.llm_public[0]:
                    self.llm_public = need
                continue
            self.llm_closed = True
            for key_id in ep.auth.allowed:
                held = self.llm_keys.get(key_id)
                if held is None or need[0] > held[0]:
                    self.llm_keys[key_id] = need

    def limit(self, method: bytes, path: str, headers: dict):
        """(bytes, why) for this request's body, or None for the server's limit."""
        if path.startswith(MODELS):
            if method != b"POST":
                return NO_BODY_ALLOWANCE, ""
            route = model_route(path[len(MODELS) :])
            if route is None:
                return NO_BODY_ALLOWANCE, ""
            if route[2] == "infer":
                return self._infer(route[0], headers)
            if route[2].startswith("generate"):
                return self._generate(route[0], headers)
            return NO_BODY_ALLOWANCE, ""
        if method == b"POST":
            if path == "/v2/feedback":
                return self._feedback(headers)
            if path.encode("latin-1") in LLM_PATHS:
                return self._llm(headers)
        return NO_BODY_ALLOWANCE, ""

    def _infer(self, name: str, headers: dict):
        table = self.table
        ep = table.endpoints.get(name)
        if ep is None:
            return NO_BODY_ALLOWANCE, CONCEALED
        auth = ep.auth
        if not auth.public:
            _, key = lookup_key(headers, table.keys)
            if key is None or (key.id not in auth.allowed and key.team not in auth.teams):
                return NO_BODY_ALLOWANCE, CONCEALED
        return self.infer.get(name)

    def _generate(self, name: str, headers: dict):
        table = self.table
        ep = table.llm.get(name)
        if ep is None:
            return NO_BODY_ALLOWANCE, CONCEALED
        if not ep.auth.public:
            _, key = lookup_key(headers, table.keys)
            if key is None or key.id not in ep.auth.allowed:
                return NO_BODY_ALLOWANCE, CONCEALED
        return min(self.max_body, llm_bytes(ep.context_length)), f" (the most model {name!r} can need)"

    def _feedback(self, headers: dict):
        """A valid key may send a team's batch; without one a body is one user's feedback."""
        _, key = lookup_key(headers, self.table.keys)
        if key is None:
            return MAX_KEYLESS_BODY, " (feedback without a valid key: one user's feedback)", FEEDBACK_TOO_LARGE
        return MAX_FEEDBACK_BODY, " (a feedback batch)", FEEDBACK_TOO_LARGE

    def _llm(self, headers: dict):
        best = self.llm_public
        if self.llm_closed:
            _, key = lookup_key(headers, self.table.keys)
            own = self.llm_keys.get(key.id) if key is not None else None
            if own is not None and (best is None or own[0] > best[0]):
                best = own
        if best is None:
            return NO_BODY_ALLOWANCE, " (no LLM endpoint this request may call)"
        return best
