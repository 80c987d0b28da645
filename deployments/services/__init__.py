"""Every write to deployments. Services take keyword arguments and the acting user, check
the user's role, and write their audit Event in the same transaction as the change.

Serving pools come in two halves:
- requests (pool_create, pool_update, pool_scale, pool_delete, pool_load_request,
  pool_unload_request): validate, record the wanted state, dispatch a Celery task after
  commit. Nothing is half-written: a bad request changes nothing.
- driver work (pool_reconcile, pool_model_load, pool_model_unload, pool_teardown): run by
  Celery tasks and by the `run_pools` supervisor; idempotent, the rows say what remains.
  No row lock is held while a driver talks to processes or pods.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from datetime import datetime
from datetime import timezone as dt_timezone
from decimal import Decimal, InvalidOperation
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from config.errors import Conflict, InvalidInput, NotFound
from deployments import triton_config
from deployments.drivers import DrainTimeout, DriverError, LoadFailed, ModelDir, driver_for
from deployments.lock_objects import pool_for_update, pool_model_for_update
from deployments.models import (
    DeviceKind,
    PoolDriver,
    PoolModel,
    PoolModelState,
    PoolReplica,
    PoolStatus,
    ReplicaStatus,
    ServingPool,
)
from deployments.tritonserver import TritonError, TritonNotAvailable, find_binary
from registry import storage
from registry.models import Artifact, ArtifactStatus, Role
from registry.services import event_record, require_role

# === serving pools ===========================================================================
POOL_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,46}[a-z0-9])?$")  # a DNS label: also a Kubernetes name
MAX_REPLICAS = 64
LOCAL_MAX_REPLICAS = 8  # processes on one machine
REPOSITORY_SCHEMES = ("s3://", "gs://", "as://", "pvc://")
RETIRE_AFTER_S = 3.0  # a replica leaving the pool keeps running this long out of the route table
UPDATABLE_FIELDS = ("cost_per_replica_hour", "max_queue_size", "queue_timeout_ms", "resources", "image", "min_replicas", "max_replicas")


def pools_root() -> Path:
    """Where local pools keep their repositories, replica state and logs."""
    configured = os.environ.get("POOLS_DIR") or getattr(settings, "POOLS_DIR", None)
    return Path(configured or Path(settings.VAR_DIR) / "pools").resolve()


def _dispatch(task_name: str, *args, **kwargs) -> None:
    """Send a deployments task after the current transaction commits."""
    from deployments import tasks

    task = getattr(tasks, task_name)
    transaction.on_commit(lambda: task.delay(*args, **kwargs))


def _int_field(value, field: str, *, low: int, high: int) -> int:
    if isinstance(value, bool):
        value = None
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise InvalidInput(f"{field}: {value!r} is not a whole number.", field=field) from None
    if number < low or number > high:
        raise InvalidInput(f"{field}: {number} is out of range; give {low}..{high}.", code=f"bad_{field}", field=field)
    return number


def _check_resources(resources) -> dict:
    if resources in (None, ""):
        return {}
    if not isinstance(resources, dict) or not all(isinstance(k, str) and isinstance(v, str | int) for k, v in resources.items()):
        raise InvalidInput('resources: give an object of Kubernetes quantities, e.g. {"cpu": "2", "memory": "4Gi"}.', field="resources")
    unknown = set(resources) - {"cpu", "memory", "ephemeral-storage"}
    if unknown:
        raise InvalidInput(f"resources: unknown keys {sorted(unknown)}; use cpu, memory, ephemeral-storage.", field="resources")
    return {k: str(v) for k, v in resources.items()}


def _check_cost(value) -> Decimal:
    try:
        cost = Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise InvalidInput(f"cost_per_replica_hour: {value!r} is not a number.", field="cost_per_replica_hour") from None
    if cost < 0 or not cost.is_finite():
        raise InvalidInput("cost_per_replica_hour: must be 0 or more.", field="cost_per_replica_hour")
    return cost


def pool_create(
    *,
    user,
    name: str,
    team,
    driver: str = PoolDriver.LOCAL,
    replicas: int = 1,
    device_kind: str = DeviceKind.CPU,
    gpus_per_replica: int | None = None,
    resources: dict | None = None,
    model_repository: str = "",
    namespace: str = "modelplane",
    image: str = "",
    min_replicas: int | None = None,
    max_replicas: int | None = None,
    max_queue_size: int = 256,
    queue_timeout_ms: int = 1000,
    cost_per_replica_hour=0,
) -> ServingPool:
    """Record a new pool and start its replicas (a task after commit).

    Guarantees: the name is a free DNS label; a local pool runs on CPU with the
    tritonserver binary present; a Kubernetes pool has a remote model repository."""
    if not POOL_NAME_RE.match(name or ""):
        raise InvalidInput("name: use 1-48 lower-case letters, digits or '-', starting and ending with a letter or digit.", field="name")
    if driver not in PoolDriver.values:
        raise InvalidInput(f"driver: unknown driver {driver!r}; one of {', '.join(PoolDriver.values)}.", field="driver")
    if device_kind not in DeviceKind.values:
        raise InvalidInput(f"device_kind: unknown device {device_kind!r}; one of {', '.join(DeviceKind.values)}.", field="device_kind")
    require_role(user=user, team=team, role=Role.DEPLOYER)
    limit = LOCAL_MAX_REPLICAS if driver == PoolDriver.LOCAL else MAX_REPLICAS
    replicas = _int_field(replicas, "replicas", low=0, high=limit)
    gpu = DeviceKind.is_gpu(device_kind)
    gpus = _int_field(gpus_per_replica if gpus_per_replica is not None else (1 if gpu else 0), "gpus_per_replica", low=0, high=16)
    if gpu and gpus == 0:
        raise InvalidInput(f"gpus_per_replica: a {device_kind} pool needs at least 1 GPU per replica.", field="gpus_per_replica")
    if not gpu and gpus:
        raise InvalidInput("gpus_per_replica: a cpu pool has no GPUs; set device_kind to a GPU type.", field="gpus_per_replica")
    min_r = _int_field(min_replicas if min_replicas is not None else min(replicas, 1) or 1, "min_replicas", low=1, high=limit)
    max_r = _int_field(max_replicas if max_replicas is not None else max(replicas, min_r, 4), "max_replicas", low=1, high=limit)
    if min_r > max_r:
        raise InvalidInput(f"min_replicas: {min_r} is above max_replicas {max_r}.", field="min_replicas")
    queue = _int_field(max_queue_size, "max_queue_size", low=1, high=1_000_000)
    queue_ms = _int_field(queue_timeout_ms, "queue_timeout_ms", low=1, high=600_000)
    cost = _check_cost(cost_per_replica_hour)
    resources = _check_resources(resources)
    if driver == PoolDriver.LOCAL:
        if gpu:
            raise InvalidInput("device_kind: local pools run on this machine's CPU; use the kubernetes driver for GPUs.", code="gpu_not_local", field="device_kind")
        if model_repository:
            raise InvalidInput("model_repository: a local pool keeps its repository under VAR_DIR; leave it empty.", field="model_repository")
        try:
            find_binary()
        except TritonNotAvailable as exc:
            raise InvalidInput(f"driver: {exc}", code="triton_unavailable", field="driver") from None
        model_repository = str(pools_root() / name / "models")
    elif not model_repository.startswith(REPOSITORY_SCHEMES):
        raise InvalidInput(
            f"model_repository: give an object-store URL or a volume claim ({', '.join(REPOSITORY_SCHEMES)}).",
            field="model_repository",
        )
    with transaction.atomic():
        if ServingPool.objects.filter(name=name).exists():
            raise Conflict(f"name: a serving pool named {name!r} already exists.", code="name_taken", field="name")
        pool = ServingPool.objects.create(
            name=name, team=team, driver=driver, replicas=replicas, device_kind=device_kind, gpus_per_replica=gpus,
            resources=resources, model_repository=model_repository, namespace=namespace or "modelplane",
            image=image or ServingPool._meta.get_field("image").default, min_replicas=min_r, max_replicas=max_r,
            max_queue_size=queue, queue_timeout_ms=queue_ms, cost_per_replica_hour=cost, created_by=user,
        )
        event_record(actor=user, obj=pool, action="created", to_state=pool.status, data={"driver": driver, "replicas": replicas})
        _dispatch("pool_reconcile_task", pool.pk)
    return pool


def pool_update(*, user, pool: ServingPool, **changes) -> ServingPool:
    """Change cost, queue limits, resources, image or autoscaling bounds."""
    require_role(user=user, team=pool.team, role=Role.DEPLOYER)
    unknown = set(changes) - set(UPDATABLE_FIELDS)
    if unknown:
        raise InvalidInput(f"{sorted(unknown)[0]}: cannot be changed here.", field=sorted(unknown)[0])
    limit = LOCAL_MAX_REPLICAS if pool.driver == PoolDriver.LOCAL else MAX_REPLICAS
    clean = {}
    for key, value in changes.items():
        if key == "cost_per_replica_hour":
            clean[key] = _check_cost(value)
        elif key == "resources":
            clean[key] = _check_resources(value)
        elif key == "image":
            clean[key] = str(value or "").strip() or pool.image
        elif key == "max_queue_size":
            clean[key] = _int_field(value, key, low=1, high=1_000_000)
        elif key == "queue_timeout_ms":
            clean[key] = _int_field(value, key, low=1, high=600_000)
        else:
            clean[key] = _int_field(value, key, low=1, high=limit)
    if clean.get("min_replicas", pool.min_replicas) > clean.get("max_replicas", pool.max_replicas):
        raise InvalidInput("min_replicas: above max_replicas.", field="min_replicas")
    with transaction.atomic():
        locked = pool_for_update(pool.pk)
        changed = sorted(k for k, v in clean.items() if getattr(locked, k) != v)
        if not changed:
            return locked
        for key in changed:
            setattr(locked, key, clean[key])
        locked.generation += 1
        locked.save(update_fields=[*changed, "generation", "updated_at"])
        event_record(actor=user, obj=locked, action="updated", data={"fields": changed, "generation": locked.generation})
        _dispatch("pool_reconcile_task", locked.pk)
    return locked


def pool_scale(*, user, pool: ServingPool, replicas) -> ServingPool:
    """Set the desired replica count (0 allowed: keeps the pool, stops its servers)."""
    require_role(user=user, team=pool.team, role=Role.DEPLOYER)
    limit = LOCAL_MAX_REPLICAS if pool.driver == PoolDriver.LOCAL else MAX_REPLICAS
    replicas = _int_field(replicas, "replicas", low=0, high=limit)
    with transaction.atomic():
        locked = pool_for_update(pool.pk)
        if locked.status == PoolStatus.DELETING:
            raise Conflict(f"Pool {locked.name!r} is being deleted.", code="pool_deleting")
        if locked.replicas == replicas:
            return locked
        old = locked.replicas
        locked.replicas = replicas
        locked.generation += 1
        locked.save(update_fields=["replicas", "generation", "updated_at"])
        event_record(actor=user, obj=locked, action="scaled", from_state=str(old), to_state=str(replicas))
        _dispatch("pool_reconcile_task", locked.pk)
    return locked


def pool_delete(*, user, pool: ServingPool) -> ServingPool:
    """Mark the pool for deletion; a task stops its replicas and removes it."""
    require_role(user=user, team=pool.team, role=Role.DEPLOYER)
    with transaction.atomic():
        locked = pool_for_update(pool.pk)
        endpoints = getattr(locked, "endpoints", None)  # deployments.Endpoint.pool (PROTECT)
        if endpoints is not None and endpoints.exists():
            names = ", ".join(sorted(endpoints.values_list("name", flat=True))[:5])
            raise Conflict(f"Pool {locked.name!r} serves endpoints ({names}); move or delete them first.", code="pool_in_use")
        if locked.status != PoolStatus.DELETING:
            old = locked.status
            locked.status = PoolStatus.DELETING
            locked.save(update_fields=["status", "updated_at"])
            event_record(actor=user, obj=locked, action="delete_requested", from_state=old, to_state=PoolStatus.DELETING)
        _dispatch("pool_teardown_task", locked.pk)
    return locked


# --- models in pools -------------------------------------------------------------------------
def triton_model_name_for(artifact: Artifact) -> str:
    if artifact.triton_model_name:
        return artifact.triton_model_name
    return f"{artifact.version.model.name}__v{artifact.version.version}__{artifact.variant}"


def artifact_model_dir(artifact: Artifact) -> Path:
    """The Triton model directory of an artifact: its stored path itself, or the
    `{triton name}/` directory inside it."""
    if not artifact.path:
        raise InvalidInput(f"artifact: artifact {artifact.pk} has no stored files.", code="artifact_missing_files", field="artifact")
    try:
        base = storage.absolute(artifact.path)
    except ValueError as exc:
        raise InvalidInput(f"artifact: {exc}", code="artifact_missing_files", field="artifact") from None
    for candidate in (base, base / triton_model_name_for(artifact)):
        if (candidate / "config.pbtxt").is_file():
            return candidate
    raise InvalidInput(
        f"artifact: {artifact.path} holds no Triton model directory (config.pbtxt).", code="artifact_missing_files", field="artifact"
    )


def _model_dir(pool: ServingPool, artifact: Artifact) -> ModelDir:
    name = triton_model_name_for(artifact)
    path = artifact_model_dir(artifact)
    try:
        config = triton_config.override_json(
            (path / "config.pbtxt").read_text(), name=name, max_queue_size=pool.max_queue_size, queue_timeout_ms=pool.queue_timeout_ms
        )
    except triton_config.ConfigError as exc:
        raise InvalidInput(f"artifact: {exc}", code="artifact_bad_config", field="artifact") from None
    return ModelDir(name=name, path=path, config_json=config)


def pool_load_request(*, user, pool: ServingPool, artifact: Artifact) -> PoolModel:
    """Ask for `artifact` on every replica of `pool`; idempotent for a model already there.

    Guarantees: only a servable artifact with a readable Triton model directory is
    accepted; the load itself runs in a task and is READY only when every replica says so."""
    require_role(user=user, team=pool.team, role=Role.DEPLOYER)
    if artifact.status != ArtifactStatus.SERVABLE:
        raise InvalidInput(
            f"artifact: artifact {artifact.pk} ({artifact.variant}) is {artifact.status}, not servable"
            + (f": {artifact.status_reason}" if artifact.status_reason else "."),
            code="artifact_not_servable",
            field="artifact",
        )
    model_dir = _model_dir(pool, artifact)
    with transaction.atomic():
        locked = pool_for_update(pool.pk)
        if locked.status == PoolStatus.DELETING:
            raise Conflict(f"Pool {locked.name!r} is being deleted.", code="pool_deleting")
        if locked.replicas == 0:
            raise Conflict(f"Pool {locked.name!r} has 0 replicas; scale it up before loading.", code="no_replicas")
        pool_model, created = PoolModel.objects.select_for_update().get_or_create(
            pool=locked, triton_model_name=model_dir.name,
            defaults={"artifact": artifact, "requested_by": user, "state": PoolModelState.LOADING},
        )
        if not created:
            if pool_model.state == PoolModelState.DRAINING:
                raise Conflict(f"{model_dir.name} is draining on {locked.name}; load it again after the unload.", code="model_draining")
            if pool_model.state == PoolModelState.READY:
                return pool_model
            old = pool_model.state
            pool_model.artifact, pool_model.requested_by = artifact, user
            pool_model.state, pool_model.error, pool_model.replica_ready = PoolModelState.LOADING, "", {}
            pool_model.save()
        else:
            old = ""
        event_record(
            actor=user, obj=locked, action="model_load_requested", from_state=old, to_state=PoolModelState.LOADING,
            reason=model_dir.name, data={"model": model_dir.name, "artifact": artifact.pk},
        )
        _dispatch("pool_model_load_task", pool_model.pk)
    return pool_model


def pool_model_load(*, pool_model_id: int) -> PoolModel:
    """Load a LOADING model on every replica; READY or FAILED with Triton's message."""
    pool_model = PoolModel.objects.select_related("pool", "pool__team", "artifact", "artifact__version__model").get(pk=pool_model_id)
    if pool_model.state != PoolModelState.LOADING:
        return pool_model
    pool = pool_model.pool
    ready, error = {}, ""
    try:
        model_dir = _model_dir(pool, pool_model.artifact)
        ready = driver_for(pool).load(model_dir)
    except LoadFailed as exc:
        error = "\n".join(f"{replica}: {message.strip()}" for replica, message in exc.errors.items())
        ready = {replica: False for replica in exc.errors}
    except (DriverError, InvalidInput) as exc:
        error = getattr(exc, "detail", None) or str(exc)
    with transaction.atomic():
        locked = pool_model_for_update(pool_model.pk)
        if locked.state != PoolModelState.LOADING:
            return locked  # an unload was asked meanwhile; it decides
        locked.replica_ready = ready
        if error:
            locked.state, locked.error = PoolModelState.FAILED, error[:20000]
            event_record(
                actor=locked.requested_by, obj=locked.pool, action="model_load_failed", from_state=PoolModelState.LOADING,
                to_state=PoolModelState.FAILED, reason=error[:2000], data={"model": locked.triton_model_name},
            )
        else:
            locked.state, locked.error, locked.loaded_at = PoolModelState.READY, "", timezone.now()
            event_record(
                actor=locked.requested_by, obj=locked.pool, action="model_loaded", from_state=PoolModelState.LOADING,
                to_state=PoolModelState.READY, reason=f"{locked.triton_model_name} READY on {', '.join(sorted(ready))}",
                data={"model": locked.triton_model_name, "replicas": ready},
            )
        locked.save()
    return locked


def pool_unload_request(*, user, pool: ServingPool, model_name: str, drain_timeout_s: float = 30.0, force: bool = False) -> PoolModel:
    """Stop serving `model_name`: mark it DRAINING (the gateway stops routing to it), then
    a task waits for in-flight requests to finish and unloads it from every replica."""
    require_role(user=user, team=pool.team, role=Role.DEPLOYER)
    try:
        drain_timeout_s = float(drain_timeout_s)
    except (TypeError, ValueError):
        raise InvalidInput(f"drain_timeout_s: {drain_timeout_s!r} is not a number.", field="drain_timeout_s") from None
    if not 0 <= drain_timeout_s <= 600:
        raise InvalidInput("drain_timeout_s: give 0..600 seconds.", field="drain_timeout_s")
    with transaction.atomic():
        locked = pool_for_update(pool.pk)
        pool_model = PoolModel.objects.select_for_update().filter(pool=locked, triton_model_name=model_name).first()
        if pool_model is None:
            raise NotFound(f"Pool {locked.name!r} has no model {model_name!r}.", code="model_not_in_pool")
        if pool_model.state in {PoolModelState.UNLOADED, PoolModelState.DRAINING}:
            return pool_model
        old = pool_model.state
        pool_model.state = PoolModelState.DRAINING
        pool_model.save(update_fields=["state", "updated_at"])
        event_record(
            actor=user, obj=locked, action="model_drain_started", from_state=old, to_state=PoolModelState.DRAINING,
            reason=model_name, data={"model": model_name, "drain_timeout_s": drain_timeout_s, "force": bool(force)},
        )
        _dispatch("pool_model_unload_task", pool_model.pk, drain_timeout_s=drain_timeout_s, force=bool(force))
    return pool_model


def pool_model_unload(*, pool_model_id: int, drain_timeout_s: float = 30.0, force: bool = False, quiet_s: float = 1.0) -> PoolModel:
    """Drain and unload a DRAINING model. On a drain timeout without `force` the model
    goes back to READY (still loaded everywhere) with the reason."""
    pool_model = PoolModel.objects.select_related("pool", "pool__team").get(pk=pool_model_id)
    if pool_model.state != PoolModelState.DRAINING:
        return pool_model
    driver = driver_for(pool_model.pool)
    report, error = {}, ""
    try:
        report = driver.unload(pool_model.triton_model_name, drain_timeout=drain_timeout_s, quiet_s=quiet_s, force=force)
    except DrainTimeout as exc:
        error = str(exc)
    except DriverError as exc:
        error = str(exc)
    with transaction.atomic():
        locked = pool_model_for_update(pool_model.pk)
        if locked.state != PoolModelState.DRAINING:
            return locked
        if error:
            locked.state, locked.error = PoolModelState.READY, f"unload failed: {error}"
            event_record(
                actor=None, obj=locked.pool, action="model_unload_failed", from_state=PoolModelState.DRAINING,
                to_state=PoolModelState.READY, reason=error, data={"model": locked.triton_model_name},
            )
        else:
            locked.state, locked.error, locked.replica_ready = PoolModelState.UNLOADED, "", {}
            event_record(
                actor=None, obj=locked.pool, action="model_unloaded", from_state=PoolModelState.DRAINING,
                to_state=PoolModelState.UNLOADED, reason=f"{locked.triton_model_name} drained in {report.get('waited_s', 0)}s", data={"model": locked.triton_model_name, "drain": report},
            )
        locked.save()
    return locked


# --- reconcile (tasks and the supervisor) ------------------------------------------------------
def _pool_status(pool: ServingPool, replicas) -> tuple[str, str]:
    ready = sum(1 for r in replicas if r.ready)
    if pool.replicas == 0:
        return PoolStatus.READY, "scaled to 0 replicas"
    if ready >= pool.replicas:
        return PoolStatus.READY, ""
    if pool.status == PoolStatus.PENDING and not any(r.status == "down" for r in replicas):
        return PoolStatus.PENDING, f"{ready}/{pool.replicas} replicas ready"
    return PoolStatus.DEGRADED, f"{ready}/{pool.replicas} replicas ready"


def pool_reconcile(*, pool_id: int) -> ServingPool | None:
    """Bring a pool's replicas to the desired count (restarting crashed ones with backoff),
    load what it should serve on replicas that lack it, and record what the driver saw."""
    pool = ServingPool.objects.select_related("team").filter(pk=pool_id).first()
    if pool is None or pool.status == PoolStatus.DELETING:
        return pool
    try:
        driver = driver_for(pool)
        retiring = _retiring_replicas(pool) if pool.driver == PoolDriver.LOCAL else set()
        if retiring:  # keep them running a little longer, out of the route table
            driver.spec = replace(driver.spec, replicas=max(pool.replicas, max(int(n[1:]) for n in retiring) + 1))
        replicas = driver.ensure()
    except DriverError as exc:
        return _pool_failed(pool, str(exc))
    with driver.models_locked():  # read READY inside the lock: an unload holding it has marked DRAINING already
        wanted = list(PoolModel.objects.filter(pool=pool, state=PoolModelState.READY).select_related("artifact__version__model"))
        reloaded, reload_errors, readiness = [], {}, {pm.pk: {} for pm in wanted}
        for replica in replicas:
            if not replica.ready or replica.name in retiring:
                continue
            for pool_model in wanted:
                name = pool_model.triton_model_name
                try:
                    if not driver.is_model_ready(replica, name):
                        model_dir = _model_dir(pool, pool_model.artifact)
                        driver.publish(model_dir)
                        driver.load_on(replica, model_dir)
                        reloaded.append((replica.name, name))
                    readiness[pool_model.pk][replica.name] = driver.is_model_ready(replica, name)
                except (TritonError, DriverError, InvalidInput) as exc:
                    reload_errors[(replica.name, name)] = getattr(exc, "message", None) or str(exc)
                    readiness[pool_model.pk][replica.name] = False
    with transaction.atomic():
        locked = pool_for_update(pool.pk)
        if locked.status == PoolStatus.DELETING:
            return locked
        _sync_replicas(locked, replicas, retiring)
        for replica, name in reloaded:
            event_record(actor=None, obj=locked, action="model_reloaded", to_state="ready", reason=f"{name} on {replica}",
                         data={"model": name, "replica": replica})
        for (replica, name), message in reload_errors.items():
            event_record(actor=None, obj=locked, action="model_reload_failed", reason=message[:2000], data={"model": name, "replica": replica})
        for pool_model in wanted:
            if pool_model.replica_ready != readiness[pool_model.pk]:
                PoolModel.objects.filter(pk=pool_model.pk).update(replica_ready=readiness[pool_model.pk], updated_at=timezone.now())
        status, reason = _pool_status(locked, [r for r in replicas if r.name not in retiring])
        if (status, reason) != (locked.status, locked.status_reason):
            old = locked.status
            locked.status, locked.status_reason = status, reason
            locked.save(update_fields=["status", "status_reason", "updated_at"])
            if old != status:
                event_record(actor=None, obj=locked, action="status_changed", from_state=old, to_state=status, reason=reason)
    return locked


def _pool_failed(pool: ServingPool, reason: str) -> ServingPool:
    with transaction.atomic():
        locked = pool_for_update(pool.pk)
        if (locked.status, locked.status_reason) != (PoolStatus.FAILED, reason):
            old = locked.status
            locked.status, locked.status_reason = PoolStatus.FAILED, reason
            locked.save(update_fields=["status", "status_reason", "updated_at"])
            event_record(actor=None, obj=locked, action="status_changed", from_state=old, to_state=PoolStatus.FAILED, reason=reason)
    return locked


def _retiring_replicas(pool: ServingPool) -> set[str]:
    """Local replicas a scale-down removes that still run for RETIRE_AFTER_S: marked
    STOPPED at once (the gateway's route table and the scrapers skip them), stopped by a
    later reconcile, so requests the gateway routed just before are not cut off."""
    now = timezone.now()
    names = set()
    with transaction.atomic():
        for row in PoolReplica.objects.select_for_update().filter(pool=pool):
            index = int(row.name[1:]) if row.name[1:].isdigit() else -1
            if index < pool.replicas:
                if row.retiring_since is not None:  # scaled back up before it was stopped
                    row.retiring_since = None
                    row.save(update_fields=["retiring_since"])
                continue
            if row.retiring_since is None:
                if row.status not in {ReplicaStatus.READY, ReplicaStatus.STARTING}:
                    continue  # down anyway: nothing to drain
                row.retiring_since, row.status = now, ReplicaStatus.STOPPED
                row.save(update_fields=["retiring_since", "status"])
                event_record(actor=None, obj=pool, action="replica_retiring", from_state=ReplicaStatus.READY,
                             to_state=ReplicaStatus.STOPPED, reason=f"{row.name}: scaled down to {pool.replicas}",
                             data={"replica": row.name, "stop_after_s": RETIRE_AFTER_S})
            if (now - row.retiring_since).total_seconds() < RETIRE_AFTER_S:
                names.add(row.name)
    return names


def _sync_replicas(pool: ServingPool, replicas, retiring: set[str] = frozenset()) -> None:
    """Mirror the driver's replicas into PoolReplica rows; audit downs and restarts."""
    now = timezone.now()
    existing = {r.name: r for r in PoolReplica.objects.filter(pool=pool)}
    for info in replicas:
        row = existing.pop(info.name, None)
        started = datetime.fromtimestamp(info.started_at, tz=dt_timezone.utc) if info.started_at else None
        fields = {
            "status": ReplicaStatus.STOPPED if info.name in retiring else info.status, "http_url": info.http_url, "grpc_url": info.grpc_url, "metrics_url": info.metrics_url,
            "pid": info.pid, "log_path": info.log_path, "restarts": info.restarts, "last_error": info.error[:5000], "started_at": started,
        }
        if row is None:
            PoolReplica.objects.create(pool=pool, name=info.name, last_seen_at=now if info.ready else None, **fields)
            continue
        if row.status == ReplicaStatus.READY and info.status != ReplicaStatus.READY:
            event_record(actor=None, obj=pool, action="replica_down", from_state=row.status, to_state=info.status,
                         reason=info.error, data={"replica": info.name})
        if info.restarts > row.restarts:
            event_record(actor=None, obj=pool, action="replica_restarted", to_state=info.status,
                         reason=info.error, data={"replica": info.name, "restarts": info.restarts, "pid": info.pid})
        changed = [k for k, v in fields.items() if getattr(row, k) != v]
        stale = info.ready and (row.last_seen_at is None or (now - row.last_seen_at).total_seconds() > 10)
        if changed or stale:
            for key in changed:
                setattr(row, key, fields[key])
            if info.ready:
                row.last_seen_at = now
                changed.append("last_seen_at")
            row.save(update_fields=changed)
    for row in existing.values():
        row.delete()


def pool_teardown(*, pool_id: int) -> None:
    """Stop every replica of a DELETING pool and remove it (idempotent)."""
    pool = ServingPool.objects.select_related("team").filter(pk=pool_id).first()
    if pool is None or pool.status != PoolStatus.DELETING:
        return
    try:
        driver_for(pool).delete()
    except DriverError as exc:
        with transaction.atomic():
            locked = pool_for_update(pool.pk)
            locked.status_reason = f"delete failed: {exc}"
            locked.save(update_fields=["status_reason", "updated_at"])
            event_record(actor=None, obj=locked, action="delete_failed", reason=str(exc))
        raise
    with transaction.atomic():
        locked = pool_for_update(pool.pk)
        event_record(actor=None, obj=locked, action="deleted", from_state=PoolStatus.DELETING, to_state="deleted")
        PoolModel.objects.filter(pool=locked).delete()
        locked.delete()
