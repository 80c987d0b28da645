"""Inference keys: who may call an endpoint, how fast and how many at once.

The route table lists the platform's active keys once (top-level `keys`: id, display
prefix, SHA-256 of the key, team, rate_per_s, burst, max_concurrency) and each endpoint
says who may call it (`auth`: `public`, or the ids of the keys scoped to it). The
gateway never sees a key in clear from the control plane, never logs one, and never
uses client input as a metric label: labels are the key's id and team from the table.

A request names its key as `Authorization: Bearer <key>` or `X-API-Key: <key>`. Keys are
random high-entropy tokens, so looking up the SHA-256 of what the client sent in a dict
is the right comparison (a timing difference in the lookup tells nothing about a key
whose hash nobody can invert). Outcomes, each a JSON error:

  no key                                   401 missing_key
  unknown or revoked key (not in the table) 401 invalid_key
  a key not scoped to this endpoint         403 forbidden
(on a closed endpoint the gateway answers all three as an unknown endpoint's 404 unless the
key is a valid one of the endpoint's team: access.py; feedback on a public endpoint keeps them)
  over the key's rate (token bucket)        429 rate_limited, Retry-After
  over the key's concurrency quota          429 concurrency_limit, Retry-After

Limits are held in total across the workers of one host (gateway/keys/sharedlimits.py, when
`share_limits` gave a store) and split across gateway replicas: with GATEWAY_REPLICAS=R
each replica enforces 1/R of a key's rate, burst and concurrency (`set_replicas`).

An endpoint with `auth.public` true needs no key (credentials sent anyway are ignored).
An endpoint whose entry has no `auth` block is not public and has no keys: every call
is refused (the control plane must say "public" explicitly).
"""

from __future__ import annotations

import math
from hashlib import sha256

from gateway.wire.faults import Problem

MAX_KEY_LENGTH = 512
PUBLIC = None  # authenticate() result for a public endpoint

_shared = None  # gateway/sharedlimits.SharedLimits when several workers serve one host
_replica_share = 1.0  # 1 / GATEWAY_REPLICAS: this gateway replica's part of every key's limits


def share_limits(store) -> None:
    """Count every key's rate and requests in flight in `store` (shared by the host's workers)."""
    global _shared
    _shared = store


def set_replicas(replicas: int) -> None:
    global _replica_share
    _replica_share = 1.0 / max(1, replicas)


class Key:
    """One inference key and its live state (token bucket, requests in flight), kept
    across route-table reloads by id."""

    __slots__ = (
        "id",
        "prefix",
        "team",
        "rate_per_s",
        "burst",
        "max_concurrency",
        "tokens",
        "stamp",
        "in_flight",
        "tokens_per_minute",
        "token_budgets",
        "max_streams",
    )

    def __init__(self, doc: dict):
        self.id = doc["id"]
        self.in_flight = 0
        self.tokens = None
        self.stamp = 0.0
        self.update(doc)

    def update(self, doc: dict) -> None:
        self.prefix = doc.get("prefix", "")
        self.team = doc["team"]
        share = _replica_share
        rate = float(doc["rate_per_s"]) if doc.get("rate_per_s") else None
        self.rate_per_s = rate * share if rate else None
        self.burst = max(1.0, float(doc.get("burst") or max(1.0, rate or 1.0)) * share)
        concurrency = doc.get("max_concurrency") or None
        self.max_concurrency = max(1, math.ceil(concurrency * share)) if concurrency else None
        tpm = doc.get("tokens_per_minute") or None  # LLM limits (gateway/llm/quotas.py)
        self.tokens_per_minute = tpm * share if tpm else None
        budgets = {60: float(tpm)} if tpm else {}  # window (s) -> tokens; tokens_per_minute is the 60 s one
        for budget in doc.get("token_budgets") or ():
            window = int(budget["window_s"])
            budgets[window] = min(budgets.get(window, float("inf")), float(budget["tokens"]))
        self.token_budgets = tuple((window, tokens * share) for window, tokens in sorted(budgets.items()))
        streams = doc.get("max_streams") or None
        self.max_streams = max(1, math.ceil(streams * share)) if streams else None
        if self.tokens is None or self.tokens > self.burst:
            self.tokens = self.burst

    def take(self, now: float) -> float:
        """Spend one token; 0.0 when allowed, else the seconds until one is there."""
        rate = self.rate_per_s
        if rate is None:
            return 0.0
        tokens = self.tokens + (now - self.stamp) * rate
        if tokens > self.burst:
            tokens = self.burst
        self.stamp = now
        if tokens >= 1.0:
            self.tokens = tokens - 1.0
            return 0.0
        self.tokens = tokens
        return (1.0 - tokens) / rate


class EndpointAuth:
    """Who may call an endpoint: anyone (`public`), or the keys whose ids are in `allowed`.
    `teams` owns the endpoint (the entry's `team`, else the teams of its allowed keys): a
    valid key of one of them that may not call it gets 403, any other refusal the unknown
    endpoint's 404 (access.py)."""

    __slots__ = ("public", "allowed", "teams")

    def __init__(self, public: bool, allowed: frozenset, teams: frozenset = frozenset()):
        self.public = public
        self.allowed = allowed
        self.teams = teams


def compile_keys(documents: list[dict], previous: dict | None = None) -> dict[str, Key]:
    """{sha256 hex: Key}; a key already known (same id) keeps its bucket and in-flight count."""
    by_id = {key.id: key for key in (previous or {}).values()}
    out = {}
    for doc in documents:
        key = by_id.get(doc["id"])
        if key is None:
            key = Key(doc)
        else:
            key.update(doc)
        out[doc["sha256"].lower()] = key
    return out


def compile_auth(document: dict | None, team: str | None = None, key_teams: dict | None = None) -> EndpointAuth:
    """The entry's `auth`; `team` the entry's owning team, `key_teams` {key id: team} of
    the table (the owners when the entry names no team: the teams of its keys)."""
    allowed = frozenset((document or {}).get("keys", ()))
    if team:
        teams = frozenset((team,))
    else:
        teams = frozenset(key_teams[k] for k in allowed if k in (key_teams or {}))
    if document is None:
        return EndpointAuth(False, frozenset(), teams)
    return EndpointAuth(bool(document.get("public", False)), allowed, teams)


def presented_key(headers: dict):
    """The key the client sent (str), None when none, or a Problem for a malformed one."""
    value = headers.get("authorization")
    if value is not None:
        scheme, _, token = value.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return Problem(401, "invalid_key", "Authorization must be 'Bearer <key>'")
        return token
    return headers.get("x-api-key")


def lookup_key(headers: dict, keys: dict[str, Key]):
    """(what the client sent: str, None or a Problem for a malformed one; its Key or None)."""
    token = presented_key(headers)
    key = None
    if type(token) is str and len(token) <= MAX_KEY_LENGTH:
        key = keys.get(sha256(token.encode("latin-1")).hexdigest())
    return token, key


def authenticate(headers: dict, auth: EndpointAuth, keys: dict[str, Key], endpoint: str, now: float):
    """(PUBLIC, None) for a public endpoint; (Key, None) when the key may call now (its
    in-flight count is taken: the caller must `release` it); else
    (Key or None, (Problem, reason, retry_after_s))."""
    if auth.public:
        return PUBLIC, None
    token, key = lookup_key(headers, keys)
    if token is None:
        return None, (
            Problem(
                401,
                "missing_key",
                f"endpoint {endpoint!r} needs an inference key: send Authorization: Bearer <key> or X-API-Key",
            ),
            "missing_key",
            0.0,
        )
    if type(token) is Problem:
        return None, (token, "invalid_key", 0.0)
    if key is None:
        return None, (Problem(401, "invalid_key", "unknown or revoked inference key"), "invalid_key", 0.0)
    shown = key.prefix or key.id
    if key.id not in auth.allowed:
        return key, (
            Problem(403, "forbidden", f"key {shown}… (team {key.team}) may not call endpoint {endpoint!r}"),
            "forbidden",
            0.0,
        )
    refusal = take(key, now)
    return key, refusal


def take(key: Key, now: float):
    """Admit one request of `key` against its rate and concurrency (held across the host's
    workers when shared): None, and one in flight taken (`release` it), or (Problem, reason,
    retry_after_s)."""
    shown = key.prefix or key.id
    if _shared is not None:
        slot = _shared.slot(key.id)
        if slot >= 0:  # else the shared table is full: this worker's own counters
            refusal = _shared.admit(slot, now, key.rate_per_s, key.burst, key.max_concurrency)
            if refusal is None:
                key.in_flight += 1  # this worker's part, for `release`
                return None
            if refusal[0] == "concurrency_limit":
                return _over_concurrency(key, int(refusal[1]), shown)
            return _over_rate(key, refusal[1], shown)
    if key.max_concurrency is not None and key.in_flight >= key.max_concurrency:
        return _over_concurrency(key, key.in_flight, shown)
    wait = key.take(now)
    if wait:
        return _over_rate(key, wait, shown)
    key.in_flight += 1
    return None


def shared_store():
    """The host's shared limits (gateway/keys/sharedlimits.py), or None in a single process."""
    return _shared


def replica_share() -> float:
    return _replica_share


def _over_concurrency(key: Key, in_flight: int, shown: str):
    return (
        Problem(
            429,
            "concurrency_limit",
            f"key {shown}… already has {in_flight} requests in flight (its quota is {key.max_concurrency})",
        ),
        "concurrency_limit",
        1.0,
    )


def _over_rate(key: Key, wait: float, shown: str):
    return (
        Problem(429, "rate_limited", f"key {shown}… is over its rate of {key.rate_per_s:g} requests/s"),
        "rate_limited",
        wait,
    )


def release(key: Key) -> None:
    key.in_flight -= 1
    if _shared is not None:
        slot = _shared.slots.get(key.id, -1)
        if slot >= 0:
            _shared.release(slot)
