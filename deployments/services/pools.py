"""Pool requests: the writes people make to serving pools (API, dashboard, admin).

pool_create, pool_update, pool_scale, pool_delete, pool_load_request and
pool_unload_request check the user's role, validate, record the wanted state with its
audit Event in one transaction, and send a Celery task after commit that does the driver
work (reconcile.py). Nothing is half-written: a bad request changes nothing.
"""

from __future__ import annotations

import os
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path

from django.conf import settings
from django.db import transaction

from config.errors import Conflict, InvalidInput, NotFound
from deployments.lock_objects import pool_for_update
from deployments.models import DeviceKind, PoolDriver, PoolModel, PoolModelState, PoolStatus, ServingPool
from deployments.services.reconcile import model_dir_for
from deployments.tasks import pool_model_load_task, pool_model_unload_task, pool_reconcile_task, pool_teardown_task
from deployments.tritonserver import TritonNotAvailable, find_binary
from registry.models import Artifact, ArtifactStatus, Role
from registry.services.events import event_record
from registry.services.teams import require_role

POOL_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,46}[a-z0-9])?$")  # a DNS label: also a Kubernetes name
MAX_REPLICAS = 64
LOCAL_MAX_REPLICAS = 8  # processes on one machine
REPOSITORY_SCHEMES = ("s3://", "gs://", "as://", "pvc://")
UPDATABLE_FIELDS = ("cost_per_replica_hour", "max_queue_size", "queue_timeout_ms", "resources", "image", "min_replicas", "max_replicas")


def pools_root() -> Path:
    """Where local pools keep their repositories, replica state and logs."""
    configured = os.environ.get("POOLS_DIR") or getattr(settings, "POOLS_DIR", None)
    return Path(configured or Path(settings.VAR_DIR) / "pools").resolve()


def _after_commit(task, *args, **kwargs) -> None:
    """Send a deployments task after the current transaction commits."""
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
        _after_commit(pool_reconcile_task, pool.pk)
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
        _after_commit(pool_reconcile_task, locked.pk)
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
        _after_commit(pool_reconcile_task, locked.pk)
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
        _after_commit(pool_teardown_task, locked.pk)
    return locked


# --- models in pools -------------------------------------------------------------------------
def pool_load_request(*, user, pool: ServingPool, artifact: Artifact, model_name: str = "") -> PoolModel:
    """Ask for `artifact` on every replica of `pool`; idempotent for a model already there.
    `model_name`: under another Triton name than its own (an alias: a rollout's baseline).

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
    model_dir = model_dir_for(pool, artifact, model_name)
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
        _after_commit(pool_model_load_task, pool_model.pk)
    return pool_model


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
        _after_commit(pool_model_unload_task, pool_model.pk, drain_timeout_s=drain_timeout_s, force=bool(force))
    return pool_model
