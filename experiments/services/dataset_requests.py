"""Dataset builds from every door (API, CLI, dashboard, manage.py build_dataset).

A build reads the columnar store. A process that may read it (a ClickHouse server; the
embedded chdb store in the process that opened it) builds at once. The web process never opens
the embedded store (docs/experiments.md: one process owns it), so there a door checks what needs
no store (role, experiment, window), queues a DatasetBuildRequest, and waits for the
experiment-data process (`manage.py run_experiment_data`), which runs queued builds between its
ingest runs and writes the outcome on the row. The door then deletes the row: a refused build
leaves nothing, its error is the door's 4xx; a built one is its Dataset. Every build holds a
row while it runs, so a team's builds are bounded across processes (BUILDS_PER_TEAM).
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from experiments.models import Dataset, DatasetBuildRequest, DatasetRequestStatus
from experiments.services.datasets import dataset_build, dataset_check
from experiments.store import store_readable_here
from kernel.errors import PlatformError

log = logging.getLogger(__name__)
WAIT_S = 45.0  # a door waits this long for the owner to start a build
RUNNING_WAIT_S = 60.0  # ... and this long more for a started one (inside the web server's 120 s)
POLL_S = 0.25
BUILDS_PER_RUN = 1  # queued builds the owner runs between two ingest runs (each bounded by MAX_ROWS)
BUILDS_PER_TEAM = 2  # builds one team may have queued or running at once (429 past it)
FORGOTTEN_AFTER = timedelta(hours=1)  # rows whose door went away (a killed request)


def dataset_request(*, user, endpoint, start, end, name: str, experiment=None, wait_s: float = WAIT_S) -> Dataset:
    """The built Dataset, or the build's error raised as it would be raised in the owner."""
    dataset_check(user=user, endpoint=endpoint, start=start, end=end, experiment=experiment)
    here = store_readable_here()
    request = DatasetBuildRequest.objects.create(
        team=endpoint.team,
        endpoint=endpoint,
        experiment=experiment,
        name=name,
        window_start=start,
        window_end=end,
        created_by=user,
        status=DatasetRequestStatus.RUNNING if here else DatasetRequestStatus.QUEUED,
    )
    try:
        _bound(request)
        if here:
            return dataset_build(user=user, endpoint=endpoint, start=start, end=end, name=name, experiment=experiment)
        return _outcome(_await(request, wait_s))
    finally:
        DatasetBuildRequest.objects.filter(pk=request.pk).delete()


def _bound(request: DatasetBuildRequest) -> None:
    """A team has at most BUILDS_PER_TEAM builds queued or running, in every process together
    (counted after this one is in: two at once may both be refused, never both let through)."""
    active = DatasetBuildRequest.objects.filter(
        team_id=request.team_id, status__in=(DatasetRequestStatus.QUEUED, DatasetRequestStatus.RUNNING)
    ).count()
    if active > BUILDS_PER_TEAM:
        raise PlatformError(
            f"name: your team has {BUILDS_PER_TEAM} dataset builds going already; try again when one has finished.",
            field="name",
            code="dataset_builds_busy",
            status=429,
        )


def _await(request: DatasetBuildRequest, wait_s: float) -> DatasetBuildRequest:
    deadline = time.monotonic() + wait_s
    while True:
        request.refresh_from_db()
        if request.status in (DatasetRequestStatus.SUCCEEDED, DatasetRequestStatus.FAILED):
            return request
        if time.monotonic() >= deadline + RUNNING_WAIT_S:  # started, not done: it will be listed when it is
            raise PlatformError(
                f"name: the build of {request.name} is still running in the experiment-data process; its version "
                f"will be listed when it is done (GET /api/v1/datasets/?name={request.name}).",
                field="name",
                code="dataset_build_running",
                status=503,
            )
        if time.monotonic() >= deadline and request.status == DatasetRequestStatus.QUEUED:
            taken = DatasetBuildRequest.objects.filter(pk=request.pk, status=DatasetRequestStatus.QUEUED).update(
                status=DatasetRequestStatus.CANCELLED
            )
            if taken:  # the owner never started it: nothing was written
                raise PlatformError(
                    f"store: the experiment-data process (manage.py run_experiment_data), which owns the embedded "
                    f"store, did not take the build in {wait_s:.0f} s; is it running?",
                    field="store",
                    code="store_owner_unavailable",
                    status=503,
                )
        time.sleep(POLL_S)


def _outcome(request: DatasetBuildRequest) -> Dataset:
    if request.status == DatasetRequestStatus.SUCCEEDED:
        return request.dataset
    error = request.error or {}
    raise PlatformError(
        error.get("detail") or "the build failed",
        code=error.get("code") or "dataset_build_failed",
        field=error.get("field"),
        status=int(error.get("status") or 400),
    )


def dataset_requests_run(*, store, limit: int = BUILDS_PER_RUN) -> int:
    """The owner's side: run up to `limit` queued builds against `store`; how many ran."""
    DatasetBuildRequest.objects.filter(created_at__lt=timezone.now() - FORGOTTEN_AFTER).delete()
    ran = 0
    for pk in DatasetBuildRequest.objects.filter(status=DatasetRequestStatus.QUEUED).values_list("pk", flat=True)[
        :limit
    ]:
        with transaction.atomic():
            claimed = DatasetBuildRequest.objects.filter(pk=pk, status=DatasetRequestStatus.QUEUED).update(
                status=DatasetRequestStatus.RUNNING
            )
        if not claimed:  # cancelled by its door meanwhile
            continue
        request = DatasetBuildRequest.objects.select_related("endpoint__team", "experiment", "created_by").get(pk=pk)
        _run_one(request, store)
        ran += 1
    return ran


def _run_one(request: DatasetBuildRequest, store) -> None:
    try:
        dataset = dataset_build(
            user=request.created_by,
            endpoint=request.endpoint,
            experiment=request.experiment,
            start=request.window_start,
            end=request.window_end,
            name=request.name,
            store=store,
        )
    except PlatformError as exc:
        request.status, request.error = (
            DatasetRequestStatus.FAILED,
            {
                "detail": exc.detail,
                "code": exc.code,
                "field": exc.field,
                "status": exc.status,
            },
        )
    except Exception as exc:  # the store or a disk: the door says so, the owner carries on
        log.exception("dataset build %s failed", request.pk)
        request.status, request.error = (
            DatasetRequestStatus.FAILED,
            {
                "detail": f"the build failed in the experiment-data process: {type(exc).__name__}",
                "code": "dataset_build_failed",
                "field": None,
                "status": 503,
            },
        )
    else:
        request.status, request.dataset = DatasetRequestStatus.SUCCEEDED, dataset
    # an update, not a save: the door may have given up and deleted the row meanwhile
    DatasetBuildRequest.objects.filter(pk=request.pk).update(
        status=request.status, error=request.error, dataset=request.dataset
    )
