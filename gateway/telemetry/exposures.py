"""Exposure log and feedback relay of the gateway: batched, off the hot path, bounded.

`ExposureLog.record` is what the request path calls for every reply served in an
experiment: one deque append of a tuple (no I/O, no parsing). A background task flushes
up to `batch` records every `interval_s` (1 s: a flush has a fixed cost of a few hundred µs, so
batches must not be tiny at low rates) to a Redis Stream in one round trip
(XADD … MAXLEN ~ cap, so the stream itself is bounded too: one stream entry carries a whole batch as a JSON array of
[request_id, experiment, arm, unit_key, unix_time, score], since one XADD per exposure
costs ~50 µs of gateway CPU each); the control plane drains the
stream into its store (experiments.services.ingest). When the buffer is full, or the
stream cannot be reached long enough to fill it, records are dropped and counted in
gateway_exposures_dropped_total{reason} — never silently. The prediction score is read
from small JSON replies in the flusher, not on the request path.

Feedback (POST /v2/feedback, feedback.py) is checked by the rules both doors share
(feedback_rules.py), authenticated with a key of the endpoint's team or its exposure tokens,
and admitted and queued by feedback_stream.py onto its source's own stream; each flush here
adds to every experiment's budget for feedback without a key what its exposures' tokens may
carry (feedback_stream.credit_key). The control plane validates feedback again,
de-duplicates by event id per team and attributes it.

Captured requests (an endpoint's `capture_share` of its replies, for training data) ride in
the same records: [..., score, propensity, inputs, endpoint] with the request's JSON inputs (at most
MAX_CAPTURE_BYTES) and its variant's split weight as the propensity; a capture outside an
experiment has an empty experiment.

Where the records go (one interface, `flush`): NATS JetStream when `GATEWAY_EVENT_LOG_URL`
names one (eventlog.py; subjects per team and endpoint, log_contract.py), else the Redis
Stream, the zero-setup default. Either way a flush that is not stored keeps its records.
"""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from collections import deque

from prometheus_client import Counter, Gauge

from gateway.contracts.feedback_rules import max_unit_key
from gateway.contracts.log_contract import EXPOSURES as EXPOSURE_SUBJECT
from gateway.contracts.log_contract import subject
from gateway.telemetry.feedback_stream import CREDIT_TTL_MS, credit_key, credit_per_exposure

EXPOSURE_STREAM = "modelplane:exposures"

EXPOSURES = Counter("gateway_exposures", "Exposures handed to the exposure stream", ["endpoint"])
EXPOSURES_DROPPED = Counter(
    "gateway_exposures_dropped", "Exposures dropped (buffer full, no stream, stream error)", ["reason"]
)
EXPOSURE_BUFFER = Gauge("gateway_exposure_buffer", "Exposures waiting for the next flush")

MAX_SCORE_BODY = 2048  # replies up to this size keep their body for the flusher to read the score from
MAX_UNIT_KEY = max_unit_key()  # the sticky header's bound (the request path refuses longer ones with a 400)
# Memory bound of the exposure stream (the control plane trims what it acknowledged, so this
# bounds only a backlog the ingest has not read): <= ~1 100 entries (MAXLEN ~ 1 000 plus
# Redis's trimming slack of one 100-entry node) x 256 KiB = ~275 MiB; typical entries are far
# smaller (~100 KB per second of exposures at 1k req/s). Feedback: feedback_stream.py.
MAX_ENTRY_BYTES = 256 * 1024
EXPOSURE_STREAM_MAXLEN = 1_000
CAPTURE_PER_S = 1000.0  # captured requests per endpoint per second per gateway process, whatever the share
MAX_CAPTURE_BYTES = 64 * 1024  # a captured request's inputs; a larger body is not captured (counted)
CAPTURES = Counter("gateway_captures", "Requests captured for training data, by endpoint", ["endpoint"])
CAPTURES_SKIPPED = Counter(
    "gateway_captures_skipped", "Requests drawn for capture but not captured (too big, binary, rate)", ["reason"]
)


def _chunks(records: list[str], limit: int):
    chunk, size = [], 0
    for record in records:
        if chunk and size + len(record) + 1 > limit:
            yield chunk
            chunk, size = [], 0
        chunk.append(record)
        size += len(record) + 1
    if chunk:
        yield chunk


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
    def __init__(
        self,
        redis_url: str | None,
        *,
        capacity: int = 100_000,
        batch: int = 5_000,
        interval_s: float = 1.0,
        stream_maxlen: int = EXPOSURE_STREAM_MAXLEN,
        log=None,
    ):
        self.redis_url = redis_url
        self.log = log  # eventlog.NatsLog, or None: the Redis Stream
        self.teams: dict[str, str] = {}  # endpoint -> team label (the log's subjects), set per route table
        self.capture_budget: dict[str, tuple[float, float]] = {}  # endpoint -> (captures left, when)
        self.capacity = capacity
        self.batch = batch
        self.interval_s = interval_s
        self.stream_maxlen = stream_maxlen
        self.buffer: deque = deque()
        self.client = None
        EXPOSURE_BUFFER.set_function(lambda: len(self.buffer))

    def capture_of(self, ep, variant, plain: bytes, headers) -> tuple[float, bytes] | None:
        """(propensity, inputs) of a request drawn for capture, or None (counted): too big, binary
        tensors, or past the endpoint's captures per second (CAPTURE_PER_S, so no share floods the log)."""
        if "inference-header-content-length" in headers:
            CAPTURES_SKIPPED.labels("binary").inc()
            return None
        if len(plain) > MAX_CAPTURE_BYTES:
            CAPTURES_SKIPPED.labels("too_big").inc()
            return None
        now = time.monotonic()
        level, stamp = self.capture_budget.get(ep.name, (CAPTURE_PER_S, now))
        level = min(CAPTURE_PER_S, level + (now - stamp) * CAPTURE_PER_S)
        if level < 1.0:
            CAPTURES_SKIPPED.labels("rate").inc()
            self.capture_budget[ep.name] = (level, now)
            return None
        self.capture_budget[ep.name] = (level - 1.0, now)
        total = sum(v.weight_bp for v in ep.live) or 1
        CAPTURES.labels(ep.name).inc()
        return variant.weight_bp / total, bytes(plain)

    @property
    def enabled(self) -> bool:
        return bool(self.redis_url) or self.log is not None

    def record(
        self,
        request_id: str,
        experiment: str,
        endpoint: str,
        arm: str,
        unit_key: str | None,
        body: bytes | None,
        encoding: str | None = None,
        capture: tuple[float, bytes] | None = None,
    ) -> None:
        """Hot path: O(1), no I/O. `capture`: (propensity, the request's JSON inputs) to log with it."""
        if not self.enabled:
            EXPOSURES_DROPPED.labels("no_stream").inc()
            return
        if len(self.buffer) >= self.capacity:
            EXPOSURES_DROPPED.labels("buffer_full").inc()
            return
        self.buffer.append(
            (
                request_id,
                experiment,
                endpoint,
                arm,
                (unit_key or "")[:MAX_UNIT_KEY],
                time.time(),
                body if body is not None and len(body) <= MAX_SCORE_BODY else None,
                encoding,
                capture,
            )
        )

    async def connect(self):
        """The Redis client of the streams (made on first use; feedback_stream.py shares it)."""
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
            records = [_record_json(record) for record in take]
            if self.log is not None:
                await self._publish(take, records)
            if self.redis_url:
                await self._to_redis(take, records)
        except Exception:  # noqa: BLE001 - any stream failure: keep what fits, count the rest
            room = self.capacity - len(self.buffer)
            keep = take[: max(0, room)]
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

    async def _publish(self, take: list, records: list[str]) -> None:
        """One message per endpoint and 256 KiB on its team's subject (log_contract.py)."""
        by_endpoint: dict[str, list[str]] = {}
        for record, text in zip(take, records):
            by_endpoint.setdefault(record[2], []).append(text)
        messages = []
        for endpoint, texts in by_endpoint.items():
            name = subject(self.log.prefix, EXPOSURE_SUBJECT, self.teams.get(endpoint, ""), endpoint)
            for chunk in _chunks(texts, MAX_ENTRY_BYTES):
                body = "[" + ",".join(chunk) + "]"
                messages.append((name, body.encode(), f"x-{zlib.crc32(body.encode()):08x}-{chunk[0][2:34]}"))
        await self.log.publish(messages)

    async def _to_redis(self, take: list, records: list[str]) -> None:
        """The Redis Stream's entries (unless the log took them) and every experiment's budget
        for feedback without a key (feedback_stream.py): what these exposures' tokens may carry."""
        client = await self.connect()
        pipe = client.pipeline(transaction=False)
        if self.log is None:
            for chunk in _chunks(records, MAX_ENTRY_BYTES):  # entries of at most 256 KiB: the stream's bound holds
                pipe.xadd(
                    EXPOSURE_STREAM,
                    {"n": len(chunk), "b": "[" + ",".join(chunk) + "]"},
                    maxlen=self.stream_maxlen,
                    approximate=True,
                )
        per_experiment: dict[str, int] = {}
        for record in take:
            if record[1]:
                per_experiment[record[1]] = per_experiment.get(record[1], 0) + 1
        credit = credit_per_exposure()
        for experiment, n in per_experiment.items():
            pipe.hincrbyfloat(credit_key(experiment), "l", n * credit)
            pipe.pexpire(credit_key(experiment), CREDIT_TTL_MS)
        await pipe.execute()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            while await self.flush() == self.batch:
                pass

    async def close(self) -> None:
        while self.buffer and await self.flush():
            pass
        if self.client is not None:
            await self.client.aclose()
        if self.log is not None:
            await self.log.close()


def _record_json(record: tuple) -> str:
    rid, experiment, endpoint, arm, unit, t, body, encoding, capture = record
    fields = [rid, experiment, arm, unit, round(t, 6), first_score(body, encoding)]
    if capture is not None:
        fields += [capture[0], capture[1].decode("utf-8", "replace"), endpoint]
    return json.dumps(fields, separators=(",", ":"))
