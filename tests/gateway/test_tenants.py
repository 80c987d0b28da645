"""Key checks of the gateway (gateway/keys/tenants.py) as pure functions: which header, which
status, the token bucket's arithmetic and Retry-After, the concurrency quota."""

from hashlib import sha256

import pytest

from gateway.keys.tenants import PUBLIC, EndpointAuth, authenticate, compile_keys, release
from gateway.wire.responses import retry_after

SECRET = "mpk_9bVq3xRzT0r8kP2mLw7sNc4uYe1aHd6j"  # a random-looking token; tests never log it


def keys(**overrides):
    doc = {
        "id": "k1",
        "prefix": SECRET[:8],
        "sha256": sha256(SECRET.encode()).hexdigest(),
        "team": "ads",
        "rate_per_s": 2,
        "burst": 3,
        "max_concurrency": 2,
        **overrides,
    }
    other = {"id": "k2", "prefix": "mpk_other", "sha256": sha256(b"other-team-key").hexdigest(), "team": "search"}
    return compile_keys([doc, other])


SCOPED = EndpointAuth(False, frozenset({"k1"}))


@pytest.mark.parametrize(
    "headers, status, code",
    [
        ({}, 401, "missing_key"),
        ({"authorization": "Basic dXNlcjpwYXNz"}, 401, "invalid_key"),
        ({"authorization": "Bearer"}, 401, "invalid_key"),
        ({"authorization": "Bearer not-a-key"}, 401, "invalid_key"),
        ({"x-api-key": "x" * 5000}, 401, "invalid_key"),
        ({"authorization": "Bearer other-team-key"}, 403, "forbidden"),
    ],
)
def test_refusals(headers, status, code):
    key, rejection = authenticate(headers, SCOPED, keys(), "ctr", 0.0)
    problem, reason, _ = rejection
    assert (problem[0], problem[1], reason) == (status, code, code)
    assert SECRET not in problem[2] and "other-team-key" not in problem[2]
    if status == 403:
        assert key.team == "search" and "team search" in problem[2] and "'ctr'" in problem[2]


@pytest.mark.parametrize(
    "headers", [{"authorization": f"Bearer {SECRET}"}, {"authorization": f"bearer  {SECRET} "}, {"x-api-key": SECRET}]
)
def test_a_scoped_key_in_either_header_is_admitted(headers):
    table = keys(rate_per_s=None, max_concurrency=None)
    key, rejection = authenticate(headers, SCOPED, table, "ctr", 0.0)
    assert rejection is None and key.id == "k1" and key.in_flight == 1
    release(key)
    assert key.in_flight == 0


def test_public_endpoint_needs_nothing():
    assert authenticate({}, EndpointAuth(True, frozenset()), {}, "demo", 0.0) == (PUBLIC, None)


def test_token_bucket_allows_burst_then_the_rate_with_retry_after():
    table = keys(max_concurrency=None)
    headers = {"x-api-key": SECRET}
    outcomes = []
    for now in (0.0, 0.0, 0.0, 0.0, 0.2, 0.5, 0.5, 1.0):
        key, rejection = authenticate(headers, SCOPED, table, "ctr", 100.0 + now)
        outcomes.append(None if rejection is None else round(rejection[2], 3))
        if rejection is None:
            release(key)
    # burst 3, then 2/s: the 4th at t=0 waits 0.5 s; at 0.2 one token is 0.4 away -> wait 0.3;
    # at 0.5 a whole token is back (one request), at 1.0 one more
    assert outcomes == [None, None, None, 0.5, 0.3, None, 0.5, None]
    assert retry_after(0.3) == "1" and retry_after(2.2) == "3"


def test_concurrency_quota():
    table = keys(rate_per_s=None)
    headers = {"x-api-key": SECRET}
    first, _ = authenticate(headers, SCOPED, table, "ctr", 0.0)
    second, _ = authenticate(headers, SCOPED, table, "ctr", 0.0)
    key, rejection = authenticate(headers, SCOPED, table, "ctr", 0.0)
    assert rejection[1] == "concurrency_limit" and rejection[0][0] == 429 and key.in_flight == 2
    release(first)
    assert authenticate(headers, SCOPED, table, "ctr", 0.0)[1] is None
