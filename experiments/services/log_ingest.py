"""The ingest from the durable log (NATS JetStream) into the store: nothing lost, fair, per team.

The same work as the Redis ingest (ingest.py, feedback_streams.py), read from the log's
subjects (gateway/contracts/log_contract.py) through experiments/eventlog/reader.py:

- exposures (with captured requests): up to EXPOSURE_INGEST_RECORDS_PER_RUN records per run;
  a read's messages are written in one go and acknowledged after the store took them;
- feedback: every source subject with messages waiting gets an equal share of
  FEEDBACK_INGEST_EVENTS_PER_RUN per pass (whole messages of at most 500 events, so a share is
  rounded up to one message), what a source leaves goes to the others, and each source's
  backlog is written back for the gateway's door (log_contract.backlog_key); feedback younger
  than the exposures it may name waits (handed back with a delay).

When the store fails the messages are handed back (nak) and the run stops: the log keeps
them, and the next run starts where this one stopped, so a store outage loses nothing. A
message that cannot be read, or whose subject names a team that does not own its endpoint
(or experiment), is dead-lettered and acknowledged: it never blocks the rest, and no team's
events reach another's rows.
"""

from __future__ import annotations

import json
import math
import random
import time

from django.conf import settings

from experiments.eventlog import contract
from experiments.services.captures import capture_rows
from experiments.services.ingest import FEEDBACK_DELAY_S, FLUSH_SLACK_S, _exposure_rows
from experiments.services.streams import Poison, dead_letter
from experiments.store import default_store

ENTRY_EVENTS = 500  # the gateway's feedback entry (gateway/telemetry/feedback_stream.py)
READ_MESSAGES = 50


class StoreDown(Exception):
    """The store refused a write: the run stops, the log keeps what it read."""


class _Run:
    def __init__(self, reader, store):
        from deployments.selectors.gateway_routes import team_label
        from deployments.selectors.rollouts import serving_endpoints

        self.reader, self.store = reader, store
        self.endpoints = {e.name: e for e in serving_endpoints()}
        self.labels = {name: team_label(e.team) for name, e in self.endpoints.items()}
        self.experiment_endpoint: dict[int, str | None] = {}
        self.totals = {
            "exposures": 0,
            "captures": 0,
            "captures_refused": 0,
            "dead_letters": 0,
            "feedback_messages": 0,
            "received": 0,
            "duplicates": 0,
            "attributed": 0,
            "late": 0,
            "unknown": 0,
            "refused": 0,
        }

    def team_checked(self, subject: str) -> tuple[str, str]:
        """(endpoint, team) of a subject whose team owns the endpoint, or Poison."""
        _, team, endpoint, _ = contract.parse_subject(subject)
        if self.labels.get(endpoint) != team:
            raise Poison(
                f"subject {subject[:120]!r}: team {team[:64]!r} does not own a serving endpoint {endpoint[:64]!r}"
            )
        return endpoint, team

    def endpoint_of(self, experiment_pk: int) -> str | None:
        if experiment_pk not in self.experiment_endpoint:
            from experiments.models import Experiment

            self.experiment_endpoint[experiment_pk] = (
                Experiment.objects.filter(pk=experiment_pk).values_list("endpoint__name", flat=True).first()
            )
        return self.experiment_endpoint[experiment_pk]

    def poisoned(self, msg, reason: str) -> None:
        dead_letter(msg.subject[:64], str(msg.metadata.sequence.stream), {b"b": msg.data[:4096]}, reason)
        self.totals["dead_letters"] += 1


def _exposure_message(run: _Run, msg, arm_ids: dict, now: float) -> tuple[list, list]:
    endpoint, team = run.team_checked(msg.subject)
    try:
        records = json.loads(msg.data)
    except ValueError as exc:
        raise Poison(f"unreadable: {exc}") from None
    captured: list = []
    rows = _exposure_rows(records, arm_ids, now, captured)
    for row in rows:
        if run.endpoint_of(row["experiment"]) != endpoint:
            raise Poison(f"an exposure of experiment {row['experiment']} on {endpoint!r}'s subject is not its own")
        row["team"] = run.endpoints[endpoint].team_id
    captures, refused = capture_rows(captured, {endpoint: run.endpoints[endpoint]}, subject_team=team)
    run.totals["captures_refused"] += refused
    return rows, captures


def ingest_log_exposures(run: _Run, max_records: int) -> None:
    arm_ids: dict = {}
    records = 0
    while records < max_records:
        msgs = run.reader.exposures(READ_MESSAGES)
        if not msgs:
            return
        rows, captures, now = [], [], time.time()
        for msg in msgs:
            try:
                got, caught = _exposure_message(run, msg, arm_ids, now)
            except Poison as exc:
                run.poisoned(msg, str(exc))
                continue
            rows += got
            captures += caught
        records += len(rows) + len(captures)
        try:
            run.store.write_exposures(rows)
            run.store.write_captures(captures)
        except Exception as exc:
            run.reader.nak(msgs)
            raise StoreDown(f"{type(exc).__name__}: {exc}") from exc
        run.reader.ack(msgs)
        run.totals["exposures"] += len(rows)
        run.totals["captures"] += len(captures)


def _feedback_events(run: _Run, msg):
    """(endpoint, events) of one feedback message, the door's rules again, or Poison."""
    from experiments.services.feedback_streams import _Run as StreamRun

    endpoint, _ = run.team_checked(msg.subject)
    try:
        doc = json.loads(msg.data)
        fields = {b"e": doc["e"], b"k": doc.get("k", ""), b"b": json.dumps(doc["b"])}
    except (ValueError, KeyError, TypeError) as exc:
        raise Poison(f"unreadable: {exc}") from None
    if doc["e"] != endpoint:
        raise Poison(f"a batch for {str(doc['e'])[:64]!r} on {endpoint!r}'s subject")
    checker = StreamRun(None, 0, "log")
    checker.endpoints = run.endpoints
    ms = int(msg.metadata.timestamp.timestamp() * 1000)
    return checker.batch(f"{ms}-0", fields)


def _take(run: _Run, subject: str, share: int, cutoff_ms: int) -> tuple[int, bool]:
    """Up to `share` events (whole messages) of one source: (events taken, more ready)."""
    from experiments.services.feedback import feedback_ingest

    msgs = run.reader.feedback(subject, max(1, math.ceil(share / ENTRY_EVENTS)), timeout=0.1)
    ready = [m for m in msgs if m.metadata.timestamp.timestamp() * 1000 <= cutoff_ms]
    young = [m for m in msgs if m not in ready]
    run.reader.nak(young, delay_s=max(0.2, FEEDBACK_DELAY_S))
    # one store write for every ready message of the source (its events in order; a source is one
    # endpoint's): the store's cost is per write far more than per event
    used, poisoned, good, batch, endpoint = 0, [], [], [], None
    for msg in ready:
        try:
            endpoint, events = _feedback_events(run, msg)
        except Poison as exc:
            run.poisoned(msg, str(exc))
            poisoned.append(msg)
            continue
        batch += events
        used += len(events)
        good.append(msg)
    done = poisoned + good
    if batch:
        try:
            counts = feedback_ingest(endpoint=endpoint, events=batch, store=run.store)
        except Exception as exc:
            run.reader.nak(good)
            run.reader.ack(poisoned)
            raise StoreDown(f"{type(exc).__name__}: {exc}") from exc
        for key, value in counts.items():
            run.totals[key] += value
    run.reader.ack(done)
    run.totals["feedback_messages"] += len(done)
    return used, bool(ready) and not young


def ingest_log_feedback(run: _Run, *, cutoff_ms: int, budget: int, redis_client=None) -> None:
    subjects = run.reader.feedback_subjects()
    waiting = {s: run.reader.waiting(s) for s in subjects}
    if redis_client is not None and subjects:  # each source's backlog, for the gateway's door
        pipe = redis_client.pipeline(transaction=False)
        for s, n in waiting.items():
            pipe.set(contract.backlog_key(s), n, ex=3600)
        pipe.execute()
    active = [s for s in subjects if waiting[s]]
    random.shuffle(active)  # no source is always last in a pass
    while active and budget > 0:
        share, ready, used_in_pass = max(1, budget // len(active)), [], 0
        for s in active:
            used, more = _take(run, s, share, cutoff_ms)
            budget -= used
            used_in_pass += used
            if more:
                ready.append(s)
        if not used_in_pass:
            return
        active = ready


def ingest_log_once(reader, *, store=None, redis_client=None) -> dict:
    """One run: exposures (and captures), then feedback fairly across sources. Returns the
    totals; `store_down` says why a run stopped early (the log keeps the rest)."""
    run = _Run(reader, store or default_store())
    try:
        ingest_log_exposures(run, settings.EXPOSURE_INGEST_RECORDS_PER_RUN)
        waiting, oldest = reader.exposures_waiting()
        now = time.time()
        stored_until = oldest if (waiting and oldest) else now
        cutoff_ms = int(min(now - FEEDBACK_DELAY_S, stored_until - FLUSH_SLACK_S) * 1000)
        ingest_log_feedback(
            run, cutoff_ms=cutoff_ms, budget=settings.FEEDBACK_INGEST_EVENTS_PER_RUN, redis_client=redis_client
        )
    except StoreDown as exc:
        run.totals["store_down"] = str(exc)[:500]
    return run.totals
