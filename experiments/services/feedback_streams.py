"""Feedback from its per-source streams into the store: bounded in events per run, fair across sources.

The gateway queues each endpoint's feedback from each source (a key, or the endpoint's
exposure tokens) on a stream of its own (feedback_rules.feedback_stream, listed in the set
FEEDBACK_STREAMS), in entries of at most a few hundred events. One run takes at most
FEEDBACK_INGEST_EVENTS_PER_RUN events (and stops starting new work after
FEEDBACK_INGEST_RUN_S): every stream with entries ready gets an equal share first
(`fair_share`), what a stream leaves unused goes to those that still have some, in turn. So
one hot key, token or experiment takes at most its share while the others' entries are
taken in the same run: a flood costs its own stream's lag, never another's.

An entry larger than a stream's share is committed in parts: the part's events are written
in one transaction, then the count of its events already stored is kept in the hash PARTS
(and the entry stays pending); the last part acknowledges it. A run cut off between the two
writes the part again next time, which stores nothing twice (event ids are idempotent per
team); only one run goes at a time (ingest.LOCK). Entries younger than `cutoff_ms` (the
exposures they may name are not stored yet) stay pending and are read first next time.
"""

from __future__ import annotations

import json
import random
import time

import redis
from django.conf import settings
from django.db import transaction

from experiments import feedback as feedback_parse
from experiments.selectors.streams import feedback_streams
from experiments.services.streams import (
    GROUP,
    Poison,
    dead_letter,
    ensure_group,
    entry_ms,
    read_entries,
    text,
    trim_acknowledged,
)

PARTS = "modelplane:feedback:parts"  # "<stream> <entry id>" -> events of that entry already stored
ENTRIES_PER_READ = 20
COUNTS = ("received", "duplicates", "attributed", "late", "unknown", "refused")


def fair_share(budget: int, streams: int) -> int:
    """Events each of `streams` streams may take from what is left of a run's budget (pure)."""
    return max(1, budget // max(1, streams))


class _Run:
    """What one run knows: the serving endpoints, their experiments, the totals so far."""

    def __init__(self, client, cutoff_ms: int, consumer: str):
        from deployments.selectors.rollouts import serving_endpoints

        self.client, self.cutoff_ms, self.consumer = client, cutoff_ms, consumer
        self.endpoints = {e.name: e for e in serving_endpoints()}
        self.experiments: dict[int, list] = {}
        self.totals = {"batches": 0, **dict.fromkeys(COUNTS, 0), "invalid": 0, "parts": 0}

    def experiments_of(self, endpoint) -> list:
        from experiments.services.feedback import endpoint_experiments

        if endpoint.pk not in self.experiments:
            self.experiments[endpoint.pk] = endpoint_experiments(endpoint)
        return self.experiments[endpoint.pk]

    def batch(self, entry_id, fields: dict):
        """(endpoint, events) of one entry, or Poison saying why not."""
        from experiments.services.feedback import FeedbackRefused, tokens_resolve

        name = text(fields, b"e")
        endpoint = self.endpoints.get(name)
        if endpoint is None:
            raise Poison(f"no serving endpoint named {name[:64]!r}")
        try:
            _, events = feedback_parse.parse_batch({"endpoint": name, "events": json.loads(text(fields, b"b"))})
        except ValueError as exc:  # FeedbackError too: the gateway checked shape; a time past the window lands here
            raise Poison(f"not a valid batch: {getattr(exc, 'detail', exc)}") from None
        try:  # the door's rules again, as of when the door took it: a forged entry is poison
            events = tokens_resolve(
                endpoint=endpoint,
                events=events,
                experiments=self.experiments_of(endpoint),
                keyed=bool(text(fields, b"k")),
                now_ms=entry_ms(entry_id),
                door=False,
            )
        except FeedbackRefused as exc:
            raise Poison(exc.detail) from None
        return endpoint, events


def ingest_feedback(
    client, *, cutoff_ms: int, budget: int | None = None, budget_s: float | None = None, consumer: str = "ingest"
) -> dict:
    """One run over every feedback stream; returns the totals (COUNTS, batches, invalid, parts)."""
    budget = budget or settings.FEEDBACK_INGEST_EVENTS_PER_RUN
    deadline = time.monotonic() + (budget_s or settings.FEEDBACK_INGEST_RUN_S)
    run = _Run(client, cutoff_ms, consumer)
    streams = feedback_streams(client)
    pipe = client.pipeline(transaction=False)
    for stream in streams:
        pipe.xlen(stream)
    active = [stream for stream, entries in zip(streams, pipe.execute()) if entries]  # one round trip
    random.shuffle(active)  # no stream is always last in a pass
    first = True
    while active and budget > 0:
        share, ready, used_in_pass = fair_share(budget, len(active)), [], 0
        for stream in active:
            if not first and time.monotonic() > deadline:
                break
            used, more = _drain(run, stream, share)
            budget -= used
            used_in_pass += used
            if more:
                ready.append(stream)
        if not used_in_pass:
            break
        active, first = ready, False
    return run.totals


def _drain(run: _Run, stream: str, limit: int) -> tuple[int, bool]:
    """Up to `limit` events of `stream`'s ready entries: (events taken, whether more are ready)."""
    client = run.client
    try:
        entries = read_entries(client, stream, ENTRIES_PER_READ, run.consumer)
    except redis.ResponseError as exc:
        if "NOGROUP" not in str(exc):
            raise
        ensure_group(client, stream)  # a new stream: its group reads it from its first entry
        entries = read_entries(client, stream, ENTRIES_PER_READ, run.consumer)
    used, items, done_ids, poisoned, part = 0, [], [], [], None
    more = bool(entries)  # unless cut short below: there may be more behind what was read
    for entry_id, fields in entries:
        if entry_ms(entry_id) > run.cutoff_ms:
            more = False  # young: it stays pending, read first next run
            break
        if used >= limit:
            more = True
            break
        try:
            endpoint, events = run.batch(entry_id, fields)
        except Poison as exc:
            run.totals["batches"] += 1
            run.totals["invalid"] += 1
            dead_letter(stream, entry_id, fields, str(exc), text(fields, b"e"))
            poisoned.append(entry_id)
            used += 1
            continue
        stored = int(client.hget(PARTS, _part_key(stream, entry_id)) or 0)
        rest = events[stored:]
        if len(rest) > limit - used:
            more = True
            if used:
                break  # the next share (or run) starts with it
            rest, part = rest[:limit], (entry_id, stored + limit)
        items.append((entry_id, fields, (endpoint, rest)))
        used += len(rest)
        if part is not None:
            break
        done_ids.append(entry_id)
    failed = _store(run, stream, items)
    if part is not None and part[0] in failed:  # dead-lettered whole: nothing of it is left to take
        done_ids.append(part[0])
        part = None
    acks = [*done_ids, *poisoned]
    run.totals["batches"] += len(done_ids)
    pipe = client.pipeline(transaction=True)
    if acks:
        pipe.xack(stream, GROUP, *acks)
        pipe.hdel(PARTS, *[_part_key(stream, e) for e in acks])
    if part is not None:
        pipe.hset(PARTS, _part_key(stream, part[0]), part[1])
        run.totals["parts"] += 1
    pipe.execute()
    if acks:
        trim_acknowledged(client, stream)
    return used, more


def _part_key(stream: str, entry_id) -> str:
    return f"{stream} {entry_id.decode() if isinstance(entry_id, bytes) else entry_id}"


def _store(run: _Run, stream: str, items) -> set:
    """The entries' events in one transaction (merged per endpoint); when that fails, entry by
    entry, the ones that still fail dead-lettered. Returns the ids of those."""
    from experiments.services.feedback import feedback_ingest

    def write(endpoint, events):
        return feedback_ingest(endpoint=endpoint, events=events, experiments=run.experiments_of(endpoint))

    by_endpoint: dict[int, tuple] = {}
    for _, _, (endpoint, events) in items:
        by_endpoint.setdefault(endpoint.pk, (endpoint, []))[1].extend(events)
    failed: set = set()
    try:
        with transaction.atomic():
            stored = [write(endpoint, events) for endpoint, events in by_endpoint.values()]
    except Exception:  # noqa: BLE001 - find the entry that fails, keep the rest
        stored = []
        for entry_id, fields, (endpoint, events) in items:
            try:
                with transaction.atomic():
                    stored.append(write(endpoint, events))
            except Exception as exc:  # noqa: BLE001 - a poison entry: quarantined, never blocking
                reason = f"could not be stored: {type(exc).__name__}: {exc}"[:500]
                dead_letter(stream, entry_id, fields, reason, endpoint.name)
                failed.add(entry_id)
                run.totals["invalid"] += 1
    for counts in stored:
        for k, v in counts.items():
            run.totals[k] += v
    return failed
