"""The gateway's failover policy (gateway/v2/failover.py): state in, decision out, table-tested."""

import pytest

from gateway.v2.failover import (
    NEVER_REACHED_MODEL,
    FailureReason,
    Kind,
    blames_request,
    counts_as_upstream_error,
    failure_outcome,
    retry_on_stable,
)
from gateway.wire.faults import BACKEND, CLIENT

R = FailureReason


@pytest.mark.parametrize(
    "reason,on_stable,stable_fits,retry",
    [
        # a candidate's backend failure fails over to the stable when the stable takes the request
        (R.TIMEOUT, False, True, True),
        (R.UPSTREAM_5XX, False, True, True),
        (R.DISCONNECT, False, True, True),
        (R.CONNECT, False, True, True),
        (R.NOT_LOADED, False, True, True),
        (R.UNAVAILABLE, False, True, True),
        # ... but not when the stable's signature refuses it (a candidate with a new input)
        (R.TIMEOUT, False, False, False),
        (R.UPSTREAM_5XX, False, False, False),
        # a candidate refusing what the stable takes is served by the stable by definition
        (R.INCOMPATIBLE, False, False, True),
        # the stable retries on another replica only when the first never reached the model
        (R.CONNECT, True, True, True),
        (R.NOT_LOADED, True, True, True),
        (R.TIMEOUT, True, True, False),
        (R.UPSTREAM_5XX, True, True, False),
        (R.DISCONNECT, True, True, False),
        # the client's own deadline is never retried, wherever it ran out
        (R.CLIENT_DEADLINE, False, True, False),
        (R.CLIENT_DEADLINE, True, True, False),
        # nor a body Triton says it cannot read: the stable would refuse it alike, and count it
        (R.BAD_INPUT, False, True, False),
        (R.BAD_INPUT, True, True, False),
    ],
)
def test_who_is_retried_on_the_stable(reason, on_stable, stable_fits, retry):
    assert retry_on_stable(reason, on_stable=on_stable, stable_fits=stable_fits) is retry


@pytest.mark.parametrize(
    "reason,deadline_passed,retried,kind,status,code,fault",
    [
        (R.CLIENT_DEADLINE, False, False, Kind.CLIENT_DEADLINE, 504, "deadline_exceeded", CLIENT),
        (R.CLIENT_DEADLINE, True, True, Kind.CLIENT_DEADLINE, 504, "deadline_exceeded", CLIENT),
        (R.TIMEOUT, False, False, Kind.DEADLINE, 504, "deadline_exceeded", BACKEND),
        (R.BAD_INPUT, False, False, Kind.BAD_INPUT, 400, "bad_request", CLIENT),
        (R.BAD_INPUT, True, False, Kind.BAD_INPUT, 400, "bad_request", CLIENT),  # Triton answered: not a deadline
        # any failure once the deadline has passed is a deadline, not what failed last
        (R.CONNECT, True, True, Kind.DEADLINE, 504, "deadline_exceeded", BACKEND),
        (R.UPSTREAM_5XX, False, True, Kind.PASS_THROUGH, 0, "", BACKEND),
        (R.UNAVAILABLE, False, False, Kind.NO_REPLICA, 503, "no_ready_backend", BACKEND),
        (R.INCOMPATIBLE, False, False, Kind.NO_REPLICA, 503, "no_ready_backend", BACKEND),
        (R.UNAVAILABLE, False, True, Kind.UPSTREAM_ERROR, 502, "upstream_error", BACKEND),
        (R.NOT_LOADED, False, True, Kind.LOADING, 503, "no_ready_backend", BACKEND),
        (R.CONNECT, False, False, Kind.RESTARTING, 503, "no_ready_backend", BACKEND),
        (R.DISCONNECT, False, True, Kind.UPSTREAM_ERROR, 502, "upstream_error", BACKEND),
    ],
)
def test_the_answer_when_nothing_served(reason, deadline_passed, retried, kind, status, code, fault):
    outcome = failure_outcome(reason, deadline_passed=deadline_passed, retried=retried)
    assert (outcome.kind, outcome.status, outcome.code, outcome.fault) == (kind, status, code, fault)
    assert outcome.retry_later is (status == 503)


def test_every_reason_has_an_answer_and_a_retry_rule():
    for reason in FailureReason:
        for on_stable in (True, False):
            assert retry_on_stable(reason, on_stable=on_stable, stable_fits=True) in (True, False)
        assert failure_outcome(reason, deadline_passed=False, retried=False).kind in Kind
    assert NEVER_REACHED_MODEL <= set(FailureReason)


def test_what_counts_as_an_upstream_error():
    assert not counts_as_upstream_error(R.UNAVAILABLE)  # no replica was reached for
    assert not counts_as_upstream_error(R.CLIENT_DEADLINE)  # the client's doing
    assert not counts_as_upstream_error(R.BAD_INPUT)  # the client's body, not the replica
    assert all(counts_as_upstream_error(r) for r in set(R) - {R.UNAVAILABLE, R.CLIENT_DEADLINE, R.BAD_INPUT})


@pytest.mark.parametrize(
    "status,body,blamed",
    [
        # Triton 2.51's own words (tritonserver answered these in tests/gateway/test_tensor_contents_live.py)
        (500, b'{"error":"Unable to parse \'data\': attempt to access JSON non-number as double"}', True),
        (
            500,
            b'{"error":"Unable to parse \'binary_data_output\': attempt to access JSON non-boolean as boolean"}',
            True,
        ),
        (500, b'{"error":"Unable to parse JSON bytes array: attempt to access JSON non-string as string"}', True),
        (
            500,
            b'{"error":"failed to parse the request JSON buffer: Number too big to be stored in double. at 83"}',
            True,
        ),
        (500, b'{"error":"Unable to set \'classification\': attempt to access JSON non-unsigned-integer"}', True),
        (500, b'{"error":"failed to get request params.: attempt to get members for non-object"}', True),
        # a model's failure, Triton's other 5xx, a prefix that is not at the start, and non-JSON are the model's
        (500, b'{"error":"behaviour model: failing on purpose"}', False),
        (500, b'{"error":"model failed: Unable to parse \'data\'"}', False),
        (503, b'{"error":"Unable to parse \'data\': attempt to access JSON non-number as double"}', False),
        (500, b"<html>Internal Server Error</html>", False),
        (500, b'{"error": 5}', False),
        (500, b"[]", False),
    ],
)
def test_a_triton_500_is_the_clients_only_in_tritons_words_for_an_unreadable_body(status, body, blamed):
    assert blames_request(status, body) is blamed
