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
gateway caps that backlog (gateway/exposures.py and gateway/feedback_stream.py state the
bound per stream).
"""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime

import redis
from django.conf import settings
from django.db import transaction

from experiments.models import Arm, DeadLetter
from experiments.services import alerts
from experiments.store import default_store

EXPOSURE_STREAM = "modelplane:exposures"  # gateway/exposures.py writes them (the gateway imports nothing from here)
FEEDBACK_STREAM = "modelplane:feedback"  # every source in one stream: what gateways before per-source streams wrote
GROUP = "control"
LOCK = "modelplane:ingest:lock"
LOCK_S = 40  # past the task's hard time limit: a run killed mid-way frees it in time for the next
# Feedback waits this long in its stream before it is attributed, so that the exposures it
# names (flushed by the gateway every second) are stored first; a click arriving within
# the same second as its impression would otherwise be counted `unknown`.
FEEDBACK_DELAY_S = 2.0
FLUSH_SLACK_S = 1.5  # the gateway flushes exposures every second: an entry's id is at most ~1 s after them
PAYLOAD_KEPT = 4096
MAX_UNIT = 200
MAX_REQUEST_ID = 128


class Poison(ValueError):
    """An entry the ingest cannot handle; its message is the dead letter's reason."""


def stream_client():
    url = settings.EXPOSURE_STREAM_URL
    return redis.Redis.from_url(url) if url else None


def ensure_group(client, stream: str) -> None:
    try:
        client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def read_entries(client, stream: str, count: int, consumer: str):
    """Pending entries of this consumer first (a crashed or cut-short run), then new ones."""
    for start in ("0", ">"):
        got = client.xreadgroup(GROUP, consumer, {stream: start}, count=count)
        entries = got[0][1] if got else []
        if entries:
            return entries
    return []


def entry_ms(entry_id) -> int:
    """The unix ms a stream entry was added (the first part of its id)."""
    raw = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
    return int(raw.split("-", 1)[0])


def trim_acknowledged(client, stream: str) -> int:
    """XTRIM MINID to the oldest entry still unacknowledged (or past the last delivered one):
    what the group has acknowledged leaves the stream. Returns the entries removed."""
    pending = client.xpending(stream, GROUP)
    if pending and pending.get("pending"):
        floor = pending["min"]
    else:
        groups = [g for g in client.xinfo_groups(stream) if g["name"] in (GROUP, GROUP.encode())]
        if not groups:
            return 0
        last = groups[0]["last-delivered-id"]
        last = last.decode() if isinstance(last, bytes) else last
        ms, _, seq = last.partition("-")
        floor = f"{ms}-{int(seq or 0) + 1}"
    return client.xtrim(stream, minid=floor, approximate=False)


def text(fields: dict, key: bytes) -> str:
    value = fields.get(key)
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else (value or "")


def dead_letter(stream: str, entry_id, fields: dict, reason: str, endpoint_name: str = "") -> None:
    payload = json.dumps({text({b"k": k}, b"k"): text(fields, k)[:PAYLOAD_KEPT] for k in fields})[:PAYLOAD_KEPT]
    entry = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
    DeadLetter.objects.create(
        stream=stream, entry_id=entry, reason=reason[:500], payload=payload, endpoint_name=endpoint_name[:64]
    )
    alerts.dead_letter_alert(stream=stream, entry_id=entry, reason=reason, endpoint_name=endpoint_name)


def write_each(stream: str, items, write) -> list:
    """`write(payload)` for every (entry id, fields, payload) in one transaction; when that
    fails, each alone (a savepoint each), the ones that still fail dead-lettered. Returns
    what `write` returned for the entries that were stored."""
    try:
        with transaction.atomic():
            return [write(payload) for _, _, payload in items]
    except Exception:  # noqa: BLE001 - find the entry that fails, keep the rest
        pass
    done = []
    for entry_id, fields, payload in items:
        try:
            with transaction.atomic():
                done.append(write(payload))
        except Exception as exc:  # noqa: BLE001 - a poison entry: quarantined, never blocking
            dead_letter(stream, entry_id, fields, f"could not be stored: {type(exc).__name__}: {exc}"[:500])
    return done


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
        items, now = [], time.time()
        for entry_id, fields in entries:
            try:
                rows = _exposure_rows(json.loads(text(fields, b"b")), arm_ids, now)
            except (ValueError, Poison) as exc:
                dead_letter(EXPOSURE_STREAM, entry_id, fields, f"unreadable: {exc}")
                totals["dead_letters"] += 1
                records += 1
                continue
            records += max(1, len(rows))
            items.append((entry_id, fields, rows))
        stored = write_each(EXPOSURE_STREAM, items, store.write_exposures)
        totals["exposures"] += sum(stored)
        totals["dead_letters"] += len(items) - len(stored)
        client.xack(EXPOSURE_STREAM, GROUP, *[entry_id for entry_id, _ in entries])
        trim_acknowledged(client, EXPOSURE_STREAM)
    return totals


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
