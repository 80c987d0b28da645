"""The feedback door's shared state and its relay onto the feedback streams, in one Redis round trip.

What POST /v2/feedback admits is decided across every worker and replica of the gateway, so
it is kept in Redis (the exposure stream's), by one Lua script run atomically per batch
(`ADMIT`): nothing is counted unless the whole batch is queued, and nothing is queued
unless every bound holds.

- The source's own stream (feedback_rules.feedback_stream: one per endpoint and key, or the
  endpoint's exposure tokens) holds at most FEEDBACK_BACKLOG entries: past that the batch
  is a 503 for that source alone, while every other source's stream flows on.
- Each exposure token's allowance (feedback_rules.per_exposure: at most one click, a few
  conversions and a bounded value, over the token's life) is counted in a small hash per
  exposure that expires with the token: a replay past it is a 409 naming the event.
- An experiment's feedback without a key draws on a budget its exposures fill: each
  exposure the gateway flushes adds what its token may carry (`credit`), and a floor
  (`floor_per_s`, `floor_burst`) refills by time for quiet experiments and for a click
  that comes before its exposure's flush. Past it: 429 with Retry-After. Honest traffic
  cannot send more than its exposures allow; a flood citing tokens runs dry at once.
- A batch is queued as entries of at most ENTRY_EVENTS events, so the ingest's work per
  entry is bounded whatever the batch's size, and the set FEEDBACK_STREAMS lists the stream.

Memory: a stream holds at most ~FEEDBACK_BACKLOG entries of ENTRY_EVENTS events of at most
~1 KiB each (the schema's bounds), ~50 MiB per source at worst while the ingest is down;
typical events are ~250 B. A used token's hash is ~100 B and lives as long as the token.
"""

from __future__ import annotations

import json
import time
import zlib

from prometheus_client import Counter

from gateway.contracts.feedback_rules import FEEDBACK_STREAMS, KINDS, TokenUse, feedback_stream, per_exposure
from gateway.contracts.log_contract import FEEDBACK as FEEDBACK_SUBJECT
from gateway.contracts.log_contract import backlog_key, subject

FEEDBACK_BACKLOG = 100  # entries waiting in one source's stream before that source gets a 503
FEEDBACK_STREAM_MAXLEN = 120  # a safety net above the backlog bound (never reached by the door)
ENTRY_EVENTS = 500
CREDIT_TTL_MS = 3_600_000  # an experiment's budget is forgotten after an hour without exposures
SPENT_PREFIX = "modelplane:feedback:spent:"  # + experiment/request id: what the exposure carried
CREDIT_PREFIX = "modelplane:feedback:credit:"  # + experiment: its budget for feedback without a key

FEEDBACK_EVENTS = Counter("gateway_feedback_events", "Feedback events relayed to the control plane", ["endpoint"])
FEEDBACK_BODIES_REFUSED = Counter(
    "gateway_feedback_bodies_refused",
    "Feedback bodies refused before they were parsed, by the refusal's code",
    ["code"],
)
FEEDBACK_REFUSED = Counter(
    "gateway_feedback_refused",
    "Feedback events refused at the door, by endpoint and the refusal's code",
    ["endpoint", "code"],
)

# KEYS: stream, streams set, credit key ("" for a keyed batch), then one spent key per exposure.
# ARGV: backlog, maxlen, now ms, floor per s, floor burst, events asked of the credit, exposures,
# the four caps (click, conversion, value, |value|), per exposure its four asks and its expiry
# (unix ms), then the endpoint, the key id, the entries' count and per entry (events, body).
ADMIT = """
local stream, streams, credit = KEYS[1], KEYS[2], KEYS[3]
local backlog, maxlen, now = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
if redis.call('XLEN', stream) >= backlog then return {'backlog', 0} end
local floor, burst, need = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local level = 0
if credit ~= '' then
  local state = redis.call('HMGET', credit, 'l', 't')
  level = tonumber(state[1]) or burst
  local stamp = tonumber(state[2]) or now
  if level < burst then level = math.min(burst, level + math.max(0, now - stamp) / 1000 * floor) end
  if need > level then return {'rate', math.ceil((need - level) / floor * 1000)} end
end
local exposures = tonumber(ARGV[7])
local caps = {tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])}
local fields = {'click', 'conversion', 'value', 'value_abs'}
for x = 1, exposures do
  local had = redis.call('HMGET', KEYS[3 + x], 'click', 'conversion', 'value', 'value_abs')
  for f = 1, 4 do
    local ask = tonumber(ARGV[11 + (x - 1) * 5 + f])
    if ask > 0 and (tonumber(had[f]) or 0) + ask > caps[f] then return {'spent', x} end
  end
end
for x = 1, exposures do
  local base = 11 + (x - 1) * 5
  for f = 1, 4 do
    if tonumber(ARGV[base + f]) > 0 then redis.call('HINCRBYFLOAT', KEYS[3 + x], fields[f], ARGV[base + f]) end
  end
  redis.call('PEXPIREAT', KEYS[3 + x], ARGV[base + 5])
end
if credit ~= '' then
  redis.call('HSET', credit, 'l', level - need, 't', now)
  redis.call('PEXPIRE', credit, CREDIT_TTL_MS)
end
local at = 12 + exposures * 5
local endpoint, key_id, entries = ARGV[at], ARGV[at + 1], tonumber(ARGV[at + 2])
for e = 1, entries do
  redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', 'e', endpoint, 'k', key_id,
             'n', ARGV[at + 1 + 2 * e], 'b', ARGV[at + 2 + 2 * e])
end
redis.call('SADD', streams, stream)
return {'ok', 0}
""".replace("CREDIT_TTL_MS", str(CREDIT_TTL_MS))

# The same admission when the durable log (NATS JetStream, eventlog.py) carries the entries:
# KEYS[1] is the source's backlog counter (what its subject holds unread, kept by the reader,
# log_contract.backlog_key) instead of its stream; admitted entries are counted on it and the
# gateway publishes them after the script (REFUND gives back what a failed publish took).
ADMIT_LOG = ADMIT.replace(
    "if redis.call('XLEN', stream) >= backlog then",
    "if (tonumber(redis.call('GET', stream)) or 0) >= backlog then",
)
_XADD_LOOP = ADMIT[ADMIT.index("for e = 1, entries do") : ADMIT.index("return {'ok', 0}")]
ADMIT_LOG = ADMIT_LOG.replace(_XADD_LOOP, "redis.call('INCRBY', stream, entries)\n")

# KEYS: backlog counter, credit key ("" for a keyed batch), spent keys; ARGV: entries, events
# asked of the credit, then per exposure its four asks.
REFUND = """
redis.call('DECRBY', KEYS[1], ARGV[1])
if KEYS[2] ~= '' then redis.call('HINCRBYFLOAT', KEYS[2], 'l', ARGV[2]) end
local fields = {'click', 'conversion', 'value', 'value_abs'}
for x = 3, #KEYS do
  for f = 1, 4 do
    local ask = tonumber(ARGV[2 + (x - 3) * 4 + f])
    if ask > 0 then redis.call('HINCRBYFLOAT', KEYS[x], fields[f], -ask) end
  end
end
return 1
"""


def spent_key(exposure: str) -> str:
    return SPENT_PREFIX + exposure


def credit_key(experiment: str) -> str:
    return CREDIT_PREFIX + experiment


def credit_per_exposure() -> int:
    """Events one exposure's token may carry: what it adds to its experiment's budget."""
    allowed = per_exposure()
    return sum(allowed[kind] for kind in KINDS)


class Refused(Exception):
    """The door's shared state refused the batch: `kind` is backlog, rate or spent."""

    def __init__(self, kind: str, wait_s: float = 0.0, exposure: str = ""):
        super().__init__(kind)
        self.kind, self.wait_s, self.exposure = kind, wait_s, exposure


class FeedbackRelay:
    """Admits and queues feedback batches (one EVALSHA each) over the exposure log's client."""

    def __init__(self, exposures, *, floor_per_s: float, floor_burst: float):
        self.exposures = exposures
        self.floor_per_s, self.floor_burst = floor_per_s, floor_burst
        self.script = self.refund = None

    async def relay(
        self, endpoint: str, events: list, key_id: str | None, *, uses: dict, expiries: dict, experiment: str
    ) -> None:
        """Queue the batch, or raise Refused. `uses`: exposure -> TokenUse the batch asks;
        `expiries`: exposure -> its token's expiry (unix ms); `experiment`: whose budget a
        batch without a key draws on."""
        client = await self.exposures.connect()
        log = self.exposures.log
        if self.script is None or self.script.registered_client is not client:  # a new client after a stream error
            self.script = client.register_script(ADMIT if log is None else ADMIT_LOG)
            self.refund = client.register_script(REFUND)
        if log is None:
            stream = feedback_stream(endpoint, key_id)
        else:
            team = self.exposures.teams.get(endpoint, "")
            log_subject = subject(log.prefix, FEEDBACK_SUBJECT, team, endpoint, key_id)
            stream = backlog_key(log_subject)
        exposures = list(uses)
        keys = [stream, FEEDBACK_STREAMS, credit_key(experiment) if key_id is None else ""]
        keys += [spent_key(x) for x in exposures]
        allowed = per_exposure()
        args: list = [FEEDBACK_BACKLOG, FEEDBACK_STREAM_MAXLEN, _now_ms(), self.floor_per_s, self.floor_burst]
        args += [len(events) if key_id is None else 0, len(exposures)]
        args += [allowed["click"], allowed["conversion"], allowed["value"], allowed["value_abs"]]
        for x in exposures:
            use: TokenUse = uses[x]
            args += [use.click, use.conversion, use.value, repr(use.value_abs), expiries[x]]
        chunks = [events[i : i + ENTRY_EVENTS] for i in range(0, len(events), ENTRY_EVENTS)]
        args += [endpoint, key_id or "", len(chunks)]
        for chunk in chunks:
            args += [len(chunk), json.dumps(chunk, separators=(",", ":"))]
        verdict, detail = await self.script(keys=keys, args=args)
        verdict = verdict.decode() if isinstance(verdict, bytes) else verdict
        if verdict == "ok":
            if log is not None:
                await self._publish(log, log_subject, endpoint, key_id, chunks, keys, args, uses, exposures)
            FEEDBACK_EVENTS.labels(endpoint).inc(len(events))
            return
        if verdict == "spent":
            raise Refused("spent", exposure=exposures[int(detail) - 1])
        raise Refused(verdict, wait_s=int(detail) / 1000.0)

    async def _publish(self, log, log_subject, endpoint, key_id, chunks, keys, args, uses, exposures) -> None:
        """The admitted entries onto the log; when that fails, what the script took is given
        back (backlog, budget, allowances) and the error raised: the client's retry is no replay."""
        messages = []
        for chunk in chunks:
            body = json.dumps({"e": endpoint, "k": key_id or "", "b": chunk}, separators=(",", ":")).encode()
            messages.append((log_subject, body, f"f-{zlib.crc32(body):08x}-{len(body)}-{_now_ms()}"))
        try:
            await log.publish(messages)
        except Exception:
            refund_args: list = [len(chunks), args[5]]
            for x in exposures:
                use: TokenUse = uses[x]
                refund_args += [use.click, use.conversion, use.value, repr(use.value_abs)]
            await self.refund(keys=[keys[0], keys[2], *keys[3:]], args=refund_args)
            raise


def _now_ms() -> int:
    return int(time.time() * 1000)
