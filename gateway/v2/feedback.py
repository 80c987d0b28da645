"""POST /v2/feedback: a batch of feedback events for one endpoint, relayed onto its source's
feedback stream (feedback_stream.py) that the control plane ingests.

Checked here by the rules both doors share (feedback_rules.py over feedback.schema.json:
400 naming the event and field). Authenticated like the endpoint's traffic, but a public
endpoint's feedback too needs a key of its team scoped to it; with no key, only a batch
whose every event cites an exposure token this endpoint's running experiment signed (when
it accepts them), all of one unit. Every cited token, keyed batch or not, must verify and
be unexpired (401), and no exposure may be asked for more than one exposure allows (409,
within the batch here, across batches in feedback_stream.py). Bounded: 1 MiB per body, 64 KiB
without a valid key (413, before the body is parsed), events per second per key (429 with
Retry-After; before parsing too once the key's budget is spent), an experiment's feedback
without a key by what its exposures allow (429), and a source whose stream's backlog is full
is a 503 for that source (retry: event ids are idempotent) rather than a silent drop. Every
refusal is counted: gateway_feedback_refused_total{endpoint, code} (events of a parsed body)
or gateway_feedback_bodies_refused_total{code} (bodies refused before parsing).
"""

from __future__ import annotations

import json
import time
from time import monotonic, perf_counter

from gateway.contracts.feedback_rules import TokenRefusal, check_feedback, check_tokens
from gateway.keys.tenants import EndpointAuth, authenticate, lookup_key, release
from gateway.telemetry.feedback_stream import FEEDBACK_BODIES_REFUSED, FEEDBACK_REFUSED, Refused
from gateway.v2.access import concealed, conceals, missing, rejected
from gateway.wire.faults import Problem
from gateway.wire.ids import request_id
from gateway.wire.responses import error, plain_headers

MAX_FEEDBACK_BODY = 1024 * 1024
# Without a valid key a body is one user's feedback (a browser's few events): larger bodies are
# refused before they are parsed, so an anonymous flood costs the gateway its bytes, not its parse.
MAX_KEYLESS_BODY = 64 * 1024
FEEDBACK_TOO_LARGE = "feedback_too_large"  # the 413's code, here and before the body is read (bodybounds.py)


class EventBuckets:
    """Events per second per key (token buckets, burst of one second's worth)."""

    def __init__(self, rate: float):
        self.rate = rate
        self.state: dict[str, tuple[float, float]] = {}

    def empty(self, who: str, now: float) -> bool:
        """Whether `who` has not one event's budget left (checked before a body is parsed)."""
        tokens, stamp = self.state.get(who, (self.rate, now))
        return min(self.rate, tokens + (now - stamp) * self.rate) < 1.0

    def take(self, who: str, events: int, now: float) -> float:
        tokens, stamp = self.state.get(who, (self.rate, now))
        tokens = min(self.rate, tokens + (now - stamp) * self.rate)
        if events > tokens:
            self.state[who] = (tokens, now)
            return (events - tokens) / self.rate
        self.state[who] = (tokens - events, now)
        return 0.0


def _refused(name: str, events: int, status: int, code: str, detail: str, rid: str, extra: dict | None = None):
    FEEDBACK_REFUSED.labels(name, code).inc(events)
    return error(status, code, detail, rid, extra=extra)


def _retry(wait_s: float) -> dict:
    return {"Retry-After": str(max(1, int(wait_s + 0.999)))}


def _who(headers: dict, keys: dict, ep, name: str, events: list, rid: str):
    """(key or None, token verdict, None) or (None, None, the refusal): a key of the endpoint's
    team (public endpoint or not: its feedback moves an experiment), or exposure tokens alone."""
    team_only = EndpointAuth(False, ep.auth.allowed, ep.auth.teams)
    key, rejection = authenticate(headers, team_only, keys, name, perf_counter())
    keyed = rejection is None
    token_keys = {ep.experiment: ep.exposure_token_key}.get if ep.exposure_token_key else {}.get
    verdict = check_tokens(events, token_keys, endpoint=name, keyed=keyed, now_ms=int(time.time() * 1000))
    if rejection is not None:
        problem, reason, wait = rejection
        anonymous_ok = reason == "missing_key" and verdict.refusal not in (
            TokenRefusal.MISSING_KEY,
            TokenRefusal.INVALID,
        )
        if not anonymous_ok:
            if not ep.auth.public and conceals(reason, key, ep.auth):  # a closed endpoint: as if unknown
                return None, None, concealed(reason, rid, name, key)
            if reason == "missing_key":
                problem = Problem(
                    401,
                    "missing_key",
                    f"feedback for {name!r} needs a key of its team (Authorization: Bearer <key> or X-API-Key)"
                    + (", or every event's exposure_token, all of one unit" if ep.exposure_token_key else ""),
                )
            FEEDBACK_REFUSED.labels(name, problem[1]).inc(len(events))
            return None, None, rejected(problem, reason, wait, rid, name, key)
    if verdict.refusal is not None:
        if key is not None:
            release(key)
        refusal = verdict.refusal
        return None, None, _refused(name, len(events), refusal.status, refusal.code, verdict.detail, rid)
    return key, verdict, None


def _before_parse(gateway, request, rid: str):
    """A refusal decided from the headers and the body's size alone, or None: bodies past the
    bound, a large body without a valid key, a valid key with no budget left. The same answer
    for every endpoint name (none is parsed yet): no oracle of which exist."""
    size = len(request.body or b"")
    if size > MAX_FEEDBACK_BODY:
        FEEDBACK_BODIES_REFUSED.labels("feedback_too_large").inc()
        return error(413, "feedback_too_large", f"a feedback body is at most {MAX_FEEDBACK_BODY} bytes", rid)
    table = gateway.table
    _, key = lookup_key(request.headers, table.keys) if table is not None else (None, None)
    if key is None and size > MAX_KEYLESS_BODY:
        FEEDBACK_BODIES_REFUSED.labels("feedback_too_large").inc()
        detail = (
            f"without a valid key a feedback body is one user's feedback, at most {MAX_KEYLESS_BODY} bytes "
            "(send larger batches with a key of the endpoint's team)"
        )
        return error(413, "feedback_too_large", detail, rid)
    if key is not None and gateway.feedback_buckets.empty(key.id, monotonic()):
        FEEDBACK_BODIES_REFUSED.labels("feedback_rate_limited").inc()
        detail = f"over the feedback rate of {gateway.feedback_buckets.rate:g} events/s"
        return error(429, "feedback_rate_limited", detail, rid, extra={"Retry-After": "1"})
    return None


async def feedback(gateway, request):
    rid = request_id(request.headers)
    early = _before_parse(gateway, request, rid)
    if early is not None:
        return early
    try:
        checked = check_feedback(json.loads(request.body or b"null"))
    except ValueError:
        checked = "the body is not JSON"
    if isinstance(checked, str):
        return error(400, "invalid_feedback", checked, rid)
    name, events = checked
    table = gateway.table
    ep = table.endpoints.get(name) if table is not None else None
    if ep is None:
        return missing(table, name, request.headers, rid)[0]
    key, verdict, refusal = _who(request.headers, table.keys, ep, name, events, rid)
    if refusal is not None:
        return refusal
    try:
        return await _relay(gateway, ep, name, events, key, verdict, rid)
    finally:
        if key is not None:
            release(key)


async def _relay(gateway, ep, name: str, events: list, key, verdict, rid: str):
    if key is not None:
        wait = gateway.feedback_buckets.take(key.id, len(events), monotonic())
        if wait:
            detail = f"over the feedback rate of {gateway.feedback_buckets.rate:g} events/s"
            return _refused(name, len(events), 429, "feedback_rate_limited", detail, rid, _retry(wait))
    if not gateway.exposures.enabled:
        return error(
            503,
            "no_feedback_stream",
            "this gateway has no feedback stream (GATEWAY_EXPOSURE_STREAM_URL); POST /api/v1/feedback/ on the control plane",
            rid,
        )
    expiries = {}
    for token in verdict.tokens:
        if token is not None:
            expiries[token.exposure] = token.expires_ms
    try:
        await gateway.feedback_relay.relay(
            name, events, getattr(key, "id", None), uses=verdict.uses, expiries=expiries, experiment=ep.experiment
        )
    except Refused as exc:
        return _refusal(name, events, verdict, exc, rid)
    except Exception:  # noqa: BLE001 - the stream is down: the client retries (event ids keep it idempotent)
        return error(
            503, "feedback_unavailable", "the feedback stream cannot be reached; retry", rid, extra={"Retry-After": "1"}
        )
    return 202, plain_headers(rid), json.dumps({"accepted": len(events)}).encode()


def _refusal(name: str, events: list, verdict, exc: Refused, rid: str):
    n = len(events)
    if exc.kind == "backlog":
        detail = f"the feedback stream of this source for {name!r} is full (the control plane is behind on it); retry"
        return _refused(name, n, 503, "feedback_backlog_full", detail, rid, {"Retry-After": "2"})
    if exc.kind == "rate":
        detail = f"over what {name!r}'s experiment's exposures allow for feedback without a key; retry"
        return _refused(name, n, 429, "feedback_rate_limited", detail, rid, _retry(exc.wait_s))
    first = next(i for i, t in enumerate(verdict.tokens) if t is not None and t.exposure == exc.exposure)
    refusal = TokenRefusal.OVER_ALLOWANCE
    detail = (
        f"events[{first}].exposure_token: this exposure already carried what one exposure allows "
        "(a click, a few conversions and a bounded value); the replay is refused"
    )
    return _refused(name, n, refusal.status, refusal.code, detail, rid)
