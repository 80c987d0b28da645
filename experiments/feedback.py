"""Validation of feedback batches (pure; the API and the ingest of the gateway's stream use it).

The rules are the gateway's: one file, gateway/contracts/feedback.schema.json, checked by the one
module gateway/contracts/feedback_rules.py that both doors call (the import contract in
pyproject.toml allows the control plane this one gateway module and no other). A batch:
{"endpoint": "<name>", "events": [{"event_id", "type": click|conversion|value, one of
"request_id" / "unit_key" / "exposure_token", "value" (|v| <= 1e9; required for type
value), "time" (RFC 3339 within 7 days before and 5 minutes after now; default now)}]}.
Any malformed event rejects the whole batch with a message naming the event's index and
field, so nothing is half-written."""

from __future__ import annotations

from datetime import UTC, datetime

from gateway.contracts import feedback_rules

MAX_EVENTS = feedback_rules.schema()["properties"]["events"]["maxItems"]
TOKEN_FIELD = feedback_rules.TOKEN
# the gateway signs, both doors verify and bound what one exposure's token carries
read_exposure_token = feedback_rules.read_exposure_token
check_tokens = feedback_rules.check_tokens
per_exposure = feedback_rules.per_exposure
TokenUse = feedback_rules.TokenUse
TokenRefusal = feedback_rules.TokenRefusal
feedback_stream = feedback_rules.feedback_stream
FEEDBACK_STREAMS = feedback_rules.FEEDBACK_STREAMS


class FeedbackError(ValueError):
    def __init__(self, detail: str, field: str):
        super().__init__(detail)
        self.detail, self.field = detail, field


def limits() -> dict:
    return feedback_rules.limits()


def parse_batch(doc, *, now: datetime | None = None) -> tuple[str, list[dict]]:
    """(endpoint name, events with `time` as an aware UTC datetime and `value` a float)."""
    now = now or datetime.now(UTC)
    checked = feedback_rules.check_feedback(doc, now)
    if isinstance(checked, str):
        field = checked.split(":", 1)[0] if ":" in checked else "events"
        raise FeedbackError(checked, field)
    endpoint, raw = checked
    events = []
    for e in raw:
        event = {"event_id": e["event_id"], "type": e["type"], "value": float(e.get("value", 1.0))}
        event["time"] = feedback_rules.event_time(e["time"], now) if "time" in e else now
        for key in ("request_id", "unit_key", TOKEN_FIELD):
            if key in e:
                event[key] = e[key]
        events.append(event)
    return endpoint, events


def parse_events(events, *, now: datetime | None = None, endpoint: str = "-") -> list[dict]:
    """The events of a batch for `endpoint` (the API's and the stream's shape)."""
    return parse_batch({"endpoint": endpoint, "events": events}, now=now)[1]
