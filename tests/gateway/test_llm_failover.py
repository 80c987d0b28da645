"""The LLM path's failover policy (gateway/llm/failover.py): state in, decision out, table-tested
like the tensor path's (tests/gateway/test_failover.py)."""

import pytest

from gateway.llm.backends import BackendFailure
from gateway.llm.failover import FailureReason, after_failure, fault, given_up
from gateway.wire.faults import BACKEND, CLIENT

R = FailureReason


@pytest.mark.parametrize(
    "reason,status,error,breaker,at_once,label,refusal,rescue",
    [
        # the guard sent nothing: no breaker, a refusal under its rule, the next replica or backend
        (R.GUARD, 0, None, False, False, None, True, R.GUARD),
        # a backend's 4xx naming the request: the client's 400 with its words, never retried, no breaker
        (R.REFUSED, 400, (400, "backend_refused"), False, False, None, False, None),
        (R.REFUSED, 413, (400, "backend_refused"), False, False, None, False, None),
        (R.REFUSED, 422, (400, "backend_refused"), False, False, None, False, None),
        # any other 4xx (its credentials refused, 404, ...): 502, never retried, the breaker counts it
        (R.REFUSED, 401, (502, "upstream_error"), True, False, None, False, None),
        (R.REFUSED, 403, (502, "upstream_error"), True, False, None, False, None),
        # backend failures: the breaker, a fallback counted under the reason, the next one tried
        (R.CONNECT, 0, None, True, True, R.CONNECT, False, R.CONNECT),
        (R.TIMEOUT, 0, None, True, False, R.TIMEOUT, False, R.TIMEOUT),
        (R.RATE_LIMITED, 429, None, True, False, R.RATE_LIMITED, False, R.RATE_LIMITED),
        (R.UPSTREAM_5XX, 503, None, True, False, R.UPSTREAM_5XX, False, R.UPSTREAM_5XX),
        # a reply the gateway cannot read counts as the backend's 5xx
        (R.PROTOCOL, 200, None, True, False, R.UPSTREAM_5XX, False, R.UPSTREAM_5XX),
    ],
)
def test_after_failure(reason, status, error, breaker, at_once, label, refusal, rescue):
    step = after_failure(reason, status)
    assert (step.error, step.breaker, step.at_once, step.label, step.refusal, step.rescue) == (
        error,
        breaker,
        at_once,
        label,
        refusal,
        rescue,
    )


@pytest.mark.parametrize(
    "last,saw_replica,status,code,retry_after_s",
    [
        # no replica could be tried (every breaker open): come back later, whatever came before
        (None, False, 503, "no_ready_backend", 1.0),
        (R.TIMEOUT, False, 503, "no_ready_backend", 1.0),
        # else the last failure says
        (R.RATE_LIMITED, True, 429, "upstream_rate_limited", 1.0),
        (R.TIMEOUT, True, 504, "first_token_timeout", 0.0),
        (R.GUARD, True, 502, "backend_not_allowed", 0.0),
        (R.CONNECT, True, 502, "upstream_error", 0.0),
        (R.UPSTREAM_5XX, True, 502, "upstream_error", 0.0),
        (R.PROTOCOL, True, 502, "upstream_error", 0.0),
        (None, True, 502, "upstream_error", 0.0),
    ],
)
def test_given_up(last, saw_replica, status, code, retry_after_s):
    answer = given_up(last, saw_replica=saw_replica)
    assert (answer.status, answer.code, answer.retry_after_s) == (status, code, retry_after_s)


@pytest.mark.parametrize(
    "status,code,whose",
    [
        (502, "upstream_error", BACKEND),
        (503, "no_ready_backend", BACKEND),
        (504, "first_token_timeout", BACKEND),
        (429, "upstream_rate_limited", BACKEND),  # every backend rate limited: not the client's doing
        (429, "rate_limited", CLIENT),  # the key over its own limits
        (400, "backend_refused", CLIENT),
        (404, "model_not_found", CLIENT),
    ],
)
def test_fault(status, code, whose):
    assert fault(status, code) == whose


def test_the_reasons_are_the_metric_labels_dashboards_read():
    """gateway_llm_fallbacks{reason} and gateway_llm_rescued{reason} keep their values."""
    assert {r.value for r in R} == {"connect", "timeout", "429", "5xx", "protocol", "refused", "guard", "cooldown"}


def test_a_backend_failure_carries_one_of_the_reasons():
    assert BackendFailure("5xx", "the backend failed").reason is R.UPSTREAM_5XX
    with pytest.raises(ValueError):
        BackendFailure("oops", "not a reason")
