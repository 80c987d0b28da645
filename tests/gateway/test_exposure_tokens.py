"""What one exposure token may carry, decided by one pure rule at both doors
(gateway/feedback_rules.check_tokens): table-tested like gateway/v2/failover.py, state in,
refusal (or none) out, then the same batches at the control plane's door."""

import time

import pytest

from gateway.contracts.feedback_rules import TokenRefusal, TokenUse, check_tokens, per_exposure, sign_exposure

KEY = bytes(range(32))
NOW_MS = int(time.time() * 1000)


def token(rid="r1", unit="u1", *, experiment="exp-1", endpoint="ctr", key=KEY, issued_s=0.0, ttl_s=3600):
    return sign_exposure(key, experiment, endpoint, "v2", rid, NOW_MS / 1000 + issued_s, ttl_s, unit)


def event(kind="click", tok=None, value=None, **extra):
    out = {"event_id": "e", "type": kind, **extra}
    if tok is not None:
        out["exposure_token"] = tok
    if value is not None:
        out["value"] = value
    return out


def keys(experiment):
    return {"exp-1": KEY}.get(experiment)


ALLOWED = per_exposure()
CASES = [
    # (name, events, keyed, refusal)
    ("one click", [event(tok=token())], False, None),
    (
        "a click, conversions and values within bounds",
        [
            event(tok=token()),
            *[event("conversion", token()) for _ in range(ALLOWED["conversion"])],
            *[event("value", token(), value=ALLOWED["value_abs"] / ALLOWED["value"]) for _ in range(ALLOWED["value"])],
        ],
        False,
        None,
    ),
    ("a second click on one exposure", [event(tok=token()), event(tok=token())], False, TokenRefusal.OVER_ALLOWANCE),
    (
        "4 000 conversions citing one token (the flood)",
        [event("conversion", token())] * 4000,
        False,
        TokenRefusal.OVER_ALLOWANCE,
    ),
    (
        "a value past the bound",
        [event("value", token(), value=ALLOWED["value_abs"] + 1)],
        False,
        TokenRefusal.OVER_ALLOWANCE,
    ),
    (
        "negative values count by their size",
        [event("value", token(), value=-ALLOWED["value_abs"]), event("value", token(), value=-1)],
        False,
        TokenRefusal.OVER_ALLOWANCE,
    ),
    ("clicks on two exposures of one unit", [event(tok=token("r1")), event(tok=token("r2"))], False, None),
    (
        "no key: tokens of two units (400 fake users in one POST)",
        [event(tok=token("r1", "u1")), event(tok=token("r2", "u2"))],
        False,
        TokenRefusal.MANY_UNITS,
    ),
    (
        "a key: many users' tokens in one batch",
        [event(tok=token("r1", "u1")), event(tok=token("r2", "u2"))],
        True,
        None,
    ),
    (
        "a key: replays are refused all the same",
        [event(tok=token()), event(tok=token())],
        True,
        TokenRefusal.OVER_ALLOWANCE,
    ),
    ("no key: an event without a token", [event(tok=token()), event(unit_key="u1")], False, TokenRefusal.MISSING_KEY),
    ("a key: events by request id need no token", [event(request_id="r9")], True, None),
    (
        "a token of another experiment (an ended one)",
        [event(tok=token(experiment="exp-0"))],
        False,
        TokenRefusal.INVALID,
    ),
    ("a token under another key (forged)", [event(tok=token(key=bytes(32)))], False, TokenRefusal.INVALID),
    ("a token of another endpoint", [event(tok=token(endpoint="other"))], True, TokenRefusal.INVALID),
    ("a token past its window", [event(tok=token(issued_s=-3601))], False, TokenRefusal.EXPIRED),
    ("a token just inside its window", [event(tok=token(issued_s=-3599))], False, None),
]


@pytest.mark.parametrize("name,events,keyed,refusal", CASES, ids=[c[0] for c in CASES])
def test_check_tokens(name, events, keyed, refusal):
    verdict = check_tokens(events, keys, endpoint="ctr", keyed=keyed, now_ms=NOW_MS)
    assert verdict.refusal is refusal, verdict.detail
    if refusal is None:
        assert len(verdict.tokens) == len(events)
    else:
        assert verdict.detail.startswith("events[") and verdict.refusal.status in (400, 401, 409)


def test_uses_sum_what_the_batch_asks_of_each_exposure():
    verdict = check_tokens(
        [event(tok=token("r1")), event("value", token("r1"), value=-5), event(tok=token("r2"))],
        keys,
        endpoint="ctr",
        keyed=False,
        now_ms=NOW_MS,
    )
    assert verdict.uses == {"exp-1/r1": TokenUse(click=1, value=1, value_abs=5.0), "exp-1/r2": TokenUse(click=1)}
    # what earlier batches carried counts too: the doors add it before they admit
    assert TokenUse(click=1).plus(verdict.uses["exp-1/r2"]).beyond() is not None
    assert TokenUse(conversion=1).plus(verdict.uses["exp-1/r2"]).beyond() is None
