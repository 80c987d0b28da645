"""Drive one build attempt: claim the lease, keep it alive with a heartbeat thread,
run the stages in a private work dir inside one child process with memory and CPU limits
(registry/factory/box.py), publish atomically (or fail with the reason).

Idempotent: the Build row decides what remains. A finished or cancelled build, or one
leased by a live worker, is left alone; a retried attempt re-runs the stages from
scratch in a fresh work dir (their outputs are not durable), and only the attempt that
still holds the lease can publish.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
import uuid
from pathlib import Path

from django.db import connection

from registry import storage
from registry.factory import (
    GPU_VARIANTS,
    GR_GPU_TARGETS,
    GR_TASK,
    StageStatus,
    box,
    conf,
    numerics,
    scratch,
    stages,
    stages_for,
)
from registry.models import ArtifactStatus, Build, VersionData
from registry.services import builds as build_services

log = logging.getLogger(__name__)


class Heartbeat(threading.Thread):
    """Renews the lease every third of its length; notices when it was lost."""

    def __init__(self, build_id: int, owner: str):
        super().__init__(name=f"build-{build_id}-heartbeat", daemon=True)
        self.build_id, self.owner = build_id, owner
        self.stopped = threading.Event()
        self.lost = threading.Event()

    def run(self):
        interval = max(0.2, float(conf.get("BUILD_LEASE_SECONDS")) / 3)
        try:
            while not self.stopped.wait(interval):
                try:
                    if not build_services.build_heartbeat(build_id=self.build_id, owner=self.owner):
                        self.lost.set()
                        return
                except Exception:  # a database blip: try again next tick, the lease has slack
                    log.exception("heartbeat of build %s failed", self.build_id)
        finally:
            connection.close()

    def stop(self):
        self.stopped.set()
        self.join(5)


def _context(build: Build, work_dir: Path) -> dict:
    """The BuildContext's fields (the context itself is made in the build's child process)."""
    version = build.version
    # The version's data (registry/services/version_data.py); the reference model's
    # training command also leaves a validation set in its tags.
    stored = {row.kind: row.path for row in VersionData.objects.filter(version=version)}
    if "validation" not in stored and version.tags.get("validation_set"):
        stored["validation"] = version.tags["validation_set"]
    paths = {}
    for kind, rel in stored.items():
        try:
            paths[kind] = storage.absolute(rel)
        except ValueError:
            continue
    gr = _gr_context(build) if version.model.task == GR_TASK else None
    return dict(
        gr=gr,
        work_dir=work_dir,
        version_id=version.pk,
        model_name=version.model.name,
        version=version.version,
        task=version.model.task,
        source=version.source,
        framework=version.framework,
        source_path=storage.absolute(version.file_path) if version.file_path else None,
        source_uri=version.source_uri,
        expected_signature=version.signature or {},
        targets=list(build.targets),
        validation_set=paths.get("validation"),
        input_example=paths.get("example"),
        tune=build.tune or None,
    )


def _gr_context(build: Build) -> dict:
    """A generative recommender's build: the catalog version it packages (the build's, else
    the one the version was built against)."""
    catalog_version = build.item_catalog_version or build.version.gr.catalog_version
    return {
        "catalog_dir": storage.absolute(catalog_version.path),
        "catalog": str(catalog_version),
        "catalog_version": catalog_version.version,
        "catalog_version_id": catalog_version.pk,
    }


def _settings_snapshot() -> dict:
    """What the stages read, as this process sees it (Django settings, environment,
    defaults), for the child to use as its settings."""
    from django.conf import settings

    snapshot = {name: conf.get(name) for name in conf.SETTINGS}
    snapshot.update({name: getattr(settings, name) for name in box.PASSED_SETTINGS if hasattr(settings, name)})
    return snapshot


def _box(build: Build, work_dir: Path) -> box.BoxedStages:
    return box.BoxedStages(
        _context(build, work_dir),
        settings_snapshot=_settings_snapshot(),
        memory_mb=int(conf.get("BUILD_MEMORY_LIMIT_MB")),
        cpu_s=int(conf.get("BUILD_CPU_LIMIT_S")),
        gpu=any(target in GPU_VARIANTS or target in GR_GPU_TARGETS for target in build.targets),
    )


def _artifact_rows(variants: dict[str, stages.VariantResult], catalog_version_id: int | None = None) -> list[dict]:
    rows = []
    for name, result in variants.items():
        row = {
            "item_catalog_version_id": catalog_version_id,
            "variant": name,
            "status": result.status if result.status in ArtifactStatus.values else ArtifactStatus.REJECTED,
            "status_reason": result.reason,
            "triton_model_name": "",
            "path": "",
            "sha256": "",
            "size_bytes": result.size_bytes,
            "validation": numerics.json_safe(result.validation),  # an undefined AUC is null, never NaN
            "benchmark": numerics.json_safe(result.benchmark),
        }
        if result.package_dir is not None:
            rel, sha = storage.put_dir(result.package_dir)
            row.update(path=rel, sha256=sha, triton_model_name=result.package_dir.name)
        rows.append(row)
    return rows


class _StageLog:
    """A running stage's log lines and progress: kept in the worker, written to the Build
    row when the stage ends, and (at most every PROGRESS_EVERY_S) while a long stage reports
    progress, so the build page shows the tune's trials as they are measured."""

    PROGRESS_EVERY_S = 1.0

    def __init__(self, build_id: int, owner: str):
        self.build_id, self.owner = build_id, owner
        self.stage, self.lines, self.written, self.last = "", [], 0, 0.0

    def start(self, stage: str) -> None:
        self.stage, self.lines, self.written, self.last = stage, [], 0, 0.0

    def append(self, line: str) -> None:
        self.lines.append(line)

    def rest(self) -> str:
        """The lines not written yet (and marks them written)."""
        fresh = self.lines[self.written :]
        self.written = len(self.lines)
        return "\n".join(fresh) + "\n" if fresh else ""

    def progress(self, share: float) -> None:
        now = time.monotonic()
        if now - self.last < self.PROGRESS_EVERY_S:
            return
        self.last = now
        try:
            build_services.build_stage_update(
                build_id=self.build_id,
                owner=self.owner,
                stage=self.stage,
                status=StageStatus.RUNNING,
                log=self.rest(),
                share=share,
            )
        except build_services.LeaseLost:  # the stage loop notices through the heartbeat
            pass


def _reap_earlier_attempts(build_id: int) -> None:
    """A new attempt first ends what no live attempt holds: the scratch servers and work
    dirs of the attempt it replaces (a killed worker's), and any other left over."""
    try:
        done = scratch.scratch_reap()
    except Exception:  # reaping leftovers never fails the build it runs before
        log.exception("build %s: reaping scratch servers failed", build_id)
        return
    if done["killed"] or done["removed"]:
        log.info(
            "build %s: reaped scratch tritonservers %s and work dirs %s", build_id, done["killed"], done["removed"]
        )


def run(build_id: int, *, owner: str) -> str:
    """Run one attempt of build `build_id` as `owner`; returns what happened."""
    build = build_services.build_claim(build_id=build_id, owner=owner)
    if build is None:
        return "nothing-to-do"
    heartbeat = Heartbeat(build_id, owner)
    heartbeat.start()
    _reap_earlier_attempts(build_id)
    work_dir = storage.tmp_dir() / scratch.work_dir_name(build_id, build.attempt, uuid.uuid4().hex[:8])
    work_dir.mkdir(parents=True)
    sink = _StageLog(build_id, owner)
    plan = stages_for(bool(build.tune), build.version.model.task)
    current = plan[0]
    boxed = None
    try:
        boxed = _box(build, work_dir)
        for current in plan:
            if heartbeat.lost.is_set():
                raise build_services.LeaseLost(f"lost the lease of build #{build_id}")
            build_services.build_stage_update(build_id=build_id, owner=owner, stage=current, status=StageStatus.RUNNING)
            started = time.monotonic()
            sink.start(current)
            try:
                boxed.run(current, sink.append, progress=sink.progress)
            except box.BoxFailed as exc:
                sink.append(f"FAILED: {exc}")
                build_services.build_stage_update(
                    build_id=build_id,
                    owner=owner,
                    stage=current,
                    status=StageStatus.FAILED,
                    log=sink.rest(),
                    duration_s=time.monotonic() - started,
                )
                build_services.build_fail(
                    build_id=build_id,
                    owner=owner,
                    reason=f"{current}: {exc}",
                    code=getattr(exc, "code", "build_failed"),
                )
                log.info(
                    "build #%s (%s v%s): stage %s failed: %s",
                    build_id,
                    build.version.model.name,
                    build.version.version,
                    current,
                    exc,
                )
                return "failed"
            build_services.build_stage_update(
                build_id=build_id,
                owner=owner,
                stage=current,
                status=StageStatus.SUCCEEDED,
                log=sink.rest(),
                duration_s=time.monotonic() - started,
            )
            log.info(
                "build #%s (%s v%s): stage %s done in %.1f s",
                build_id,
                build.version.model.name,
                build.version.version,
                current,
                time.monotonic() - started,
            )
        gr = boxed.ctx_kwargs.get("gr")
        rows = _artifact_rows(boxed.variants(), gr["catalog_version_id"] if gr else None)
        build_services.build_publish(build_id=build_id, owner=owner, artifacts=rows)
        return "published"
    except build_services.LeaseLost as exc:
        log.warning("build %s: %s; leaving it to the lease holder", build_id, exc)
        return "lease-lost"
    except Exception as exc:
        # Soft time limit or a bug: fail with the reason rather than retry forever.
        from celery.exceptions import SoftTimeLimitExceeded

        reason = (
            "time limit exceeded"
            if isinstance(exc, SoftTimeLimitExceeded)
            else f"internal error: {type(exc).__name__}: {str(exc)[:300]}"
        )
        log.exception("build %s failed in %s", build_id, current)
        try:
            sink.append(reason)
            build_services.build_stage_update(
                build_id=build_id, owner=owner, stage=current, status=StageStatus.FAILED, log=sink.rest()
            )
            build_services.build_fail(
                build_id=build_id, owner=owner, reason=f"{current}: {reason}", code="internal_error"
            )
        except build_services.LeaseLost:
            pass
        return "failed"
    finally:
        if boxed is not None:
            boxed.close()
        heartbeat.stop()
        shutil.rmtree(work_dir, ignore_errors=True)
