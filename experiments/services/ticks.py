"""The analysis tick over every running experiment (Celery beat's `experiments.analyze`).

Each experiment is analysed on its own (services/online.py `experiment_analyze`): one that
fails keeps the reason on itself (`analysis_error`, on its page) and raises an alert, and
the others go on. Longest-unanalysed first, so a tick that runs out of its budget leaves the
rest first in line for the next; `shipping` experiments then follow their rollouts.
"""

from __future__ import annotations

import logging
import time

from django.db.models import F
from django.utils import timezone

from experiments.models import Experiment, ExperimentState
from experiments.services import alerts
from experiments.services.online import experiment_analyze, experiments_ship_follow

log = logging.getLogger(__name__)
S = ExperimentState

ANALYZED = (S.RUNNING,)


def experiments_analyze_all(*, budget_s: float = 40.0, store=None) -> dict:
    """One analysis tick over every running experiment, each on its own: one that fails is
    recorded on itself (`analysis_error`, shown on its page) and alerted, and the others go
    on. Longest-unanalysed first, so when a tick runs out of `budget_s` the ones it did not
    reach are the first of the next; `shipping` experiments follow their rollouts."""
    from celery.exceptions import SoftTimeLimitExceeded  # the task's soft limit ends the tick, not the experiment

    t0 = time.monotonic()
    ids = list(
        Experiment.objects.filter(state__in=ANALYZED)
        .order_by(F("analyzed_at").asc(nulls_first=True), "pk")
        .values_list("pk", flat=True)
    )
    store = _prefetched(store, ids)  # one statistics pass over every running experiment (a columnar store)
    done = failed = 0
    for pk in ids:
        if time.monotonic() - t0 > budget_s:
            break
        try:
            experiment_analyze(experiment_id=pk, store=store)
            done += 1
        except SoftTimeLimitExceeded:
            raise
        except Exception as exc:  # noqa: BLE001 - one experiment's failure is its own, never the tick's
            failed += 1
            _analysis_failed(pk, f"{type(exc).__name__}: {exc}")
    shipped = experiments_ship_follow()
    return {
        "running": len(ids),
        "analysed": done,
        "failed": failed,
        "left": len(ids) - done - failed,
        "ship_moved": shipped,
    }


class _Prefetched:
    """The store's answers for every running experiment, read in one pass at the tick's start."""

    def __init__(self, store, sums: dict):
        self.store, self.sums = store, sums

    def arm_sums(self, experiment):
        got = self.sums.get(experiment.pk)
        return got if got is not None else self.store.arm_sums(experiment)


def _prefetched(store, ids: list[int]):
    from experiments.store import PostgresStore, default_store

    store = store or default_store()
    if isinstance(store, PostgresStore) or not ids:  # its per-experiment queries are indexed; no pass to share
        return store
    experiments = list(Experiment.objects.filter(pk__in=ids).select_related("endpoint"))
    return _Prefetched(store, store.arm_sums_many(experiments))


def _analysis_failed(pk: int, reason: str) -> None:
    log.warning("analysis of experiment %s failed: %s", pk, reason)
    Experiment.objects.filter(pk=pk).update(analysis_error=reason[:4000], analyzed_at=timezone.now())
    experiment = Experiment.objects.select_related("endpoint__team").get(pk=pk)
    try:
        alerts.analysis_failed_alert(experiment=experiment, reason=reason)
    except Exception:  # noqa: BLE001 - the alert store failing must not stop the tick
        log.exception("could not alert the failed analysis of experiment %s", pk)
