"""Validation of feedback batches (pure; the API and the ingest of the gateway's stream use it).

A batch: {"endpoint": "<name>", "events": [{"event_id", "type": click|conversion|value,
"request_id" or "unit_key", "value" (number; required for type value), "time" (RFC 3339,
optional: now)}]}. Any malformed event rejects the whole batch with a message naming
the event's index and field, so nothing is half-written."""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone

TYPES = ("click", "conversion", "value")
MAX_EVENTS = 10_000
ID_RE = re.compile(r"^[\x21-\x7e]{1,128}$")
MAX_SKEW_S = 300  # an event may not claim to come from the future beyond clock skew


class FeedbackError(ValueError):
    def __init__(self, detail: str, field: str):
        super().__init__(detail)
        self.detail, self.field = detail, field


def _time(raw, where: str, now: datetime) -> datetime:
    if raw is None:
        return now
    if not isinstance(raw, str):
        raise FeedbackError(f"{where}.time: give an RFC 3339 string, e.g. 2026-11-23T12:00:00Z.", f"{where}.time")
    try:
        t = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise FeedbackError(f"{where}.time: {raw[:40]!r} is not an RFC 3339 time.", f"{where}.time") from None
    if t.tzinfo is None:
        raise FeedbackError(f"{where}.time: give a time zone (Z or +hh:mm).", f"{where}.time")
    try:  # stored in UTC: PostgreSQL refuses offsets past ±15:59, which Python accepts
        t = t.astimezone(timezone.utc)
    except OverflowError:
        raise FeedbackError(f"{where}.time: {raw[:40]} is out of range in UTC.", f"{where}.time") from None
    if (t - now).total_seconds() > MAX_SKEW_S:
        raise FeedbackError(f"{where}.time: {raw[:40]} is in the future.", f"{where}.time")
    return t


def parse_events(events, *, now: datetime | None = None) -> list[dict]:
    now = now or datetime.now(timezone.utc)
    if not isinstance(events, list) or not events:
        raise FeedbackError("events: give a non-empty list of feedback events.", "events")
    if len(events) > MAX_EVENTS:
        raise FeedbackError(f"events: at most {MAX_EVENTS} per batch, got {len(events)}.", "events")
    out = []
    for i, e in enumerate(events):
        where = f"events[{i}]"
        if not isinstance(e, dict):
            raise FeedbackError(f"{where}: give an object.", where)
        unknown = set(e) - {"event_id", "type", "request_id", "unit_key", "value", "time"}
        if unknown:
            raise FeedbackError(f"{where}: unknown field(s) {sorted(unknown)[:5]}.", where)
        event_id = e.get("event_id")
        if not isinstance(event_id, str) or not ID_RE.match(event_id):
            raise FeedbackError(f"{where}.event_id: give 1-128 printable ASCII characters (the idempotency key).", f"{where}.event_id")
        kind = e.get("type")
        if kind not in TYPES:
            raise FeedbackError(f"{where}.type: {str(kind)[:40]!r} is not one of {', '.join(TYPES)}.", f"{where}.type")
        rid, unit = e.get("request_id"), e.get("unit_key")
        if (rid is None) == (unit is None):
            raise FeedbackError(f"{where}: give exactly one of request_id or unit_key.", where)
        for name, val in (("request_id", rid), ("unit_key", unit)):
            if val is not None and (not isinstance(val, str) or not 0 < len(val) <= (64 if name == "request_id" else 200)):
                raise FeedbackError(f"{where}.{name}: give a non-empty string.", f"{where}.{name}")
        value = e.get("value", 1.0)
        if kind == "value" and "value" not in e:
            raise FeedbackError(f"{where}.value: a value event needs a number.", f"{where}.value")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise FeedbackError(f"{where}.value: give a finite number.", f"{where}.value")
        event = {"event_id": event_id, "type": kind, "value": float(value), "time": _time(e.get("time"), where, now)}
        if rid is not None:
            event["request_id"] = rid
        else:
            event["unit_key"] = unit
        out.append(event)
    return out
