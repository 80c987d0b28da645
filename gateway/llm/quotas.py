"""Per-key LLM limits: requests per second and in flight (the key's rate_per_s, burst and
max_concurrency, tenants.take), LLM requests in flight (max_streams) and tokens per minute
(tokens_per_minute), held in total by every worker of the host like the existing ones
(gateway/keys/sharedlimits.py: the same shared mapping, one slot per key and limit), split 1/R
across gateway replicas (tenants.set_replicas).

Token budgets: `tokens_per_minute` and each of the key's `token_budgets` ({tokens, window_s},
a window from a second to a month) is a token bucket of `tokens` refilled at tokens/window_s
per second. Admission reserves the request's estimate (prompt characters / 4 + max_tokens,
requests.py) in every budget at once, atomically across the host's workers (one lock over
all of them, never taken without it: sharedlimits.take_budgets), so a thousand requests racing
on every worker get no more than the budgets hold. The estimate must be in each bucket (at most
the whole bucket: a request larger than a window's tokens waits for a full one). After the
request its real count replaces the estimate (the difference goes back, or is taken: a bucket
may go below zero, a debt later requests wait for): the backend's usage, or for a stream that
ended without it (a client that hung up) what passed (handler.py's `usage`). At a limit: 429
`tokens_per_minute` / `token_budget` with Retry-After (seconds until the estimate fits); 503
`limits_busy` when the shared lock is not had within a second (nothing admitted unchecked).

The buckets live in the host's shared memory: a gateway restart refills them (a month's
budget is a month's on one gateway's uptime; several replicas split it 1/R like every limit).

Anonymous callers of a public endpoint have no key and so no limits of their own: together
they hold at most `GATEWAY_LLM_ANONYMOUS_STREAMS` requests of that endpoint in flight on
the host (one shared slot per endpoint, split 1/R across replicas like a key's limits), so
one client opening streams by the thousand takes that endpoint's anonymous share, not every
LLM endpoint's upstream connections. Over it: 429 `max_streams` naming the endpoint, with
Retry-After. (A public endpoint reads no key, as on the tensor path: every caller of it is
anonymous; limits per caller need an endpoint open to keys.)
"""

from __future__ import annotations

import math

from gateway.keys import tenants
from gateway.keys.sharedlimits import SharedLimits
from gateway.llm.errors import LlmError

_local: SharedLimits | None = None


def limits_store() -> SharedLimits:
    """The host's shared store; a process of its own (one worker, tests) gets a private one."""
    global _local
    shared = tenants.shared_store()
    if shared is not None:
        return shared
    if _local is None:
        _local = SharedLimits(rows=1, capacity=4096)
    return _local


class Admission:
    __slots__ = ("key", "store", "streams_slot", "budgets", "estimate")

    def __init__(self, key, store):
        self.key, self.store = key, store  # key None: an anonymous caller of a public endpoint
        self.streams_slot = -1
        self.budgets: list = []  # [(slot, capacity, refill per second)] the estimate was taken from
        self.estimate = 0


def _window(seconds: int) -> str:
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            count = seconds // size
            return f"{unit}" if count == 1 else f"{count} {unit}s"
    return "second" if seconds == 1 else f"{seconds} seconds"


def _take_budgets(admission: Admission, key, now: float, estimate: int) -> None:
    store, shown = admission.store, key.prefix or key.id
    budgets, windows = [], []
    for window, tokens in key.token_budgets:
        slot = store.slot(f"{key.id}\x1ftokens\x1f{window}")
        if slot >= 0:  # the shared table is full: uncounted, as for every limit (sharedlimits.py)
            budgets.append((slot, tokens, tokens / window))
            windows.append(window)
    if not budgets:
        return
    taken = store.take_budgets(budgets, now, float(estimate))
    if taken is None:
        raise LlmError(503, "limits_busy", "the gateway's shared limits are busy: retry", None, 1.0)
    wait, binding = taken
    if binding >= 0:
        window, tokens = windows[binding], budgets[binding][1]
        per_minute = window == 60 and key.tokens_per_minute == tokens
        raise LlmError(
            429,
            "tokens_per_minute" if per_minute else "token_budget",
            f"key {shown}… is over its {tokens:g} tokens per {_window(window)} (this request needs about "
            f"{estimate}; it fits in {math.ceil(wait)} s)",
            None,
            wait,
        )
    admission.budgets, admission.estimate = budgets, estimate


def admit(key, now: float, estimate: int) -> Admission:
    """Take one request of `key` (an Admission to `finish`), or raise LlmError 429."""
    refusal = tenants.take(key, now)
    shown = key.prefix or key.id
    if refusal is not None:
        problem, reason, wait = refusal
        raise LlmError(429, reason, problem[2], None, wait)
    store = limits_store()
    admission = Admission(key, store)
    try:
        if key.max_streams is not None:
            slot = store.slot(f"{key.id}\x1fstreams")
            if slot >= 0:
                refused = store.admit(slot, now, None, 1.0, key.max_streams)
                if refused is not None:
                    raise LlmError(
                        429,
                        "max_streams",
                        f"key {shown}… already has {int(refused[1])} LLM requests in flight "
                        f"(its limit is {key.max_streams})",
                        None,
                        1.0,
                    )
                admission.streams_slot = slot
        _take_budgets(admission, key, now, estimate)
    except LlmError:
        finish(admission, None)
        raise
    return admission


def admit_call(key, endpoint: str, now: float, estimate: int, anonymous_limit: int) -> Admission:
    """The key's limits (`admit`), or with no key (a public endpoint's caller) the endpoint's
    anonymous share (`admit_anonymous`)."""
    if key is not None:
        return admit(key, now, estimate)
    return admit_anonymous(endpoint, now, anonymous_limit)


def admit_anonymous(endpoint: str, now: float, limit: int) -> Admission:
    """Take one of the endpoint's anonymous in-flight requests (an Admission to `finish`), or
    raise LlmError 429 when its anonymous callers already hold `limit` (this replica's share)."""
    store = limits_store()
    admission = Admission(None, store)
    slot = store.slot(f"\x1eanonymous\x1f{endpoint}")  # \x1e: never a key id's slot
    if slot < 0:  # the store is full: admitted, uncounted (as a key is, sharedlimits.py)
        return admission
    share = max(1, math.ceil(limit * tenants.replica_share()))
    refused = store.admit(slot, now, None, 1.0, share)
    if refused is not None:
        raise LlmError(
            429,
            "max_streams",
            f"anonymous callers of {endpoint} already have {int(refused[1])} requests in flight (the limit is "
            f"{share} for a public endpoint's callers together)",
            None,
            1.0,
        )
    admission.streams_slot = slot
    return admission


def finish(admission: Admission, used: int | None) -> None:
    """Release what `admit` took; `used`: the tokens the request really used (None: the estimate stands)."""
    store = admission.store
    key = admission.key
    if admission.budgets and used is not None:
        store.give_budgets(admission.budgets, float(admission.estimate - used))
    if admission.streams_slot >= 0:
        store.release(admission.streams_slot)
    if key is not None:
        tenants.release(key)
