"""Drain the gateway's exposure and feedback streams (Redis Streams) into the store.

A consumer group ("control") per stream: entries are acknowledged only after their rows
are committed, and unacknowledged ones (a worker died mid-batch) are re-read first on the
next run, so nothing is lost; replays are harmless (exposures are unique per experiment
and request id, feedback per team and event id). Exposures are drained before feedback so
a click that follows its impression within one tick is attributed. Bounded per call.

Nothing in a stream can stop it: a read's entries are written in one transaction, and when
that fails each entry is written alone; an entry that cannot be read or written goes to
the dead-letter store (experiments.models.DeadLetter: stream, entry id, reason, the
payload's first 4 KiB), is counted and alerted, and is acknowledged like the others.

Memory: acknowledged entries are trimmed (XTRIM MINID past the last acknowledged one)
after every read, so a stream holds only what the control plane has not ingested yet; the
gateway caps that backlog with XADD MAXLEN (gateway/exposures.py states the bound per stream).
"""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime

import redis
from django.conf import settings
from django.db import transaction

from experiments import feedback as feedback_parse
from experiments.models import Arm, DeadLetter
from experiments.services import alerts
from experiments.store import default_store

EXPOSURE_STREAM = "modelplane:exposures"  # gateway/exposures.py writes them (the gateway imports nothing from here)
FEEDBACK_STREAM = "modelplane:feedback"
GROUP = "control"
# Feedback waits this long in its stream before it is attributed, so that the exposures it
# names (flushed by the gateway every second) are stored first; a click arriving within
# the same second as its impression would otherwise be counted `unknown`.
FEEDBACK_DELAY_S = 2.0
PAYLOAD_KEPT = 4096
MAX_UNIT = 200
MAX_REQUEST_ID = 128


class Poison(ValueError):
    """An entry the ingest cannot handle; its message is the dead letter's reason."""


def stream_client():
    url = settings.EXPOSURE_STREAM_URL
    return redis.Redis.from_url(url) if url else None


def _ensure_group(client, stream: str) -> None:
    try:
        client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def _read(client, stream: str, count: int, consumer: str):
    """Pending entries of this consumer first (a crashed run), then new ones."""
    for start in ("0", ">"):
        got = client.xreadgroup(GROUP, consumer, {stream: start}, count=count)
        entries = got[0][1] if got else []
        if entries:
            return entries
    return []


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


def _text(fields: dict, key: bytes) -> str:
    value = fields.get(key)
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else (value or "")


def _dead_letter(stream: str, entry_id, fields: dict, reason: str, endpoint_name: str = "") -> None:
    payload = json.dumps({_text({b"k": k}, b"k"): _text(fields, k)[:PAYLOAD_KEPT] for k in fields})[:PAYLOAD_KEPT]
    entry = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
    DeadLetter.objects.create(
        stream=stream, entry_id=entry, reason=reason[:500], payload=payload, endpoint_name=endpoint_name[:64]
    )
    alerts.dead_letter_alert(stream=stream, entry_id=entry, reason=reason, endpoint_name=endpoint_name)


def _write_each(stream: str, items, write) -> list:
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
            _dead_letter(stream, entry_id, fields, f"could not be stored: {type(exc).__name__}: {exc}"[:500])
    return done


def _write_merged(items, write) -> list:
    """Feedback entries of one read: one statement per endpoint (its entries' events merged,
    one transaction for all), the count per entry; when that fails, entry by entry."""
    by_endpoint: dict[int, tuple] = {}
    for _, _, (endpoint, events) in items:
        merged = by_endpoint.setdefault(endpoint.pk, (endpoint, []))
        merged[1].extend(events)
    try:
        with transaction.atomic():
            done = [write(merged) for merged in by_endpoint.values()]
        return done + [{}] * (len(items) - len(done))  # every entry stored
    except Exception:  # noqa: BLE001 - find the entry that fails, keep the rest
        return _write_each(FEEDBACK_STREAM, items, write)


def _exposure_rows(records, arm_ids: dict, now: float) -> list[dict]:
    if not isinstance(records, list):
        raise Poison("the entry is not a list of exposure records")
    rows = []
    for record in records:
        try:
            rid, experiment, arm, unit, t, score = record
            exp_pk = int(str(experiment).removeprefix("exp-"))
            t = float(t)
        except (TypeError, ValueError) as exc:
            raise Poison(f"an exposure record is malformed: {exc}") from None
        if not (isinstance(rid, str) and 0 < len(rid) <= MAX_REQUEST_ID and isinstance(unit, str)):
            raise Poison("an exposure record's request id or unit is not a bounded string")
        if not math.isfinite(t) or abs(t - now) > 7 * 86400:
            raise Poison(f"an exposure record's time {t!r} is not within 7 days of now")
        if score is not None and (not isinstance(score, (int, float)) or not math.isfinite(score)):
            score = None
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


def ingest_exposures(client, *, max_entries: int = 50_000, consumer: str = "ingest") -> dict:
    _ensure_group(client, EXPOSURE_STREAM)
    store = default_store()
    totals = {"exposures": 0, "skipped": 0, "dead_letters": 0}
    arm_ids: dict[tuple[int, str], int | None] = {}
    entries_read = 0
    while entries_read < max_entries:
        entries = _read(client, EXPOSURE_STREAM, 20, consumer)  # each entry is one gateway flush (up to 5 000)
        if not entries:
            break
        entries_read += len(entries)
        items, now = [], time.time()
        for entry_id, fields in entries:
            try:
                rows = _exposure_rows(json.loads(_text(fields, b"b")), arm_ids, now)
            except (ValueError, Poison) as exc:
                _dead_letter(EXPOSURE_STREAM, entry_id, fields, f"unreadable: {exc}")
                totals["dead_letters"] += 1
                continue
            items.append((entry_id, fields, rows))
        stored = _write_each(EXPOSURE_STREAM, items, store.write_exposures)
        totals["exposures"] += sum(stored)
        totals["dead_letters"] += len(items) - len(stored)
        client.xack(EXPOSURE_STREAM, GROUP, *[entry_id for entry_id, _ in entries])
        trim_acknowledged(client, EXPOSURE_STREAM)
    return totals


def _feedback_batch(fields: dict, endpoints: dict, token_keys):
    """(endpoint, events) of one feedback entry, or Poison saying why not."""
    name = _text(fields, b"e")
    endpoint = endpoints.get(name)
    if endpoint is None:
        raise Poison(f"no serving endpoint named {name[:64]!r}")
    try:
        _, events = feedback_parse.parse_batch({"endpoint": name, "events": json.loads(_text(fields, b"b"))})
    except ValueError as exc:  # FeedbackError too: the gateway checked shape; a time past the window lands here
        raise Poison(f"not a valid batch: {getattr(exc, 'detail', exc)}") from None
    from experiments.services.feedback import FeedbackRefused, tokens_resolve

    keys = token_keys(endpoint)
    if not _text(fields, b"k") and not all(feedback_parse.TOKEN_FIELD in e for e in events):
        raise Poison("a batch without a key must cite exposure tokens")
    try:
        return endpoint, tokens_resolve(endpoint=endpoint, events=events, keys=keys)
    except FeedbackRefused as exc:
        raise Poison(exc.detail) from None


def ingest_feedback(client, *, max_entries: int = 1000, consumer: str = "ingest") -> dict:
    from deployments.selectors.rollouts import serving_endpoints
    from experiments.services.feedback import endpoint_experiments, feedback_ingest, token_keys

    _ensure_group(client, FEEDBACK_STREAM)
    endpoints = {e.name: e for e in serving_endpoints()}
    experiments: dict[int, list] = {}

    def experiments_of(endpoint):
        if endpoint.pk not in experiments:
            experiments[endpoint.pk] = endpoint_experiments(endpoint)
        return experiments[endpoint.pk]

    totals = {"batches": 0, "received": 0, "duplicates": 0, "attributed": 0, "late": 0, "unknown": 0, "invalid": 0}
    while totals["batches"] < max_entries:
        entries = _read(client, FEEDBACK_STREAM, 100, consumer)
        cutoff_ms = int((time.time() - FEEDBACK_DELAY_S) * 1000)
        young = [e for e in entries if int(e[0].split(b"-")[0]) > cutoff_ms]
        entries = [e for e in entries if int(e[0].split(b"-")[0]) <= cutoff_ms]
        if not entries:
            break  # young entries stay pending for this consumer and are read first next time
        items = []
        for entry_id, fields in entries:
            totals["batches"] += 1
            try:
                endpoint, events = _feedback_batch(fields, endpoints, lambda ep: token_keys(experiments_of(ep)))
            except Poison as exc:
                totals["invalid"] += 1
                _dead_letter(FEEDBACK_STREAM, entry_id, fields, str(exc), _text(fields, b"e"))
                continue
            items.append((entry_id, fields, (endpoint, events)))

        def write(batch):
            endpoint, events = batch
            return feedback_ingest(endpoint=endpoint, events=events, experiments=experiments_of(endpoint))

        stored = _write_merged(items, write)
        totals["invalid"] += len(items) - len(stored)
        for counts in stored:
            for k, v in counts.items():
                totals[k] += v
        client.xack(FEEDBACK_STREAM, GROUP, *[entry_id for entry_id, _ in entries])
        trim_acknowledged(client, FEEDBACK_STREAM)
        if young:
            break
    return totals


def ingest_once(client=None) -> dict:
    client = client or stream_client()
    if client is None:
        return {}
    return {**ingest_exposures(client), **ingest_feedback(client)}
