"""What the gateway does when an upstream attempt fails: pure decisions, no I/O.

State in, decision out, table-tested in tests/gateway/test_failover.py like the rollout
machine (deployments/rollout_machine.py): the infer path (gateway/v2/infer.py) reports why an
attempt failed (`FailureReason`), asks `retry_on_stable` whether one retry goes to the
stable variant, and, when nothing served the request, asks `failure_outcome` which answer
the client gets and whose fault it is (the judge and the breakers see only the backend's).

The policy:
- a canary, A/B arm or baseline that fails for any backend reason is retried once on the
  stable (failover), unless the request does not fit the stable's signature;
- the stable is retried once on another stable replica only when the first never reached
  the model (the connection was refused, or Triton does not have the model loaded);
- a deadline the client set below the endpoint's floor is the client's, never retried;
- a 500 in which Triton says it cannot read the request body (`blames_request`) is the
  client's 400, never retried;
- what is left is a 504 (deadline), Triton's own 5xx passed through, a 503 with
  Retry-After while no replica can serve, or a 502.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

from orjson import loads

from gateway.wire.faults import BACKEND, CLIENT


class FailureReason(StrEnum):
    """Why one upstream attempt did not produce a reply to pass on (a metric label too)."""

    CONNECT = "connect"  # nothing accepted the connection (replica down or restarting)
    DISCONNECT = "disconnect"  # the connection dropped before a whole reply
    TIMEOUT = "timeout"  # no reply within the attempt's timeout (the endpoint's deadline)
    CLIENT_DEADLINE = "client_deadline"  # the client's own deadline (below the endpoint's floor) ran out
    UPSTREAM_5XX = "5xx"  # Triton answered with a server error
    NOT_LOADED = "not_loaded"  # Triton answered 404 "unknown model": the replica is (re)loading it
    UNAVAILABLE = "unavailable"  # no replica of the chosen variant could be picked (breakers open)
    INCOMPATIBLE = "incompatible"  # the candidate's signature refuses what the stable's takes
    BAD_INPUT = "bad_input"  # Triton answered 500 with its HTTP front end's words for a body it cannot read


# Reasons that never reached the model: another replica of the same variant may serve.
NEVER_REACHED_MODEL = frozenset({FailureReason.CONNECT, FailureReason.NOT_LOADED})


def retry_on_stable(reason: FailureReason, *, on_stable: bool, stable_fits: bool) -> bool:
    """Whether the one retry goes to the stable variant.

    `on_stable`: the failed attempt was on the stable itself. `stable_fits`: the request
    passes the stable's signature (a candidate may accept inputs the stable refuses)."""
    if reason is FailureReason.CLIENT_DEADLINE or reason is FailureReason.BAD_INPUT:
        return False  # the client's: the same body would fail the same way anywhere
    if on_stable:
        return reason in NEVER_REACHED_MODEL
    return stable_fits or reason is FailureReason.INCOMPATIBLE


class Kind(StrEnum):
    """The shape of the answer when no attempt served the request."""

    CLIENT_DEADLINE = "client_deadline"  # 504, the client's deadline (counted as the client's)
    BAD_INPUT = "bad_input"  # 400 bad_request: Triton could not read the body (counted as the client's)
    DEADLINE = "deadline"  # 504 deadline_exceeded
    PASS_THROUGH = "pass_through"  # Triton's own 5xx reply, renamed
    NO_REPLICA = "no_replica"  # 503 no_ready_backend: no replica could be picked
    RESTARTING = "restarting"  # 503 no_ready_backend: the replica refuses connections
    LOADING = "loading"  # 503 no_ready_backend: the replica does not have the model loaded
    UPSTREAM_ERROR = "upstream_error"  # 502 upstream_error


class Outcome(NamedTuple):
    kind: Kind
    status: int  # HTTP status; PASS_THROUGH: 0 (the upstream's)
    code: str  # the gateway's error code ("" for PASS_THROUGH)
    fault: str  # CLIENT or BACKEND

    @property
    def retry_later(self) -> bool:
        """503s tell the client when to come back (Retry-After from the breakers)."""
        return self.status == 503


_OUTCOMES = {
    Kind.CLIENT_DEADLINE: Outcome(Kind.CLIENT_DEADLINE, 504, "deadline_exceeded", CLIENT),
    Kind.BAD_INPUT: Outcome(Kind.BAD_INPUT, 400, "bad_request", CLIENT),
    Kind.DEADLINE: Outcome(Kind.DEADLINE, 504, "deadline_exceeded", BACKEND),
    Kind.PASS_THROUGH: Outcome(Kind.PASS_THROUGH, 0, "", BACKEND),
    Kind.NO_REPLICA: Outcome(Kind.NO_REPLICA, 503, "no_ready_backend", BACKEND),
    Kind.RESTARTING: Outcome(Kind.RESTARTING, 503, "no_ready_backend", BACKEND),
    Kind.LOADING: Outcome(Kind.LOADING, 503, "no_ready_backend", BACKEND),
    Kind.UPSTREAM_ERROR: Outcome(Kind.UPSTREAM_ERROR, 502, "upstream_error", BACKEND),
}


def failure_outcome(reason: FailureReason, *, deadline_passed: bool, retried: bool) -> Outcome:
    """The answer for the last failure when nothing served the request.

    `deadline_passed`: the endpoint's (or client's) deadline has run out. `retried`: a
    retry target was found (so "no replica" is not the reason any more)."""
    if reason is FailureReason.CLIENT_DEADLINE:
        kind = Kind.CLIENT_DEADLINE
    elif reason is FailureReason.BAD_INPUT:
        kind = Kind.BAD_INPUT
    elif reason is FailureReason.TIMEOUT or deadline_passed:
        kind = Kind.DEADLINE
    elif reason is FailureReason.UPSTREAM_5XX:
        kind = Kind.PASS_THROUGH
    elif reason in (FailureReason.UNAVAILABLE, FailureReason.INCOMPATIBLE) and not retried:
        kind = Kind.NO_REPLICA
    elif reason is FailureReason.NOT_LOADED:
        kind = Kind.LOADING
    elif reason is FailureReason.CONNECT:
        kind = Kind.RESTARTING
    else:
        kind = Kind.UPSTREAM_ERROR
    return _OUTCOMES[kind]


def counts_as_upstream_error(reason: FailureReason) -> bool:
    """gateway_upstream_errors_total counts attempts that reached for a replica; "no
    replica could be picked", the client's own deadline and a body Triton cannot read are
    not upstream errors."""
    return reason not in _NOT_UPSTREAM_ERRORS


_NOT_UPSTREAM_ERRORS = frozenset((FailureReason.UNAVAILABLE, FailureReason.CLIENT_DEADLINE, FailureReason.BAD_INPUT))

# How Triton's HTTP front end (src/http_server.cc) words a request body it cannot read: its
# JSON reader's errors (rapidjson's parse error, TritonJson's "attempt to access JSON ...",
# prefixed by the field: "Unable to parse 'data': ...") are created as INTERNAL, so Triton
# answers 500 for what is the client's. Matched at the start of the message only; a model's
# own error text is whatever its author wrote, so a model that fails with these words would
# be read as its clients' fault (none of the platform's adapters does).
BODY_FAULT_PREFIXES = (
    "Unable to parse ",
    "Unable to set '",
    "failed to parse the request JSON buffer",
    "failed to get request params",
    "attempt to access JSON ",
    "attempt to get members for non-object",
)


def triton_error(body: bytes) -> str | None:
    """The `error` message of a Triton error reply, or None when it has none."""
    try:
        message = loads(body).get("error")
    except (ValueError, AttributeError):
        return None
    return message if type(message) is str else None


def blames_request(status: int, body: bytes) -> bool:
    """Whether a Triton reply to an infer request says the request body is at fault: a
    500 whose message is one of its HTTP front end's words for a body it cannot read."""
    if status != 500:
        return False
    message = triton_error(body)
    return message is not None and message.startswith(BODY_FAULT_PREFIXES)


# Upstream statuses that count toward a replica's circuit breaker. Triton answers 500 for
# some malformed requests too, so only "cannot serve" statuses eject; every 5xx is still
# retried off a canary.
UNAVAILABLE_STATUSES = frozenset((502, 503, 504))


def failure_detail(outcome, failure, ep, variant, timeout: float) -> str:
    """The message of an answer when nothing served the request (either protocol)."""
    name = ep.name
    kind = outcome.kind
    if kind is Kind.CLIENT_DEADLINE:
        return (
            f"no reply from {name!r} within the client's {timeout * 1000:.0f} ms (below this endpoint's floor of "
            f"{ep.min_timeout_s * 1000:.0f} ms: counted as the client's)"
        )
    if kind is Kind.DEADLINE:
        return f"no reply from {name!r} within {timeout * 1000:.0f} ms"
    if kind is Kind.BAD_INPUT:
        message = (triton_error(failure.body) or "")[:300].replace(variant.triton_model, name)
        return f"endpoint {name!r}: the model server cannot read this request: {message}"
    if kind is Kind.NO_REPLICA:
        return f"endpoint {name!r}: no ready replica for variant {variant.name!r}"
    if kind is Kind.LOADING:
        return f"endpoint {name!r}: the replica of variant {variant.name!r} is loading the model; retry shortly"
    if kind is Kind.RESTARTING:
        return f"endpoint {name!r}: the replica of variant {variant.name!r} is not accepting connections; retry shortly"
    return f"endpoint {name!r}: upstream {failure.reason} on variant {variant.name!r}"
