"""Drain the gateway's exposure and feedback streams (Redis Streams) into the store.

A consumer group ("control") per stream: entries are acknowledged only after their rows
are committed, and unacknowledged ones (a worker died mid-batch) are re-read first on the
next run, so nothing is lost; replays are harmless (exposures are unique by request id,
feedback by event id). Exposures are drained before feedback so a click that follows its
impression within one tick is attributed. Bounded per call (`max_entries`).
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import redis
from django.conf import settings

from experiments.models import Arm
from experiments.online import feedback as feedback_parse
from experiments.online.store import default_store

EXPOSURE_STREAM = "modelplane:exposures"  # gateway/exposures.py writes them (the gateway imports nothing from here)
FEEDBACK_STREAM = "modelplane:feedback"
GROUP = "control"
# Feedback waits this long in its stream before it is attributed, so that the exposures it
# names (flushed by the gateway every second) are stored first; a click arriving within
# the same second as its impression would otherwise be counted `unknown`.
FEEDBACK_DELAY_S = 2.0


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


def _text(fields: dict, key: bytes) -> str:
    value = fields.get(key)
    return value.decode() if isinstance(value, bytes) else (value or "")


def ingest_exposures(client, *, max_entries: int = 50_000, consumer: str = "ingest") -> dict:
    _ensure_group(client, EXPOSURE_STREAM)
    store = default_store()
    written = skipped = 0
    arm_ids: dict[tuple[int, str], int | None] = {}
    while written + skipped < max_entries:
        entries = _read(client, EXPOSURE_STREAM, 20, consumer)  # each entry is one gateway flush (up to 5 000)
        if not entries:
            break
        rows = []
        for _, f in entries:
            try:
                records = json.loads(_text(f, b"b"))
            except ValueError:
                skipped += 1
                continue
            for rid, experiment, arm, unit, t, score in records:
                try:
                    exp_pk = int(str(experiment).removeprefix("exp-"))
                except ValueError:
                    skipped += 1
                    continue
                key = (exp_pk, arm)
                if key not in arm_ids:
                    arm_ids[key] = Arm.objects.filter(experiment_id=exp_pk, name=arm).values_list("pk", flat=True).first()
                if arm_ids[key] is None:
                    skipped += 1  # an experiment deleted meanwhile, or a table that was not ours
                    continue
                rows.append({"request_id": str(rid)[:64], "experiment": exp_pk, "arm": arm_ids[key],
                             "unit_key": str(unit)[:200], "score": score,
                             "time": datetime.fromtimestamp(float(t), tz=timezone.utc)})
        store.write_exposures(rows)
        client.xack(EXPOSURE_STREAM, GROUP, *[entry_id for entry_id, _ in entries])
        written += len(rows)
    return {"exposures": written, "skipped": skipped}


def ingest_feedback(client, *, max_entries: int = 1000, consumer: str = "ingest") -> dict:
    from deployments.selectors.rollouts import serving_endpoints
    from experiments.services.experiments import feedback_ingest

    _ensure_group(client, FEEDBACK_STREAM)
    endpoints = {e.name: e for e in serving_endpoints()}
    totals = {"batches": 0, "received": 0, "duplicates": 0, "attributed": 0, "late": 0, "unknown": 0, "invalid": 0}
    while totals["batches"] < max_entries:
        entries = _read(client, FEEDBACK_STREAM, 100, consumer)
        cutoff_ms = int((time.time() - FEEDBACK_DELAY_S) * 1000)
        young = [e for e in entries if int(e[0].split(b"-")[0]) > cutoff_ms]
        entries = [e for e in entries if int(e[0].split(b"-")[0]) <= cutoff_ms]
        if not entries:
            break  # young entries stay pending for this consumer and are read first next time
        for _, f in entries:
            totals["batches"] += 1
            endpoint = endpoints.get(_text(f, b"e"))
            try:
                events = feedback_parse.parse_events(json.loads(_text(f, b"b")))
            except (ValueError, feedback_parse.FeedbackError):
                events = None
            if endpoint is None or events is None:
                totals["invalid"] += 1  # the gateway checked shape; times in the future or a deleted endpoint land here
                continue
            for k, v in feedback_ingest(endpoint=endpoint, events=events).items():
                totals[k] += v
        client.xack(FEEDBACK_STREAM, GROUP, *[entry_id for entry_id, _ in entries])
        if young:
            break
    return totals


def ingest_once(client=None) -> dict:
    client = client or stream_client()
    if client is None:
        return {}
    return {**ingest_exposures(client), **ingest_feedback(client)}
