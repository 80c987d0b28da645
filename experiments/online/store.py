"""The exposure and feedback store behind one interface.

`ExposureStore` is what the rest of the platform uses: write exposures (from the
gateway's batches), write feedback batches (idempotent by event id, attributed to an
exposure inside the experiment's window, or counted late/unknown), and read the per-arm
per-unit sufficient statistics the analysis needs.

The embedded default (`PostgresStore`) keeps rows in PostgreSQL, inserted in batches
(one INSERT … ON CONFLICT DO NOTHING per few thousand rows) and aggregated per unit with
one GROUP BY; the gateway never talks to it — it appends to a Redis Stream
(gateway/exposures.py) that `experiments.online.ingest` drains into this store. A large
user swaps the two ends for Kafka (the gateway's sink) and ClickHouse (this interface:
the same three methods over a MergeTree table partitioned by day), and nothing else moves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np
from django.db import connection
from django.db.models import Count, Q, Sum
from django.utils import timezone

from experiments.models import Arm, Experiment, ExperimentState, Exposure, Feedback, FeedbackKind, FeedbackStatus
from experiments.online import analysis

BATCH = 5000


@dataclass
class FeedbackResult:
    received: int = 0
    duplicates: int = 0
    attributed: int = 0
    late: int = 0
    unknown: int = 0
    by_status: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"received": self.received, "duplicates": self.duplicates, "attributed": self.attributed,
                "late": self.late, "unknown": self.unknown}


class ExposureStore:  # the interface
    def write_exposures(self, rows: list[dict]) -> int:
        raise NotImplementedError

    def write_feedback(self, *, team, endpoint_name: str, experiments, events: list[dict]) -> FeedbackResult:
        raise NotImplementedError

    def arm_sums(self, experiment: Experiment) -> tuple[dict, dict, dict]:
        raise NotImplementedError


class PostgresStore(ExposureStore):
    def write_exposures(self, rows: list[dict]) -> int:
        """rows: request_id, experiment (id), arm (id), unit_key, time, score. Replays are ignored."""
        objs = [Exposure(request_id=r["request_id"], experiment_id=r["experiment"], arm_id=r["arm"],
                         unit_key=r["unit_key"], time=r["time"], score=r.get("score")) for r in rows]
        Exposure.objects.bulk_create(objs, batch_size=BATCH, ignore_conflicts=True)
        return len(objs)

    def write_feedback(self, *, team, endpoint_name: str, experiments, events: list[dict]) -> FeedbackResult:
        """Validated events (see experiments.online.feedback.parse_batch) of one team.

        `experiments` are the experiments the events may belong to (the endpoint's). An
        event is attributed to the exposure with its request id (or the unit's latest
        exposure) when it comes within the experiment's attribution window after it;
        later: `late`; no such exposure: `unknown`. A known event id is a duplicate."""
        result = FeedbackResult(received=len(events))
        if not events:
            return result
        ids = [e["event_id"] for e in events]
        seen = set(Feedback.objects.filter(event_id__in=ids).values_list("event_id", flat=True))
        fresh, batch_ids = [], set()
        for e in events:
            if e["event_id"] in seen or e["event_id"] in batch_ids:
                result.duplicates += 1
                continue
            batch_ids.add(e["event_id"])
            fresh.append(e)
        exp_by_id = {x.pk: x for x in experiments}
        req_ids = [e["request_id"] for e in fresh if e.get("request_id")]
        by_request = {x.request_id: x for x in Exposure.objects.filter(request_id__in=req_ids, experiment_id__in=exp_by_id)}
        units = [e["unit_key"] for e in fresh if e.get("unit_key") and not e.get("request_id")]
        by_unit: dict[str, Exposure] = {}
        if units:
            running = [x.pk for x in experiments if x.state == ExperimentState.RUNNING] or list(exp_by_id)
            for x in Exposure.objects.filter(experiment_id__in=running, unit_key__in=units).order_by("unit_key", "-time"):
                by_unit.setdefault(x.unit_key, x)
        rows = []
        now = timezone.now()
        for e in fresh:
            exposure = by_request.get(e["request_id"]) if e.get("request_id") else by_unit.get(e.get("unit_key", ""))
            status = FeedbackStatus.UNKNOWN
            if exposure is not None:
                window = timedelta(seconds=exp_by_id[exposure.experiment_id].attribution_window_s)
                status = FeedbackStatus.LATE if e["time"] - exposure.time > window else FeedbackStatus.ATTRIBUTED
            setattr(result, status.value, getattr(result, status.value) + 1)
            rows.append((e["event_id"], team.pk, endpoint_name, e["type"], e.get("value", 1.0), e.get("request_id", ""),
                         e.get("unit_key", ""), e["time"], now, status.value,
                         exposure.experiment_id if exposure else None, exposure.arm_id if exposure else None,
                         exposure.unit_key if exposure else ""))
        _insert_feedback(rows)  # a concurrent retry of the same ids is ignored by the unique constraint
        return result

    def arm_sums(self, experiment: Experiment):
        """Per arm: the per-unit sufficient statistics of (exposures, clicks); extras
        (conversions, value); and the experiment's feedback counts by status."""
        arms = list(Arm.objects.filter(experiment=experiment))
        sums, extras = {}, {}
        for arm in arms:
            exp_units = dict(Exposure.objects.filter(experiment=experiment, arm=arm).values("unit_key")
                             .annotate(n=Count("id")).values_list("unit_key", "n"))
            fb = Feedback.objects.filter(experiment=experiment, arm=arm, status=FeedbackStatus.ATTRIBUTED)
            clicks = dict(fb.filter(kind=FeedbackKind.CLICK).values("exposure_unit").annotate(c=Count("id"))
                          .values_list("exposure_unit", "c"))
            keys = list(exp_units)
            n = np.array([exp_units[k] for k in keys], dtype=float)
            c = np.array([min(clicks.get(k, 0), exp_units[k]) for k in keys], dtype=float)  # at most one click per exposure
            sums[arm.pk] = analysis.sums_from_units(n, c) if keys else {k: 0.0 for k in analysis.SUMS}
            totals = fb.aggregate(conv=Count("id", filter=Q(kind=FeedbackKind.CONVERSION)),
                                  value=Sum("value", filter=Q(kind=FeedbackKind.VALUE)))
            extras[arm.pk] = {"conversions": totals["conv"] or 0, "value": totals["value"] or 0.0}
        counts = dict(Feedback.objects.filter(experiment=experiment).values("status").annotate(n=Count("id"))
                      .values_list("status", "n"))
        if experiment.started_at is not None:  # unknown events name no experiment: count the endpoint's since the start
            counts[FeedbackStatus.UNKNOWN.value] = Feedback.objects.filter(
                endpoint_name=experiment.endpoint.name, status=FeedbackStatus.UNKNOWN, received_at__gte=experiment.started_at,
                **({"received_at__lte": experiment.ended_at} if experiment.ended_at else {})).count()
        return sums, extras, {s.value: counts.get(s.value, 0) for s in FeedbackStatus}


FEEDBACK_COLUMNS = ("event_id", "team_id", "endpoint_name", "kind", "value", "request_id", "unit_key", "time",
                    "received_at", "status", "experiment_id", "arm_id", "exposure_unit")


def _insert_feedback(rows: list[tuple]) -> None:
    """PostgreSQL: COPY into a temporary table, then one INSERT … ON CONFLICT DO NOTHING
    (COPY itself cannot skip duplicates); ~10x the rate of multi-row INSERTs from the ORM.
    Other databases: bulk_create."""
    if not rows:
        return
    if connection.vendor != "postgresql":
        Feedback.objects.bulk_create([Feedback(**dict(zip(FEEDBACK_COLUMNS, r))) for r in rows], batch_size=BATCH,
                                     ignore_conflicts=True)
        return
    cols = ", ".join(FEEDBACK_COLUMNS)
    table = Feedback._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TEMP TABLE IF NOT EXISTS feedback_in AS SELECT {cols} FROM {table} WITH NO DATA")
        cursor.execute("TRUNCATE feedback_in")
        with cursor.cursor.copy(f"COPY feedback_in ({cols}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        cursor.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM feedback_in ON CONFLICT (event_id) DO NOTHING")
        cursor.execute("TRUNCATE feedback_in")


def default_store() -> ExposureStore:
    return PostgresStore()


