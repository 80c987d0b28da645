"""What feedback may hold, at the gateway's door, and the signed exposure token.

The rules are one file both doors read, `feedback.schema.json` (JSON Schema 2020-12 with
an `x-message` per keyword and `x-limits` for the time window); the control plane reads
the same file (experiments/feedback.py), so POST /v2/feedback and POST /api/v1/feedback/
refuse the same bodies with the same words. Validation is jsonschema-rs (a compiled
validator: ~0.3 µs per event, where the pure-Python jsonschema takes ~200 µs).

Exposure token: for an experiment that accepts them, every reply it serves carries
`X-Exposure-Token: <payload>.<mac>`, the payload the base64url of the JSON array
[experiment, endpoint, arm, request id, unix ms] and the mac HMAC-SHA256 of the payload's
text under the experiment's own key (from the route table, never sent to clients). Feedback
citing a token needs no inference key: only the gateway could have made it.
"""

from __future__ import annotations

import base64
import hmac
import json
from datetime import UTC, datetime
from functools import lru_cache
from hashlib import sha256
from pathlib import Path

import jsonschema_rs

SCHEMA_PATH = Path(__file__).with_name("feedback.schema.json")


@lru_cache(maxsize=1)
def schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


@lru_cache(maxsize=1)
def _validator():
    return jsonschema_rs.Draft202012Validator(schema(), validate_formats=True)


def limits() -> dict:
    return schema()["x-limits"]


def max_unit_key() -> int:
    """The longest unit key (sticky header value) the platform takes: the gateway refuses a
    longer sticky header with a 400, and feedback's unit_key has the same bound."""
    return schema()["$defs"]["event"]["properties"]["unit_key"]["maxLength"]


def _where(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _message(error) -> str:
    """The first error in the house's words: `events[3].type: "like" is not one of …`."""
    where = _where(error.instance_path)
    path = list(error.schema_path)
    special = {"oneOf": "x-oneOf-message", "then": "x-then-message"}
    cut = next((i for i, part in enumerate(path) if part in special), len(path) - 1)
    node = schema()
    for part in path[:cut]:
        node = node[part]
    text = node.get(special.get(path[cut], "x-message"), error.message) if path else error.message
    if path and path[cut] == "then":
        where += f".{node['then']['required'][0]}"
    if path and path[-1] == "enum":
        text = f"{json.dumps(error.instance)[:40]} {text}"
    return f"{where}: {text}" if where else text


def event_time(raw: str, now: datetime) -> datetime | str:
    """The event's time in UTC, or why it is refused (unreadable, or outside the window around now)."""
    try:
        t = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return f"{raw[:40]!r} is not an RFC 3339 time"
    if t.tzinfo is None:
        return "give a time zone (Z or +hh:mm)"
    try:  # stored in UTC: PostgreSQL refuses offsets past ±15:59, which Python accepts
        t = t.astimezone(UTC)
    except OverflowError:
        return f"{raw[:40]} is out of range in UTC"
    window = limits()
    age = (now - t).total_seconds()
    if age > window["time_past_s"]:
        return f"{raw[:40]} is more than {window['time_past_s'] // 86400} days ago"
    if -age > window["time_future_s"]:
        return f"{raw[:40]} is in the future"
    return t


def check_feedback(doc, now: datetime | None = None) -> tuple[str, list] | str:
    """(endpoint, events) or the message of a 400: the schema, then each event's time
    within the window around now."""
    error = next(iter(_validator().iter_errors(doc)), None)
    if error is not None:
        return _message(error)
    now = now or datetime.now(UTC)
    for i, event in enumerate(doc["events"]):
        if "time" in event:
            t = event_time(event["time"], now)
            if isinstance(t, str):
                return f"events[{i}].time: {t}"
    return doc["endpoint"], doc["events"]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def sign_exposure(key: bytes, experiment: str, endpoint: str, arm: str, request_id: str, t: float) -> str:
    payload = _b64(json.dumps([experiment, endpoint, arm, request_id, int(t * 1000)], separators=(",", ":")).encode())
    return f"{payload}.{_b64(hmac.new(key, payload.encode(), sha256).digest())}"


def read_exposure_token(token: str, keys) -> list | None:
    """[experiment, endpoint, arm, request_id, unix_ms] when the token's mac verifies under
    the key `keys(experiment)` returns (bytes or None); else None."""
    payload, _, mac = token.partition(".")
    try:
        fields = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        experiment = fields[0]
        key = keys(experiment) if isinstance(experiment, str) else None
    except (ValueError, TypeError, IndexError):
        return None
    if not key or len(fields) != 5:
        return None
    expected = _b64(hmac.new(key, payload.encode(), sha256).digest())
    return fields if hmac.compare_digest(expected, mac) else None
