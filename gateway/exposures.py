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

from .feedback_rules import max_unit_key
from .feedback_stream import CREDIT_TTL_MS, credit_key, credit_per_exposure

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
    ):
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

    def record(
        self,
        request_id: str,
        experiment: str,
        endpoint: str,
        arm: str,
        unit_key: str | None,
        body: bytes | None,
        encoding: str | None = None,
    ) -> None:
        """Hot path: O(1), no I/O."""
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
            records = [
                json.dumps(
                    [rid, experiment, arm, unit, round(t, 6), first_score(body, encoding)], separators=(",", ":")
                )
                for rid, experiment, endpoint, arm, unit, t, body, encoding in take
            ]
            client = await self.connect()
            pipe = client.pipeline(transaction=False)
            for chunk in _chunks(records, MAX_ENTRY_BYTES):  # entries of at most 256 KiB: the stream's bound holds
                pipe.xadd(
                    EXPOSURE_STREAM,
                    {"n": len(chunk), "b": "[" + ",".join(chunk) + "]"},
                    maxlen=self.stream_maxlen,
                    approximate=True,
                )
            per_experiment: dict[str, int] = {}
            for record in take:
                per_experiment[record[1]] = per_experiment.get(record[1], 0) + 1
            credit = credit_per_exposure()
            for experiment, n in per_experiment.items():  # what these exposures' tokens may carry
                pipe.hincrbyfloat(credit_key(experiment), "l", n * credit)
                pipe.pexpire(credit_key(experiment), CREDIT_TTL_MS)
            await pipe.execute()
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
