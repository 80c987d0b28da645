"""The exposure and feedback store behind one interface.

`ExposureStore` is what the rest of the platform uses: write exposures (from the
gateway's batches), write feedback batches (idempotent by event id, attributed to an
exposure inside the experiment's window, or counted late/unknown), and read the per-arm
per-unit sufficient statistics the analysis needs.

EXPERIMENT_STORE picks one: ClickHouse's engine (experiments/columnar/: chdb in-process, the
default, owned by `make run`'s experiment-data process; or a ClickHouse server), or
`PostgresStore`, rows in the relational database (inserted in batches, aggregated per unit with
one GROUP BY), which every process may read (the test suite's, docker-compose's). The gateway
never talks to a store: it publishes on the log (NATS JetStream, or Redis Streams) that the
ingest drains into it (gateway/telemetry/exposures.py, docs/experiments.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from django.conf import settings
from django.db import connection
from django.db.models import Count, DecimalField, Q, Sum
from django.db.models.functions import Cast

from experiments import analysis, attribution
from experiments.models import Arm, Experiment, ExperimentState, Exposure, Feedback, FeedbackKind, FeedbackStatus

BATCH = 5000
VALUE_SUM = DecimalField(max_digits=1000, decimal_places=6)  # any float8 fits: 309 digits at most


@dataclass
class FeedbackResult:
    received: int = 0
    duplicates: int = 0
    attributed: int = 0
    late: int = 0
    unknown: int = 0
    refused: int = 0
    by_status: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "received": self.received,
            "duplicates": self.duplicates,
            "attributed": self.attributed,
            "late": self.late,
            "unknown": self.unknown,
            "refused": self.refused,
        }


class ExposureStore:  # the interface
    def write_exposures(self, rows: list[dict]) -> int:
        raise NotImplementedError

    def write_feedback(self, *, team, endpoint_name: str, experiments, events: list[dict]) -> FeedbackResult:
        raise NotImplementedError

    def arm_sums(self, experiment: Experiment) -> tuple[dict, dict, dict]:
        raise NotImplementedError

    def arm_sums_many(self, experiments) -> dict:
        """{experiment pk: arm_sums(experiment)}: a store that can answers for all in one pass."""
        return {x.pk: self.arm_sums(x) for x in experiments}

    def write_captures(self, rows: list[dict]) -> int:
        """Captured requests (training data); a store without a captures table keeps none."""
        return 0


class PostgresStore(ExposureStore):
    def write_exposures(self, rows: list[dict]) -> int:
        """rows: request_id, experiment (id), arm (id), unit_key, time, score. Replays are ignored."""
        objs = [
            Exposure(
                request_id=r["request_id"],
                experiment_id=r["experiment"],
                arm_id=r["arm"],
                unit_key=r["unit_key"],
                time=r["time"],
                score=r.get("score"),
            )
            for r in rows
        ]
        Exposure.objects.bulk_create(objs, batch_size=BATCH, ignore_conflicts=True)
        return len(objs)

    def write_feedback(self, *, team, endpoint_name: str, experiments, events: list[dict]) -> FeedbackResult:
        """Validated events (experiments.feedback.parse_batch) of one team, in one statement.

        `experiments` are the experiments the events may belong to (the endpoint's). An
        event is attributed to the exposure with its request id in one of them (or the
        unit's latest exposure at or before the event, in a running one) when it comes
        within the experiment's attribution window after it; later: `late`; no such
        exposure, or dated before it: `unknown`. An event id the team already sent is a
        duplicate (ids are the team's own: another team's ids never collide with them).

        An event that cited an exposure token (`token_experiment`: the experiment that signed
        it, resolved by experiments.services.feedback.tokens_resolve) matches only that
        experiment's exposure, and is `refused` (counted, never attributed) when it carries
        that exposure past what one exposure allows (feedback_rules.per_exposure, counting
        what earlier batches carried) or when `refused` is set (the experiment ended)."""
        result = FeedbackResult(received=len(events))
        if not events:
            return result
        exp_ids = [x.pk for x in experiments]
        unit_exp_ids = [x.pk for x in experiments if x.state == ExperimentState.RUNNING] or exp_ids
        if connection.vendor == "postgresql":
            counts = attribution.write_feedback_sql(team.pk, endpoint_name, exp_ids, unit_exp_ids, events)
        else:
            counts = attribution.write_feedback_orm(team, endpoint_name, experiments, unit_exp_ids, events)
        for status in FeedbackStatus:
            setattr(result, status.value, counts.get(status.value, 0))
        result.duplicates = result.received - sum(counts.values())
        return result

    def arm_sums(self, experiment: Experiment):
        """Per arm: the per-unit sufficient statistics of (exposures, clicks); extras
        (conversions, value); and the experiment's feedback counts by status. Four grouped
        queries per experiment, whatever its number of arms (the tick runs it for every
        running experiment)."""
        arm_ids = list(Arm.objects.filter(experiment=experiment).values_list("pk", flat=True))
        exposures: dict[int, dict[str, int]] = {pk: {} for pk in arm_ids}
        for arm_id, unit, n in (
            Exposure.objects.filter(experiment=experiment)
            .values("arm_id", "unit_key")
            .annotate(n=Count("id"))
            .values_list("arm_id", "unit_key", "n")
        ):
            exposures.setdefault(arm_id, {})[unit] = n
        clicks: dict[int, dict[str, int]] = {pk: {} for pk in arm_ids}
        attributed = Feedback.objects.filter(experiment=experiment, status=FeedbackStatus.ATTRIBUTED)
        for arm_id, unit, c in (
            attributed.filter(kind=FeedbackKind.CLICK)
            .values("arm_id", "exposure_unit")
            .annotate(c=Count("id"))
            .values_list("arm_id", "exposure_unit", "c")
        ):
            clicks.setdefault(arm_id, {})[unit] = c
        totals = {
            row["arm_id"]: row
            for row in attributed.values("arm_id").annotate(
                conv=Count("id", filter=Q(kind=FeedbackKind.CONVERSION)),
                # numeric (arbitrary precision) cannot overflow where a float8 SUM of extreme values does
                value=Sum(Cast("value", VALUE_SUM), filter=Q(kind=FeedbackKind.VALUE)),
            )
        }
        sums, extras = {}, {}
        for pk in arm_ids:
            units = exposures.get(pk, {})
            keys = list(units)
            n = np.array([units[k] for k in keys], dtype=float)
            c = np.array([min(clicks[pk].get(k, 0), units[k]) for k in keys], dtype=float)  # <= 1 click per exposure
            sums[pk] = analysis.sums_from_units(n, c) if keys else {k: 0.0 for k in analysis.SUMS}
            row = totals.get(pk, {})
            value = float(row.get("value") or 0)
            extras[pk] = {"conversions": row.get("conv") or 0, "value": value if math.isfinite(value) else None}
        counts = dict(
            Feedback.objects.filter(experiment=experiment)
            .values("status")
            .annotate(n=Count("id"))
            .values_list("status", "n")
        )
        if experiment.started_at is not None:  # unknown events name no experiment: count the endpoint's since the start
            counts[FeedbackStatus.UNKNOWN.value] = Feedback.objects.filter(
                endpoint_name=experiment.endpoint.name,
                status=FeedbackStatus.UNKNOWN,
                received_at__gte=experiment.started_at,
                **({"received_at__lte": experiment.ended_at} if experiment.ended_at else {}),
            ).count()
        return sums, extras, {s.value: counts.get(s.value, 0) for s in FeedbackStatus}


_STORES: dict[str, ExposureStore] = {}


def store_kind(url: str | None = None) -> str:
    """`postgres`, `chdb` (embedded: one owning process) or `clickhouse` (a server)."""
    url = settings.EXPERIMENT_STORE if url is None else url
    if url in ("", "postgres"):
        return "postgres"
    if url == "chdb" or url.startswith("chdb:"):
        return "chdb"
    if url.startswith(("clickhouse://", "clickhouses://", "http://", "https://")):
        return "clickhouse"
    raise ValueError(f"EXPERIMENT_STORE: {url!r} is none of postgres, chdb, chdb:<path>, clickhouse://host:port/db")


def columnar_store(url: str | None = None, db: str | None = None) -> ExposureStore:
    """The ClickHouse store of `url` (chdb or a server), one per process and database."""
    from experiments.columnar.connection import ChdbConnection, ServerConnection
    from experiments.columnar.store import ClickHouseStore

    url = settings.EXPERIMENT_STORE if url is None else url
    db = db or settings.EXPERIMENT_STORE_DB
    key = f"{url} {db}"
    if key not in _STORES:
        if store_kind(url) == "chdb":
            path = url.partition(":")[2] or str(settings.VAR_DIR / "experiment-store")
            conn = ChdbConnection(path)
        else:
            conn = ServerConnection(url)
        _STORES[key] = ClickHouseStore(conn, db)
    return _STORES[key]


def store_is_embedded() -> bool:
    """The store lives inside one process (chdb): others read results from the database."""
    return store_kind() == "chdb"


def store_readable_here() -> bool:
    """This process may read the store: a shared one (PostgreSQL, a ClickHouse server), or the
    embedded one when this process opened it (the experiment-data process; a test)."""
    if store_kind() != "chdb":
        return True
    from experiments.columnar.connection import chdb_open_here

    return chdb_open_here()


def default_store() -> ExposureStore:
    """The store EXPERIMENT_STORE names (chdb by default; docs/experiments.md)."""
    if store_kind() == "postgres":
        return PostgresStore()
    return columnar_store()
