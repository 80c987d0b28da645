"""Writes of the artifact factory: start, cancel, claim (lease), heartbeat, stage
progress, fail, publish, reclaim. Each change and its audit Event share a transaction.

Fencing: a worker owns a running build through `lease_owner`; every write a worker
makes re-checks (under select_for_update) that it still holds the lease, so a worker
whose lease expired and was reclaimed can never publish or overwrite progress.

Why this is one long module: a build's whole life (start, claim, stage progress, fail,
publish, reclaim) shares one lease, one fencing check and one status helper, read in order.
"""

from __future__ import annotations

import datetime as dt

from django.db import IntegrityError, transaction
from django.utils import timezone

from kernel.errors import Conflict, InvalidInput, scrub_paths
from registry import factory
from registry.factory import (
    DEFAULT_TARGETS,
    GR_DEFAULT_TARGETS,
    GR_TARGETS,
    GR_TASK,
    VARIANTS,
    conf,
    queue_for,
    stage_rows,
    stage_weight,
)
from registry.factory.tune import request as tune_request
from registry.lock_objects import build_for_update
from registry.models import Artifact, ArtifactStatus, Build, BuildStatus, EventAction, ModelVersion, Role, VersionStatus
from registry.services.catalog import version_set_status
from registry.services.events import event_record
from registry.services.gr_versions import gr_build_catalog
from registry.services.teams import require_role
from registry.tasks import build_run


class LeaseLost(Exception):
    """This worker no longer owns the build (lease expired and reclaimed, or cancelled)."""


def _team(build: Build):
    return build.version.model.team


def _set_status(build: Build, status: str, *, actor=None, reason: str = "", data: dict | None = None) -> None:
    old = build.status
    build.status = status
    event_record(
        actor=actor,
        obj=build,
        team=_team(build),
        action=EventAction.STATUS_CHANGED,
        from_state=old,
        to_state=status,
        reason=reason,
        data=data,
    )


def _settle_version(version: ModelVersion, *, reason: str, otherwise: str = VersionStatus.FAILED) -> None:
    """READY when any servable artifact exists, else `otherwise` (archived versions stay archived)."""
    if version.status == VersionStatus.ARCHIVED:
        return
    servable = Artifact.objects.filter(version=version, status=ArtifactStatus.SERVABLE).exists()
    version_set_status(user=None, version=version, status=VersionStatus.READY if servable else otherwise, reason=reason)


# --- user actions ------------------------------------------------------------------------------
def _clean_targets(targets, *, generative: bool = False) -> list[str]:
    """The build's targets: a generative recommender's version takes GR targets only, any
    other version the ONNX variants."""
    allowed = GR_TARGETS if generative else VARIANTS
    if targets in (None, []):
        return list(GR_DEFAULT_TARGETS if generative else DEFAULT_TARGETS)
    if not isinstance(targets, (list, tuple)) or not all(isinstance(t, str) for t in targets):
        raise InvalidInput("targets: give a list of variant names.", field="targets")
    unknown = [t for t in targets if t not in allowed]
    if unknown:
        kind = "a generative recommender's version" if generative else "this version"
        raise InvalidInput(
            f"targets: {kind} cannot be built as {', '.join(unknown)}; choose from {', '.join(allowed)}.",
            code="unknown_target",
            field="targets",
        )
    return list(dict.fromkeys(targets))


def build_start(
    *, user, version: ModelVersion, targets=None, idempotency_key: str = "", tune=None, catalog_version=None
) -> tuple[Build, bool]:
    """Queue a build of `version`; returns (build, created).

    Guarantees: the same non-empty Idempotency-Key for a version returns the same build
    (409 when it names other targets or another tune); the task is sent only after the row
    commits, to build-gpu when a GPU target is asked for, else build-cpu. `tune` (checked
    by registry/factory/tune/request.py, 400 naming the field) adds the tune stage. A
    generative recommender's version builds GR targets on its own catalog version, or on
    `catalog_version` (a number of the same catalog): new items served without retraining.
    """
    require_role(user=user, team=version.model.team, role=Role.DEVELOPER)
    generative = version.model.task == GR_TASK
    targets = _clean_targets(targets, generative=generative)
    if generative and tune:
        raise InvalidInput("tune: a generative recommender's build is not tuned.", code="invalid_tune", field="tune")
    catalog = gr_build_catalog(version, catalog_version, generative=generative)
    try:
        tune = tune_request.clean(tune, targets=targets)
    except tune_request.TuneRequestError as exc:
        raise InvalidInput(str(exc), code="invalid_tune", field=exc.field) from None
    idempotency_key = (idempotency_key or "").strip()
    if len(idempotency_key) > 128:
        raise InvalidInput("Idempotency-Key: at most 128 characters.", field="Idempotency-Key")
    if version.status == VersionStatus.ARCHIVED:
        raise Conflict(f"{version} is archived; builds need an active version.", code="version_archived")

    def existing() -> Build | None:
        build = (
            Build.objects.filter(version=version, idempotency_key=idempotency_key).first() if idempotency_key else None
        )
        if build is not None and (
            build.targets != targets
            or build.tune != tune
            or build.item_catalog_version_id != (catalog.pk if catalog else None)
        ):
            tune_text = f" and tune {build.tune}" if build.tune else ""
            raise Conflict(
                f"Idempotency-Key {idempotency_key!r} was used for build #{build.pk} with targets {build.targets}{tune_text}.",
                code="idempotency_key_reused",
            )
        return build

    if (build := existing()) is not None:
        return build, False
    try:
        with transaction.atomic():
            build = Build.objects.create(
                version=version,
                targets=targets,
                tune=tune,
                idempotency_key=idempotency_key,
                created_by=user,
                lease_expires_at=_redispatch_at(),
                max_attempts=int(conf.get("BUILD_MAX_ATTEMPTS")),
                stages=stage_rows(tune, version.model.task),
                item_catalog_version=catalog,
            )
            event_record(
                actor=user,
                obj=build,
                team=version.model.team,
                action=EventAction.CREATED,
                to_state=BuildStatus.QUEUED,
                data={"targets": targets, "queue": queue_for(targets), **({"tune": tune} if tune else {})},
            )
            transaction.on_commit(lambda: dispatch(build.pk, targets))
    except IntegrityError:  # a concurrent request with the same key won the race
        build = existing()
        if build is None:
            raise
        return build, False
    return build, True


def _redispatch_at():
    # While queued, lease_expires_at is when the reclaim task sends the build again in
    # case its message was lost (a duplicate delivery is harmless: claims are fenced).
    return timezone.now() + dt.timedelta(seconds=float(conf.get("BUILD_QUEUED_REDISPATCH_S")))


def dispatch(build_id: int, targets: list[str]) -> None:
    build_run.apply_async((build_id,), queue=queue_for(targets))


def build_cancel(*, user, build: Build, reason: str = "") -> Build:
    require_role(user=user, team=build.version.model.team, role=Role.DEVELOPER)
    with transaction.atomic():
        locked = build_for_update(build.pk)
        if locked.status in BuildStatus.terminal():
            raise Conflict(f"Build #{locked.pk} is already {locked.status}.", code="build_finished")
        locked.lease_owner, locked.lease_expires_at, locked.finished_at = "", None, timezone.now()
        locked.error = reason or f"cancelled by {user}"
        _set_status(locked, BuildStatus.CANCELLED, actor=user, reason=locked.error)
        locked.save(update_fields=["status", "lease_owner", "lease_expires_at", "finished_at", "error"])
        _settle_version(locked.version, reason=f"build #{locked.pk} cancelled", otherwise=VersionStatus.REGISTERED)
    return locked


# --- worker side -------------------------------------------------------------------------------
def build_claim(*, build_id: int, owner: str) -> Build | None:
    """Take the lease of a build that needs work; None when there is nothing to do
    (finished, cancelled, or leased by a live worker). Past max_attempts: failed."""
    now = timezone.now()
    with transaction.atomic():
        try:
            build = build_for_update(build_id)
        except Build.DoesNotExist:
            return None
        if build.status in BuildStatus.terminal():
            return None
        if (
            build.status == BuildStatus.RUNNING
            and build.lease_expires_at
            and build.lease_expires_at > now
            and build.lease_owner != owner
        ):
            return None
        if build.attempt >= build.max_attempts:
            build.error = f"gave up after {build.attempt} attempt(s): the worker was lost or timed out each time"
            build.finished_at, build.lease_owner, build.lease_expires_at = now, "", None
            _set_status(build, BuildStatus.FAILED, reason=build.error, data={"code": "max_attempts"})
            build.save(update_fields=["status", "error", "finished_at", "lease_owner", "lease_expires_at"])
            _settle_version(build.version, reason=f"build #{build.pk} failed")
            return None
        previous = build.attempt
        build.attempt += 1
        build.lease_owner = owner
        build.lease_expires_at = now + dt.timedelta(seconds=float(conf.get("BUILD_LEASE_SECONDS")))
        build.started_at = build.started_at or now
        build.progress = 0
        note = f"attempt {build.attempt} of {build.max_attempts}" + (
            " (the previous attempt's worker was lost)" if previous else ""
        )
        build.stages = stage_rows(build.tune, build.version.model.task)
        build.stages[0]["log"] = note + "\n"
        _set_status(build, BuildStatus.RUNNING, reason=note, data={"owner": owner, "attempt": build.attempt})
        build.save(
            update_fields=["attempt", "lease_owner", "lease_expires_at", "started_at", "progress", "stages", "status"]
        )
        if build.version.status not in (VersionStatus.BUILDING, VersionStatus.ARCHIVED):
            version_set_status(
                user=None, version=build.version, status=VersionStatus.BUILDING, reason=f"build #{build.pk} running"
            )
    return build


def _fenced(build_id: int, owner: str) -> Build:
    build = build_for_update(build_id)
    if build.status != BuildStatus.RUNNING or build.lease_owner != owner:
        raise LeaseLost(f"build #{build_id} is {build.status}, leased by {build.lease_owner or 'nobody'}")
    return build


def build_heartbeat(*, build_id: int, owner: str) -> bool:
    """Extend the lease; False when this worker no longer holds it."""
    expires = timezone.now() + dt.timedelta(seconds=float(conf.get("BUILD_LEASE_SECONDS")))
    return bool(
        Build.objects.filter(pk=build_id, status=BuildStatus.RUNNING, lease_owner=owner).update(
            lease_expires_at=expires
        )
    )


def build_stage_update(
    *,
    build_id: int,
    owner: str,
    stage: str,
    status: str,
    log: str = "",
    duration_s: float | None = None,
    share: float | None = None,
) -> None:
    """Record a stage's status (and log lines, appended); `share` (0-1) is how far a running
    stage is, for the progress bar of a long one (the tune)."""
    with transaction.atomic():
        build = _fenced(build_id, owner)
        stages = build.stages
        entry = next(s for s in stages if s["name"] == stage)
        if status == factory.StageStatus.RUNNING and not entry.get("started_at"):
            entry["started_at"] = timezone.now().isoformat()
        entry["status"] = str(factory.StageStatus(status))  # an unknown status is a ValueError, never stored
        if log:
            entry["log"] = (entry.get("log") or "") + scrub_paths(log)
        if duration_s is not None:
            entry["duration_s"] = round(duration_s, 3)
        tuned, task = bool(build.tune), build.version.model.task
        done = sum(stage_weight(s["name"], tuned, task) for s in stages if s["status"] in factory.STAGE_DONE)
        if status == factory.StageStatus.RUNNING and share is not None:
            done += stage_weight(stage, tuned, task) * max(0.0, min(1.0, float(share)))
        build.stages = stages
        build.progress = min(100, int(done + 1e-6))
        build.lease_expires_at = timezone.now() + dt.timedelta(seconds=float(conf.get("BUILD_LEASE_SECONDS")))
        build.save(update_fields=["stages", "progress", "lease_expires_at"])


def build_fail(*, build_id: int, owner: str, reason: str, code: str = "build_failed") -> None:
    """Fail a build for a reason in its input (no retry); nothing is published."""
    reason = scrub_paths(reason)
    with transaction.atomic():
        build = _fenced(build_id, owner)
        build.error, build.finished_at, build.lease_owner, build.lease_expires_at = reason, timezone.now(), "", None
        _set_status(build, BuildStatus.FAILED, reason=reason, data={"code": code})
        build.save(update_fields=["status", "error", "finished_at", "lease_owner", "lease_expires_at"])
        _settle_version(build.version, reason=f"build #{build.pk} failed: {reason}"[:500])


def build_publish(*, build_id: int, owner: str, artifacts: list[dict], summary: dict | None = None) -> Build:
    """Record the build's artifacts and mark it succeeded, in one transaction.

    `artifacts`: dicts with variant, status, status_reason, triton_model_name, path,
    sha256, size_bytes, validation, benchmark (paths already published with put_dir).
    Exactly one set per build: rows are unique per (build, variant) and only the lease
    holder reaches this point.
    """
    with transaction.atomic():
        build = _fenced(build_id, owner)
        for item in artifacts:
            Artifact.objects.update_or_create(
                build=build, variant=item["variant"], defaults={**item, "version": build.version}
            )
        build.finished_at, build.lease_owner, build.lease_expires_at, build.progress = timezone.now(), "", None, 100
        servable = [a["variant"] for a in artifacts if a["status"] == ArtifactStatus.SERVABLE]
        build.error = (
            ""
            if servable
            else "no variant passed validation: "
            + "; ".join(f"{a['variant']}: {a['status_reason']}" for a in artifacts if a["status_reason"])
        )
        status = BuildStatus.SUCCEEDED if servable else BuildStatus.FAILED
        _set_status(
            build,
            status,
            reason=f"servable: {', '.join(servable) or 'none'}",
            data={"artifacts": {a["variant"]: a["status"] for a in artifacts}, **(summary or {})},
        )
        build.save(update_fields=["status", "finished_at", "lease_owner", "lease_expires_at", "progress", "error"])
        _settle_version(build.version, reason=f"build #{build.pk} {status}")
    return build


def builds_reclaim(*, limit: int | None = None) -> list[int]:
    """Requeue running builds whose lease expired (their worker died) and resend queued
    builds nobody claimed within BUILD_QUEUED_REDISPATCH_S; a bounded batch per call.

    The requeued task claims the build again (attempt + 1) or fails it past max_attempts.
    """
    now = timezone.now()
    limit = limit or int(conf.get("BUILD_RECLAIM_BATCH"))
    requeued = []
    ids = list(
        Build.objects.filter(status__in=[BuildStatus.RUNNING, BuildStatus.QUEUED], lease_expires_at__lt=now)
        .order_by("lease_expires_at")
        .values_list("pk", flat=True)[:limit]
    )
    for build_id in ids:
        with transaction.atomic():
            build = build_for_update(build_id)
            if (
                build.status not in (BuildStatus.RUNNING, BuildStatus.QUEUED)
                or not build.lease_expires_at
                or build.lease_expires_at >= now
            ):
                continue
            if build.status == BuildStatus.RUNNING:
                lost = build.lease_owner
                build.lease_owner = ""
                reason = f"lease of {lost or 'a worker'} expired at attempt {build.attempt}; requeued"
                _set_status(build, BuildStatus.QUEUED, reason=reason, data={"lost_owner": lost})
            else:
                event_record(
                    actor=None,
                    obj=build,
                    team=_team(build),
                    action=EventAction.REDISPATCHED,
                    from_state=build.status,
                    to_state=build.status,
                    reason="queued and unclaimed too long; sent again",
                )
            build.lease_expires_at = _redispatch_at()
            build.save(update_fields=["status", "lease_owner", "lease_expires_at"])
            transaction.on_commit(lambda b=build: dispatch(b.pk, b.targets))
        requeued.append(build_id)
    return requeued
