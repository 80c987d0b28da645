"""Exposure log and feedback relay of the gateway: batched, off the hot path, bounded.

`ExposureLog.record` is what the request path calls for every reply served in an
experiment: one deque append of a tuple (no I/O, no parsing). A background task flushes
up to `batch` records every `interval_s` (1 s: a flush has a fixed cost of a few hundred µs, so
batches must not be tiny at low rates) to a Redis Stream in one round trip
(XADD … MAXLEN ~ cap, so the stream itself is bounded too: one stream entry carries a whole batch as a JSON array of
[request_id, experiment, arm, unit_key, unix_time, score], since one XADD per exposure
costs ~50 µs of gateway CPU each); the control plane drains the
stream into its store (experiments.online.ingest). When the buffer is full, or the
stream cannot be reached long enough to fill it, records are dropped and counted in
gateway_exposures_dropped_total{reason} — never silently. The prediction score is read
from small JSON replies in the flusher, not on the request path.

Feedback (POST /v2/feedback) is checked for shape here (clear 4xx), authenticated with the
endpoint's keys, and relayed as one stream entry per batch; the control plane validates
it again, de-duplicates by event id and attributes it.

A large deployment replaces the Redis Stream with a Kafka topic (same record fields); the
gateway side is this one class.
"""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from collections import deque

from prometheus_client import Counter, Gauge

EXPOSURE_STREAM = "modelplane:exposures"
FEEDBACK_STREAM = "modelplane:feedback"

EXPOSURES = Counter("gateway_exposures", "Exposures handed to the exposure stream", ["endpoint"])
EXPOSURES_DROPPED = Counter("gateway_exposures_dropped", "Exposures dropped (buffer full, no stream, stream error)",
                            ["reason"])
EXPOSURE_BUFFER = Gauge("gateway_exposure_buffer", "Exposures waiting for the next flush")
FEEDBACK_EVENTS = Counter("gateway_feedback_events", "Feedback events relayed to the control plane", ["endpoint"])

MAX_SCORE_BODY = 2048  # replies up to this size keep their body for the flusher to read the score from


def first_score(body: bytes | None, encoding: str | None = None):
    """The first output value of a small JSON reply (inflated here, in the flusher)."""
    if body and encoding:
        if encoding not in ("gzip", "deflate"):
            return None
        try:
            body = zlib.decompressobj(47).decompress(body, 1 << 16)
        except zlib.error:
            return None
    if not body or body[:1] != b"{":
        return None
    try:
        value = json.loads(body)["outputs"][0]["data"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class ExposureLog:
    def __init__(self, redis_url: str | None, *, capacity: int = 100_000, batch: int = 5_000, interval_s: float = 1.0,
                 stream_maxlen: int = 2_000_000):
        self.redis_url = redis_url
        self.capacity = capacity
        self.batch = batch
        self.interval_s = interval_s
        self.stream_maxlen = stream_maxlen
        self.buffer: deque = deque()
        self.client = None
        EXPOSURE_BUFFER.set_function(lambda: len(self.buffer))

    @property
    def enabled(self) -> bool:
        return bool(self.redis_url)

    def record(self, request_id: str, experiment: str, endpoint: str, arm: str, unit_key: str | None, body: bytes | None,
               encoding: str | None = None) -> None:
        """Hot path: O(1), no I/O."""
        if not self.enabled:
            EXPOSURES_DROPPED.labels("no_stream").inc()
            return
        if len(self.buffer) >= self.capacity:
            EXPOSURES_DROPPED.labels("buffer_full").inc()
            return
        self.buffer.append((request_id, experiment, endpoint, arm, unit_key or "", time.time(),
                            body if body is not None and len(body) <= MAX_SCORE_BODY else None, encoding))

    async def _connect(self):
        if self.client is None:
            import redis.asyncio as redis  # only a gateway with an exposure stream needs it

            self.client = redis.from_url(self.redis_url)
        return self.client

    async def flush(self) -> int:
        """Send up to `batch` records in one pipeline; on failure they go back to the front
        (what no longer fits is dropped and counted)."""
        if not self.buffer:
            return 0
        take = [self.buffer.popleft() for _ in range(min(self.batch, len(self.buffer)))]
        try:
            packed = json.dumps([[rid, experiment, arm, unit, round(t, 6), first_score(body, encoding)]
                                 for rid, experiment, endpoint, arm, unit, t, body, encoding in take],
                                separators=(",", ":"))
            client = await self._connect()
            await client.xadd(EXPOSURE_STREAM, {"n": len(take), "b": packed}, maxlen=self.stream_maxlen, approximate=True)
        except Exception:  # noqa: BLE001 - any stream failure: keep what fits, count the rest
            room = self.capacity - len(self.buffer)
            keep = take[:max(0, room)]
            self.buffer.extendleft(reversed(keep))
            if len(take) > len(keep):
                EXPOSURES_DROPPED.labels("stream_error").inc(len(take) - len(keep))
            self.client = None
            return 0
        counts: dict[str, int] = {}
        for rec in take:
            counts[rec[2]] = counts.get(rec[2], 0) + 1
        for endpoint, n in counts.items():
            EXPOSURES.labels(endpoint).inc(n)
        return len(take)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            while await self.flush() == self.batch:
                pass

    async def relay_feedback(self, endpoint: str, events: list, key_id: str | None) -> None:
        client = await self._connect()
        await client.xadd(FEEDBACK_STREAM, {"e": endpoint, "k": key_id or "", "b": json.dumps(events)},
                          maxlen=self.stream_maxlen, approximate=True)
        FEEDBACK_EVENTS.labels(endpoint).inc(len(events))

    async def close(self) -> None:
        while self.buffer and await self.flush():
            pass
        if self.client is not None:
            await self.client.aclose()


FEEDBACK_TYPES = ("click", "conversion", "value")
MAX_FEEDBACK_EVENTS = 10_000


def check_feedback(doc) -> tuple[str, list] | str:
    """(endpoint, events) or the message of a 400. The control plane checks times and
    idempotency; this rejects what is malformed before it is queued."""
    if not isinstance(doc, dict):
        return "give a JSON object {endpoint, events}"
    endpoint, events = doc.get("endpoint"), doc.get("events")
    if not isinstance(endpoint, str) or not endpoint:
        return "endpoint: give the endpoint's name"
    if not isinstance(events, list) or not events or len(events) > MAX_FEEDBACK_EVENTS:
        return f"events: give a list of 1..{MAX_FEEDBACK_EVENTS} feedback events"
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            return f"events[{i}]: give an object"
        if not isinstance(e.get("event_id"), str) or not 0 < len(e["event_id"]) <= 128:
            return f"events[{i}].event_id: give 1-128 characters (the idempotency key)"
        if e.get("type") not in FEEDBACK_TYPES:
            return f"events[{i}].type: {str(e.get('type'))[:40]!r} is not one of {', '.join(FEEDBACK_TYPES)}"
        if ("request_id" in e) == ("unit_key" in e):
            return f"events[{i}]: give exactly one of request_id or unit_key"
        value = e.get("value", 1.0)
        if e["type"] == "value" and "value" not in e or isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"events[{i}].value: give a number"
    return endpoint, events
