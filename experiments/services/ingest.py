"""Drain the gateway's exposure and feedback streams (Redis Streams) into the store.

A consumer group ("control") per stream: entries are acknowledged only after their rows
are committed, and unacknowledged ones (a worker died mid-batch) are re-read first on the
next run, so nothing is lost; replays are harmless (exposures are unique per experiment and
request id, feedback per team and event id). One run at a time (a Redis lock: a task
delivered twice, or a beat tick while a run is still going, finds it taken and returns).

Bounded per run, in records and events, never in stream entries (an entry may hold
thousands): exposures first, up to EXPOSURE_INGEST_RECORDS_PER_RUN, then feedback, fairly
across its per-source streams (experiments/services/feedback_streams.py), held back until
the exposures it may name are stored, so a click that follows its impression is attributed.

Nothing in a stream can stop it: a read's entries are written in one transaction, and when
that fails each entry is written alone; an entry that cannot be read or written goes to
the dead-letter store (experiments.models.DeadLetter: stream, entry id, reason, the
payload's first 4 KiB), is counted and alerted, and is acknowledged like the others.

Memory: acknowledged entries are trimmed (XTRIM MINID past the last acknowledged one)
after every read, so a stream holds only what the control plane has not ingested yet; the
gateway caps that backlog (gateway/telemetry/exposures.py and gateway/telemetry/feedback_stream.py state the
bound per stream).
"""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime

import redis
from django.conf import settings

from experiments.models import Arm
from experiments.services.streams import (
    GROUP,
    Poison,
    dead_letter,
    ensure_group,
    entry_ms,
    read_entries,
    stream_client,
    text,
    trim_acknowledged,
    write_each,
)
from experiments.store import default_store

EXPOSURE_STREAM = (
    "modelplane:exposures"  # gateway/telemetry/exposures.py writes them (the gateway imports nothing from here)
)
FEEDBACK_STREAM = "modelplane:feedback"  # every source in one stream: what gateways before per-source streams wrote
LOCK = "modelplane:ingest:lock"
LOCK_S = 40  # past the task's hard time limit: a run killed mid-way frees it in time for the next
# Feedback waits this long in its stream before it is attributed, so that the exposures it
# names (flushed by the gateway every second) are stored first; a click arriving within
# the same second as its impression would otherwise be counted `unknown`.
FEEDBACK_DELAY_S = 2.0
FLUSH_SLACK_S = 1.5  # the gateway flushes exposures every second: an entry's id is at most ~1 s after them
MAX_UNIT = 200
MAX_REQUEST_ID = 128


def _exposure_rows(records, arm_ids: dict, now: float, captures: list | None = None) -> list[dict]:
    """The exposure rows of one entry's records; a captured request's inputs go to `captures`
    (experiments/services/captures.py reads them), a record with no experiment is a capture only."""
    if not isinstance(records, list):
        raise Poison("the entry is not a list of exposure records")
    rows = []
    for record in records:
        try:
            rid, experiment, arm, unit, t, score, *captured = record
            exp_pk = int(str(experiment).removeprefix("exp-")) if experiment else 0
            t = float(t)
        except (TypeError, ValueError) as exc:
            raise Poison(f"an exposure record is malformed: {exc}") from None
        if not (isinstance(rid, str) and 0 < len(rid) <= MAX_REQUEST_ID and isinstance(unit, str)):
            raise Poison("an exposure record's request id or unit is not a bounded string")
        if not math.isfinite(t) or abs(t - now) > 7 * 86400:
            raise Poison(f"an exposure record's time {t!r} is not within 7 days of now")
        if score is not None and (not isinstance(score, (int, float)) or not math.isfinite(score)):
            score = None
        if captured and captures is not None:
            captures.append((rid, exp_pk, str(arm), unit[:MAX_UNIT], t, captured))
        if not exp_pk:
            continue
        key = (exp_pk, str(arm))
        if key not in arm_ids:
            arm_ids[key] = Arm.objects.filter(experiment_id=exp_pk, name=str(arm)).values_list("pk", flat=True).first()
        if arm_ids[key] is None:
            continue  # an experiment deleted meanwhile, or a table that was not ours
        rows.append(
            {
                "request_id": rid,
                "experiment": exp_pk,
                "arm": arm_ids[key],
                "unit_key": unit[:MAX_UNIT],
                "score": float(score) if score is not None else None,
                "time": datetime.fromtimestamp(t, tz=UTC),
            }
        )
    return rows


def ingest_exposures(client, *, max_records: int | None = None, consumer: str = "ingest") -> dict:
    """Up to `max_records` exposure records (EXPOSURE_INGEST_RECORDS_PER_RUN), whole entries
    (one gateway flush each, at most 256 KiB), oldest first."""
    max_records = max_records or settings.EXPOSURE_INGEST_RECORDS_PER_RUN
    ensure_group(client, EXPOSURE_STREAM)
    store = default_store()
    totals = {"exposures": 0, "skipped": 0, "dead_letters": 0}
    arm_ids: dict[tuple[int, str], int | None] = {}
    records = 0
    while records < max_records:
        entries = read_entries(client, EXPOSURE_STREAM, 20, consumer)  # each entry is one gateway flush (up to 5 000)
        if not entries:
            break
        items, now, captured = [], time.time(), []
        for entry_id, fields in entries:
            try:
                rows = _exposure_rows(json.loads(text(fields, b"b")), arm_ids, now, captured)
            except (ValueError, Poison) as exc:
                dead_letter(EXPOSURE_STREAM, entry_id, fields, f"unreadable: {exc}")
                totals["dead_letters"] += 1
                records += 1
                continue
            records += max(1, len(rows))
            items.append((entry_id, fields, rows))
        stored = write_each(EXPOSURE_STREAM, items, store.write_exposures)
        if captured:  # the requests the gateway captured with their exposure (training data)
            _write_captures(store, captured, totals)
        totals["exposures"] += sum(stored)
        totals["dead_letters"] += len(items) - len(stored)
        client.xack(EXPOSURE_STREAM, GROUP, *[entry_id for entry_id, _ in entries])
        trim_acknowledged(client, EXPOSURE_STREAM)
    return totals


def _write_captures(store, captured: list, totals: dict) -> None:
    """Captured requests of the exposure stream (only the gateway writes it) into the store, as
    the log's ingest does (experiments/services/captures.py); a store without captures keeps none."""
    from deployments.selectors.rollouts import serving_endpoints
    from experiments.services.captures import capture_rows

    endpoints = {e.name: e for e in serving_endpoints()}
    rows, refused = capture_rows(captured, endpoints)
    store.write_captures(rows)
    totals["captures"] = totals.get("captures", 0) + len(rows)
    totals["captures_refused"] = totals.get("captures_refused", 0) + refused


def exposures_stored_until_ms(client) -> int:
    """Every exposure the gateway flushed before this unix ms is stored: the oldest entry still
    in the exposure stream (acknowledged ones are trimmed), or now when it is empty."""
    oldest = client.xrange(EXPOSURE_STREAM, count=1)
    return entry_ms(oldest[0][0]) if oldest else int(time.time() * 1000)


def ingest_once(client=None) -> dict:
    """One run: exposures, then feedback (fair across sources), then the lag of every
    stream recorded as a metric and alerted when past FEEDBACK_LAG_ALERT_S. {} without a
    stream; {"busy": ...} while another run holds the lock."""
    from experiments.services import feedback_streams, ingest_lag

    client = client or stream_client()
    if client is None:
        return {}
    lock = client.lock(LOCK, timeout=LOCK_S, blocking=False)
    if not lock.acquire():
        return {"busy": "another ingest run is in progress"}
    try:
        totals = ingest_exposures(client)
        cutoff_ms = min(
            int((time.time() - FEEDBACK_DELAY_S) * 1000), exposures_stored_until_ms(client) - int(FLUSH_SLACK_S * 1000)
        )
        totals.update(feedback_streams.ingest_feedback(client, cutoff_ms=cutoff_ms))
        ingest_lag.lag_record(client)
        return totals
    finally:
        try:
            lock.release()
        except redis.exceptions.LockError:  # it expired (a run past LOCK_S): the next run already may go
            pass


def streams_delete(client) -> None:
    """Forget every stream, its pending entries and the doors' counters: a fresh start (tests)."""
    names = [EXPOSURE_STREAM, FEEDBACK_STREAM, LOCK, *client.scan_iter(match=f"{FEEDBACK_STREAM}:*", count=1000)]
    client.delete(*names)
