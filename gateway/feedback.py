"""POST /v2/feedback: a batch of feedback events for one endpoint, relayed onto the feedback
stream the control plane ingests (exposures.ExposureLog.relay_feedback).

Checked here by the rules both doors share (feedback_rules.py over feedback.schema.json:
400 naming the event and field). Authenticated like the endpoint's traffic, but a public
endpoint's feedback too needs a key of its team scoped to it; with no key, only a batch
whose every event cites an exposure token this endpoint's experiment signed (when it
accepts them). Bounded: 1 MiB per body (413), events per second per key (429 with
Retry-After), and a stream backlog past its bound is a 503 (retry: event ids are idempotent)
rather than a silent drop.
"""

from __future__ import annotations

import json
from time import monotonic, perf_counter

from .access import concealed, conceals, missing, rejected
from .feedback_rules import check_feedback, read_exposure_token
from .ids import request_id
from .responses import error, plain_headers
from .tenants import EndpointAuth, authenticate, release
from .tensors import Problem

MAX_FEEDBACK_BODY = 1024 * 1024
TOKEN = "exposure_token"


class EventBuckets:
    """Events per second per key (token buckets, burst of one second's worth)."""

    def __init__(self, rate: float):
        self.rate = rate
        self.state: dict[str, tuple[float, float]] = {}

    def take(self, who: str, events: int, now: float) -> float:
        tokens, stamp = self.state.get(who, (self.rate, now))
        tokens = min(self.rate, tokens + (now - stamp) * self.rate)
        if events > tokens:
            self.state[who] = (tokens, now)
            return (events - tokens) / self.rate
        self.state[who] = (tokens - events, now)
        return 0.0


def _token_only(ep, name: str, events: list) -> bool:
    """Every event cites a token this endpoint's current experiment signed."""
    key = ep.exposure_token_key
    if not key or not all(TOKEN in e for e in events):
        return False
    for event in events:
        fields = read_exposure_token(event[TOKEN], lambda experiment: key if experiment == ep.experiment else None)
        if fields is None or fields[1] != name:
            return False
    return True


async def feedback(gateway, request):
    rid = request_id(request.headers)
    if len(request.body or b"") > MAX_FEEDBACK_BODY:
        return error(413, "feedback_too_large", f"a feedback body is at most {MAX_FEEDBACK_BODY} bytes", rid)
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
    # the team's keys, public endpoint or not (its feedback moves an experiment)
    team_only = EndpointAuth(False, ep.auth.allowed, ep.auth.teams)
    key, rejection = authenticate(request.headers, team_only, table.keys, name, perf_counter())
    if rejection is not None:
        problem, reason, wait = rejection
        if not (reason == "missing_key" and _token_only(ep, name, events)):
            if not ep.auth.public and conceals(reason, key, ep.auth):  # a closed endpoint: as if unknown
                return concealed(reason, rid, name, key)
            if reason == "missing_key":
                problem = Problem(
                    401,
                    "missing_key",
                    f"feedback for {name!r} needs a key of its team (Authorization: Bearer <key> or X-API-Key)"
                    + (", or every event's exposure_token" if ep.exposure_token_key else ""),
                )
            return rejected(problem, reason, wait, rid, name, key)
    try:
        wait = gateway.feedback_buckets.take(key.id if key else f"tokens:{name}", len(events), monotonic())
        if wait:
            return error(
                429,
                "feedback_rate_limited",
                f"over the feedback rate of {gateway.feedback_buckets.rate:g} events/s",
                rid,
                extra={"Retry-After": str(max(1, int(wait + 0.999)))},
            )
        exposures = gateway.exposures
        if not exposures.enabled:
            return error(
                503,
                "no_feedback_stream",
                "this gateway has no feedback stream (GATEWAY_EXPOSURE_STREAM_URL); POST /api/v1/feedback/ on the control plane",
                rid,
            )
        if not await exposures.relay_feedback(name, events, getattr(key, "id", None)):
            return error(
                503, "feedback_backlog_full", "the feedback stream is full; retry", rid, extra={"Retry-After": "2"}
            )
    except Exception:  # noqa: BLE001 - the stream is down: the client retries (event ids keep it idempotent)
        return error(
            503, "feedback_unavailable", "the feedback stream cannot be reached; retry", rid, extra={"Retry-After": "1"}
        )
    finally:
        if key is not None:
            release(key)
    return 202, plain_headers(rid), json.dumps({"accepted": len(events)}).encode()
