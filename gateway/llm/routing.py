"""Which replica of a backend serves a request, the order in which backends are tried, and
what a failure does to a replica's breaker. Pure decisions over the replicas' state (plus
the breaker's clock); the handler (handler.py) does the I/O.

Replica choice, among the replicas whose breaker lets traffic through:
  affinity         rendezvous hashing over the replicas' URLs of an affinity key: the
                   request's sticky key when it has one (a conversation stays on one replica
                   however long its prompt grows), else the prompt's first
                   prefix_affinity_chars characters (0: off), so prompts sharing a prefix (a
                   system prompt) reach the replica whose prefix cache holds it, and a replica
                   leaving moves only its own share;
  bounded load     ... unless that replica's outstanding tokens (with this request's) would
                   pass LOAD_BOUND x the mean (consistent hashing with bounded loads, Mirrokni
                   et al. 2018): then the least loaded, so one hot prefix cannot drown a replica;
  least tokens     otherwise the replica with the fewest outstanding tokens (estimated prompt
                   + max_tokens of requests in progress): tokens, not requests, are an LLM
                   server's work; ties go round robin.

Breakers: gateway/breaker.Breakers opens a replica after N consecutive failures (connect,
timeout, 429, 5xx before the first token); an LLM replica has no ready probe (an external
provider has none the gateway may call), so after its cooldown one request goes through
as the probe (half-open): success closes it, failure doubles the cooldown (up to the max).
"""

from __future__ import annotations

import itertools
import time
from hashlib import blake2b

from gateway.telemetry import metrics

LOAD_BOUND = 1.25
MAX_REPLICAS_PER_BACKEND = 2  # replicas of one backend tried in one request before the next backend
_turn = itertools.count()  # where the least-tokens scan starts: ties go round robin


def usable(replica, now: float) -> bool:
    return not replica.broken or replica.open_until <= now


def pick(backend, prefix: bytes | None, cost: int, now: float, exclude=()):
    """The replica for this request, or None when every replica's breaker is open."""
    candidates = [r for r in backend.replicas if r not in exclude and usable(r, now)]
    if not candidates:
        return None
    if len(candidates) == 1:
        return candidates[0]
    start = next(_turn) % len(candidates)
    least = min(candidates[start:] + candidates[:start], key=lambda r: r.tokens)
    if prefix:
        best = max(candidates, key=lambda r: blake2b(prefix + r.base.encode(), digest_size=8).digest())
        mean = (sum(r.tokens for r in candidates) + cost) / len(candidates)
        if best.tokens + cost <= LOAD_BOUND * mean or best.tokens == least.tokens:
            return best
    return least


def prefix_of(endpoint, rendered: str) -> bytes | None:
    if endpoint.prefix_affinity_chars <= 0:
        return None
    return rendered[: endpoint.prefix_affinity_chars].encode("utf-8", "surrogatepass")


def chain(endpoint, variant) -> list:
    """Backends in the order they are tried: the variant's by priority, then the endpoint's fallbacks."""
    return [*variant.backends, *endpoint.fallbacks]


def taken(replica, breaker_cooldown_s: float) -> None:
    """A half-open replica chosen as the probe: no other request probes it until this one ends."""
    if replica.broken:
        replica.open_until = time.monotonic() + max(replica.cooldown, breaker_cooldown_s)


def succeeded(replica) -> None:
    replica.failures = 0
    if replica.broken:
        replica.broken = False
        metrics.BREAKER_OPEN.labels(replica.base, replica.model).set(0)


def failed(replica, breakers, *, refused: bool = False) -> None:
    if replica.broken:  # the half-open probe failed: a longer cooldown
        replica.cooldown = min(max(replica.cooldown, breakers.cooldown_s) * 2, breakers.max_cooldown_s)
        replica.open_until = time.monotonic() + replica.cooldown
        replica.refused = refused
        return
    breakers.failed(replica, refused=refused)
