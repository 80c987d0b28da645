"""What feedback may hold, at the gateway's door, and the signed exposure token.

The rules are one file both doors read, `feedback.schema.json` (JSON Schema 2020-12 with
an `x-message` per keyword and `x-limits` for the time window); the control plane reads
the same file (experiments/feedback.py), so POST /v2/feedback and POST /api/v1/feedback/
refuse the same bodies with the same words. Validation is jsonschema-rs (a compiled
validator: ~0.3 µs per event, where the pure-Python jsonschema takes ~200 µs).

Exposure token: for an experiment that accepts them, every reply it serves carries
`X-Exposure-Token: <payload>.<mac>`, the payload the base64url of the JSON array
[experiment, endpoint, arm, request id, issued unix ms, expiry unix ms, unit tag] and the
mac HMAC-SHA256 of the payload's text under the experiment's own key (from the route table,
never sent to clients). Feedback citing a token needs no inference key: only the gateway
could have made it. What a token may carry is bounded here too (`check_tokens`, the same
at both doors): one exposure is at most one click, a few conversions and a bounded value
(`x-limits.per_exposure`), until the experiment's attribution window after it; a batch
without a key is one unit's feedback. The doors count what each exposure has carried so
far (the gateway in Redis, the control plane in its store) and refuse replays past it.

Feedback streams (the gateway writes, experiments/services/ingest.py drains): one per
endpoint and source (a key, or the endpoint's exposure tokens), listed in one set, so one
source's volume waits in its own stream and the ingest takes from every stream in turn.
"""

from __future__ import annotations

import base64
import enum
import hmac
import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from hashlib import sha256
from pathlib import Path

import jsonschema_rs

SCHEMA_PATH = Path(__file__).with_name("feedback.schema.json")
TOKEN = "exposure_token"
FEEDBACK_STREAMS = "modelplane:feedback:streams"  # the set of every per-source feedback stream
DEFAULT_TOKEN_TTL_S = 3600  # a route entry without exposure_token_ttl_s (the default attribution window)
TOKEN_SOURCE = "~tokens"  # the source of a batch without a key (key ids never hold a "~")


def feedback_stream(endpoint: str, key_id: str | None) -> str:
    """The stream of one endpoint's feedback from one source (names and key ids hold no ':')."""
    return f"modelplane:feedback:{endpoint}:{key_id or TOKEN_SOURCE}"


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


# --- the exposure token and what it may carry ---------------------------------------------


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


@dataclass(frozen=True)
class ExposureToken:
    """What the gateway signed: one exposure of one unit (its tag) to `arm`, citable until `expires_ms`."""

    experiment: str
    endpoint: str
    arm: str
    request_id: str
    issued_ms: int
    expires_ms: int
    unit: str

    @property
    def exposure(self) -> str:
        """The exposure it stands for: the identity its allowance is counted under at both doors."""
        return f"{self.experiment}/{self.request_id}"


def unit_tag(unit: str | None) -> str:
    """72 bits of the unit key's SHA-256: which unit a token was signed for, without carrying the key."""
    return _b64(sha256((unit or "").encode()).digest()[:9])


def sign_exposure(
    key: bytes, experiment: str, endpoint: str, arm: str, request_id: str, t: float, ttl_s: float, unit: str | None
) -> str:
    """`X-Exposure-Token`: the base64url of the JSON array [experiment, endpoint, arm, request
    id, issued unix ms, expiry unix ms (issued + the experiment's attribution window), unit
    tag], a dot, and the HMAC-SHA256 of that text under the experiment's own key."""
    issued = int(t * 1000)
    fields = [experiment, endpoint, arm, request_id, issued, issued + int(ttl_s * 1000), unit_tag(unit)]
    payload = _b64(json.dumps(fields, separators=(",", ":")).encode())
    return f"{payload}.{_b64(hmac.new(key, payload.encode(), sha256).digest())}"


def endpoint_token(ep, arm: str, request_id: str, unit: str | None) -> str:
    """The token of one reply served on `ep` (a tensor or LLM endpoint of the route table)."""
    return sign_exposure(
        ep.exposure_token_key, ep.experiment, ep.name, arm, request_id, time.time(), ep.exposure_token_ttl_s, unit
    )


def read_exposure_token(token: str, keys) -> ExposureToken | None:
    """The token when its mac verifies under the key `keys(experiment)` returns (bytes, or
    None for an experiment whose tokens are not accepted); else None."""
    payload, _, mac = token.partition(".")
    try:
        fields = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        experiment = fields[0]
        key = keys(experiment) if isinstance(experiment, str) else None
    except (ValueError, TypeError, IndexError, KeyError):
        return None
    if not key or len(fields) != 7:
        return None
    expected = _b64(hmac.new(key, payload.encode(), sha256).digest())
    if not hmac.compare_digest(expected, mac):
        return None
    return ExposureToken(*fields)


def per_exposure() -> dict:
    """What one exposure token may carry onto its arm over its whole life (x-limits.per_exposure)."""
    return limits()["per_exposure"]


KINDS = ("click", "conversion", "value")


@dataclass
class TokenUse:
    """What feedback asks of one exposure: events per kind and the absolute values' sum."""

    click: int = 0
    conversion: int = 0
    value: int = 0
    value_abs: float = 0.0

    def add(self, kind: str, value: float | None) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        if kind == "value":
            self.value_abs += abs(float(value or 0.0))

    def plus(self, other: TokenUse) -> TokenUse:
        return TokenUse(*(getattr(self, f) + getattr(other, f) for f in ("click", "conversion", "value", "value_abs")))

    def beyond(self) -> str | None:
        """Why this is more than one exposure allows, or None."""
        allowed = per_exposure()
        for kind in KINDS:
            if getattr(self, kind) > allowed[kind]:
                return f"{getattr(self, kind)} {kind} events (one exposure carries at most {allowed[kind]})"
        if self.value_abs > allowed["value_abs"]:
            return f"values summing to {self.value_abs:g} in absolute value (at most {allowed['value_abs']:g})"
        return None


class TokenRefusal(enum.Enum):
    """Why a door refuses a batch for its exposure tokens: (HTTP status, code)."""

    MISSING_KEY = (401, "missing_key")  # no key, and an event cites no token
    INVALID = (401, "invalid_exposure_token")  # not signed for this endpoint's running experiment
    EXPIRED = (401, "exposure_token_expired")  # past the experiment's attribution window
    MANY_UNITS = (400, "one_unit_per_batch")  # no key, and the tokens are of several units
    OVER_ALLOWANCE = (409, "exposure_allowance_exceeded")  # more than one exposure allows (replays)

    @property
    def status(self) -> int:
        return self.value[0]

    @property
    def code(self) -> str:
        return self.value[1]


@dataclass(frozen=True)
class TokenVerdict:
    refusal: TokenRefusal | None = None
    detail: str = ""
    tokens: tuple = ()  # per event: the ExposureToken it cites, or None
    uses: dict = field(default_factory=dict)  # exposure -> TokenUse the batch asks of it


def check_tokens(events: list, keys, *, endpoint: str, keyed: bool, now_ms: int) -> TokenVerdict:
    """The exposure-token rules of one batch, the same at both doors (pure): every cited
    token verifies under `keys` (the endpoint's running experiment's) and names this
    endpoint, and has not expired; a batch without a key cites a token in every event, all
    of one unit (one user's feedback: a relay of many users' feedback holds the team's key);
    no exposure is asked for more than `per_exposure` allows. The first failure decides."""
    tokens, uses, unit, read = [], {}, None, {}
    for i, event in enumerate(events):
        raw = event.get(TOKEN)
        if raw is None:
            if not keyed:
                return TokenVerdict(
                    TokenRefusal.MISSING_KEY, f"events[{i}]: without a key, every event cites an {TOKEN}"
                )
            tokens.append(None)
            continue
        if raw not in read:  # one mac check per distinct token (a batch may cite one exposure many times)
            read[raw] = read_exposure_token(raw, keys)
        token = read[raw]
        if token is None or token.endpoint != endpoint:
            return TokenVerdict(
                TokenRefusal.INVALID,
                f"events[{i}].{TOKEN}: not a token of {endpoint!r}'s running experiment (or it takes no tokens: "
                "send a key of the endpoint's team)",
            )
        if now_ms > token.expires_ms:
            return TokenVerdict(
                TokenRefusal.EXPIRED,
                f"events[{i}].{TOKEN}: expired {(now_ms - token.expires_ms) / 1000:.0f}s ago (a token lives as long as "
                "its experiment's attribution window)",
            )
        if not keyed and unit not in (None, token.unit):
            return TokenVerdict(
                TokenRefusal.MANY_UNITS,
                f"events[{i}].{TOKEN}: another unit's token; without a key a batch carries one unit's feedback "
                "(send many users' feedback with a key of the endpoint's team)",
            )
        unit = token.unit
        use = uses.setdefault(token.exposure, TokenUse())
        use.add(event["type"], event.get("value"))
        why = use.beyond()
        if why is not None:
            return TokenVerdict(TokenRefusal.OVER_ALLOWANCE, f"events[{i}].{TOKEN}: this batch asks {why}")
        tokens.append(token)
    return TokenVerdict(None, "", tuple(tokens), uses)
