"""The Redis Streams plumbing both ingests use (the exposures' in ingest.py, the feedback's in
feedback_streams.py) and the feedback service: the client, the consumer group and its
reads, trimming what was acknowledged, and the dead-letter store for an entry nothing can
handle. Below both ingests and the feedback service, so none of them imports another for it."""

from __future__ import annotations

import json

import redis
from django.conf import settings
from django.db import transaction

from experiments.models import DeadLetter
from experiments.services import alerts

GROUP = "control"
PAYLOAD_KEPT = 4096


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
