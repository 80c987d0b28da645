"""What the LLM path does when an attempt at a backend gives no first token: pure decisions, no I/O.

State in, decision out, table-tested in tests/gateway/test_llm_failover.py like the tensor
path's (gateway/v2/failover.py): the request path (llm/call.py `Call.first`) tries the
endpoint's backends in order (routing.chain: the variant's own, then the endpoint's
fallbacks), a few replicas of each; an attempt that fails says why (`FailureReason`, carried
by BackendFailure, below), the path asks `after_failure` what that failure does, and when
nothing served the request it asks `given_up` which answer the client gets. `fault` says
whose fault an answer is (the judge and the breakers see only the backend's).

The policy, before the first token (after it a stream is never retried: llm/call.py):
- the outbound guard's refusal sent nothing: not the replica's failure (no breaker), counted
  as a refusal under its rule, and the next replica or backend is tried;
- a backend's 4xx other than 429 is its answer to this very request, never retried (another
  backend would be handed the same body): 400 `backend_refused` when its words name what it
  cannot take (400, 413, 422), else 502 `upstream_error`; the replica's breaker counts it;
- a refused connection, a timeout, a 429 or a failure (5xx, a broken connection, an error
  event, a reply the gateway cannot read, counted as 5xx) marks the replica's breaker (a
  refused connection opens it at once) and the next replica or backend is tried;
- when nothing served: 503 `no_ready_backend` with Retry-After when no replica could be tried
  (every breaker open), else by the last failure: 429 `upstream_rate_limited` (Retry-After),
  504 `first_token_timeout`, 502 `backend_not_allowed` (the guard), 502 `upstream_error`.

The reasons are metric label values (gateway_llm_fallbacks, gateway_llm_rescued) that the
collector and the dashboards read: they do not change.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

from gateway.wire.faults import BACKEND, CLIENT


class FailureReason(StrEnum):
    """Why one attempt at a backend gave no first token (a metric label too)."""

    CONNECT = "connect"  # nothing accepted the connection
    TIMEOUT = "timeout"  # no first token within first_token_timeout_ms, or the request's deadline ran out
    RATE_LIMITED = "429"  # the backend answered 429
    UPSTREAM_5XX = "5xx"  # the backend failed: a 5xx, a broken connection, an error event
    PROTOCOL = "protocol"  # a reply the gateway cannot read (counted as 5xx)
    REFUSED = "refused"  # a 4xx other than 429: the backend will not take this request
    GUARD = "guard"  # the outbound guard would not let the gateway connect or send: nothing was sent
    COOLDOWN = "cooldown"  # (a rescue's reason only) none of the variant's own backends was tried: breakers open


# What a backend's 4xx names as the request's own fault (its words go to the client as a 400).
REQUEST_REFUSALS = frozenset((400, 413, 422))


class Step(NamedTuple):
    """What one failed attempt does: `error` (status, code) ends the request there, else the
    next replica or backend is tried; `breaker`: the replica's breaker counts the failure
    (`at_once`: it opens now); `label`: counted in gateway_llm_fallbacks under this reason
    (None: not a fallback); `refusal`: counted as the guard's refusal under its rule; `rescue`:
    the reason a rescue of the variant counts when this was one of its own backends."""

    error: tuple[int, str] | None
    breaker: bool
    at_once: bool
    label: FailureReason | None
    refusal: bool
    rescue: FailureReason | None


def after_failure(reason: FailureReason, status: int = 0) -> Step:
    """What an attempt that failed for `reason` (the backend's HTTP `status`, 0 when none) does."""
    if reason is FailureReason.GUARD:
        return Step(None, breaker=False, at_once=False, label=None, refusal=True, rescue=FailureReason.GUARD)
    if reason is FailureReason.REFUSED:
        if status in REQUEST_REFUSALS:
            return Step((400, "backend_refused"), breaker=False, at_once=False, label=None, refusal=False, rescue=None)
        return Step((502, "upstream_error"), breaker=True, at_once=False, label=None, refusal=False, rescue=None)
    label = FailureReason.UPSTREAM_5XX if reason is FailureReason.PROTOCOL else reason
    return Step(None, breaker=True, at_once=label is FailureReason.CONNECT, label=label, refusal=False, rescue=label)


class GivenUp(NamedTuple):
    """The answer to a request no backend served: status, code, what the message begins with
    (the last failure's words follow), and Retry-After in seconds (0: none)."""

    status: int
    code: str
    prefix: str
    retry_after_s: float


def given_up(last: FailureReason | None, *, saw_replica: bool) -> GivenUp:
    """The answer when nothing served: `last` is the last attempt's reason (None: no attempt),
    `saw_replica`: some replica could be picked (not every breaker was open)."""
    if not saw_replica:
        return GivenUp(503, "no_ready_backend", "", 1.0)
    if last is FailureReason.RATE_LIMITED:
        return GivenUp(429, "upstream_rate_limited", "every backend is rate limited: ", 1.0)
    if last is FailureReason.TIMEOUT:
        return GivenUp(504, "first_token_timeout", "no backend gave a first token: ", 0.0)
    if last is FailureReason.GUARD:
        return GivenUp(502, "backend_not_allowed", "no backend the gateway may call: ", 0.0)
    return GivenUp(502, "upstream_error", "no backend could serve: ", 0.0)


def fault(status: int, code: str) -> str:
    """Whose fault an LLM error answer is: the backend's for a 5xx and for backends that are
    all rate limited (the client asked for nothing wrong), else the client's."""
    return BACKEND if status >= 500 or code == "upstream_rate_limited" else CLIENT


class BackendFailure(Exception):
    """An attempt that failed and why (`reason`; what that does: failover.after_failure);
    `status` the backend's HTTP status when it answered; `rule` the outbound guard's rule that
    refused it (reason GUARD: nothing was sent)."""

    def __init__(self, reason: FailureReason, message: str, status: int = 0, rule: str = ""):
        super().__init__(message)
        self.reason, self.message, self.status, self.rule = FailureReason(reason), message, status, rule
