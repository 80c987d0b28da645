"""Driver work on serving pools: pool_model_load, pool_model_unload, pool_reconcile and
pool_teardown, run by the Celery tasks the pool requests send (pools.py) and by the
`run_pools` supervisor. Idempotent: the rows say what remains. No row lock is held while
a driver talks to processes or pods.

Why this is one long module: a pool's reconcile and its replicas' sync read as one loop, one lock and one state file per replica.
"""

from __future__ import annotations

import secrets
from dataclasses import replace
from datetime import UTC, datetime

from django.db import transaction
from django.utils import timezone

from deployments.drivers import DrainTimeout, DriverError, LoadFailed, ModelDir, NoReadyReplica, driver_for
from deployments.lock_objects import pool_for_update, pool_model_for_update
from deployments.models import (
    PoolDriver,
    PoolModel,
    PoolModelState,
    PoolReplica,
    PoolStatus,
    ReplicaStatus,
    ServingPool,
)
from deployments.services.route_changes import route_changed
from kernel.errors import InvalidInput
from registry import secret_box, storage, triton_config
from registry.models import Artifact, EventAction
from registry.names import triton_name
from registry.services.events import event_record
from serving.triton import TritonError

RETIRE_AFTER_S = 3.0  # a replica leaving the pool keeps running this long out of the route table
WAITING = "waiting for a ready replica"  # a LOADING model's note while its pool has none (pool_reconcile loads it)


def model_dir_for(pool: ServingPool, artifact: Artifact, name: str = "") -> ModelDir:
    """What a driver loads for `artifact` on `pool`: its Triton directory and the load-time
    config override with the pool's queue limits. `name`: load it under another Triton
    name (an alias, e.g. a rollout's baseline copy of the stable: the same directory,
    published under that name, runs as a model of its own with its own instances)."""
    name = name or triton_name(artifact)
    path = storage.artifact_model_dir(artifact)
    try:
        config = triton_config.override_json(
            (path / "config.pbtxt").read_text(),
            name=name,
            max_queue_size=pool.max_queue_size,
            queue_timeout_ms=pool.queue_timeout_ms,
        )
    except triton_config.ConfigError as exc:
        raise InvalidInput(f"artifact: {exc}", code="artifact_bad_config", field="artifact") from None
    return ModelDir(name=name, path=path, config_json=config)


def sealed_admin_key() -> str:
    """A new Triton admin key for one Kubernetes pool, sealed for its row."""
    return secret_box.seal(secrets.token_urlsafe(32))


def _admin_key_ensure(pool: ServingPool) -> None:
    """A Kubernetes pool made before pools had keys of their own gets one (under the row
    lock: two reconciles make one key)."""
    if pool.driver != PoolDriver.KUBERNETES or pool.admin_key_sealed:
        return
    with transaction.atomic():
        locked = pool_for_update(pool.pk)
        if not locked.admin_key_sealed:
            locked.admin_key_sealed = sealed_admin_key()
            locked.save(update_fields=["admin_key_sealed"])
    pool.admin_key_sealed = locked.admin_key_sealed


def pool_model_load(*, pool_model_id: int) -> PoolModel:
    """Load a LOADING model on every replica; READY or FAILED with Triton's message. While
    the pool has no ready replica (it is still starting: an endpoint created with its pool)
    the model stays LOADING with the note WAITING, and pool_reconcile loads it once one is."""
    pool_model = PoolModel.objects.select_related("pool", "pool__team", "artifact", "artifact__version__model").get(
        pk=pool_model_id
    )
    if pool_model.state != PoolModelState.LOADING:
        return pool_model
    pool = pool_model.pool
    ready, error = {}, ""
    try:
        model_dir = model_dir_for(pool, pool_model.artifact, pool_model.triton_model_name)
        ready = driver_for(pool).load(model_dir)
    except NoReadyReplica:
        if pool_model.error != WAITING:
            PoolModel.objects.filter(pk=pool_model.pk, state=PoolModelState.LOADING).update(
                error=WAITING, updated_at=timezone.now()
            )
            pool_model.error = WAITING
        return pool_model
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
                actor=locked.requested_by,
                obj=locked.pool,
                action=EventAction.MODEL_LOAD_FAILED,
                from_state=PoolModelState.LOADING,
                to_state=PoolModelState.FAILED,
                reason=error[:2000],
                data={"model": locked.triton_model_name},
            )
        else:
            locked.state, locked.error, locked.loaded_at = PoolModelState.READY, "", timezone.now()
            event_record(
                actor=locked.requested_by,
                obj=locked.pool,
                action=EventAction.MODEL_LOADED,
                from_state=PoolModelState.LOADING,
                to_state=PoolModelState.READY,
                reason=f"{locked.triton_model_name} READY on {', '.join(sorted(ready))}",
                data={"model": locked.triton_model_name, "replicas": ready},
            )
        locked.save()
    return locked


def pool_model_unload(
    *, pool_model_id: int, drain_timeout_s: float = 30.0, force: bool = False, quiet_s: float = 1.0
) -> PoolModel:
    """Drain and unload a DRAINING model. On a drain timeout without `force` the model
    goes back to READY (still loaded everywhere) with the reason."""
    pool_model = PoolModel.objects.select_related("pool", "pool__team").get(pk=pool_model_id)
    if pool_model.state != PoolModelState.DRAINING:
        return pool_model
    driver = driver_for(pool_model.pool)
    report, error = {}, ""
    try:
        report = driver.unload(
            pool_model.triton_model_name, drain_timeout=drain_timeout_s, quiet_s=quiet_s, force=force
        )
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
                actor=None,
                obj=locked.pool,
                action=EventAction.MODEL_UNLOAD_FAILED,
                from_state=PoolModelState.DRAINING,
                to_state=PoolModelState.READY,
                reason=error,
                data={"model": locked.triton_model_name},
            )
        else:
            locked.state, locked.error, locked.replica_ready = PoolModelState.UNLOADED, "", {}
            event_record(
                actor=None,
                obj=locked.pool,
                action=EventAction.MODEL_UNLOADED,
                from_state=PoolModelState.DRAINING,
                to_state=PoolModelState.UNLOADED,
                reason=f"{locked.triton_model_name} drained in {report.get('waited_s', 0)}s",
                data={"model": locked.triton_model_name, "drain": report},
            )
        locked.save()
    return locked


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
        _admin_key_ensure(pool)
        driver = driver_for(pool)
        retiring = _retiring_replicas(pool) if pool.driver == PoolDriver.LOCAL else set()
        if retiring:  # keep them running a little longer, out of the route table
            driver.spec = replace(driver.spec, replicas=max(pool.replicas, max(int(n[1:]) for n in retiring) + 1))
        replicas = driver.ensure(on_down=lambda info: _replica_down(pool.pk, info))
    except DriverError as exc:
        return _pool_failed(pool, str(exc))
    wanted, reloaded, reload_errors, readiness = _reload_missing(pool, driver, replicas, retiring)
    if any(r.ready and r.name not in retiring for r in replicas):  # loads that waited for a replica
        for pk in PoolModel.objects.filter(pool=pool, state=PoolModelState.LOADING, error=WAITING).values_list(
            "pk", flat=True
        ):
            pool_model_load(pool_model_id=pk)
    with transaction.atomic():
        locked = pool_for_update(pool.pk)
        if locked.status == PoolStatus.DELETING:
            return locked
        _record_reconcile(locked, replicas, retiring, wanted, reloaded, reload_errors, readiness)
    return locked


def _reload_missing(pool, driver, replicas, retiring: set) -> tuple[list, list, dict, dict]:
    """Load every READY model of the pool on each ready replica that lacks it (a restarted
    one): (the models, [(replica, model) reloaded], {(replica, model): error}, readiness
    {pool model pk: {replica: ready}})."""
    with driver.models_locked():  # read READY inside the lock: an unload holding it has marked DRAINING already
        wanted = list(
            PoolModel.objects.filter(pool=pool, state=PoolModelState.READY).select_related("artifact__version__model")
        )
        reloaded, reload_errors, readiness = [], {}, {pm.pk: {} for pm in wanted}
        for replica in replicas:
            if not replica.ready or replica.name in retiring:
                continue
            for pool_model in wanted:
                name = pool_model.triton_model_name
                try:
                    ready = driver.is_model_ready(replica, name)
                    if not ready:
                        model_dir = model_dir_for(pool, pool_model.artifact, name)
                        driver.publish(model_dir)
                        driver.load_on(replica, model_dir)
                        reloaded.append((replica.name, name))
                        ready = driver.is_model_ready(replica, name)  # asked again only after a reload
                    readiness[pool_model.pk][replica.name] = ready
                except (TritonError, DriverError, InvalidInput) as exc:
                    reload_errors[(replica.name, name)] = getattr(exc, "message", None) or str(exc)
                    readiness[pool_model.pk][replica.name] = False
    return wanted, reloaded, reload_errors, readiness


def _record_reconcile(locked, replicas, retiring: set, wanted, reloaded, reload_errors: dict, readiness: dict) -> None:
    """What a reconcile saw, recorded under the pool's lock: its replicas, the models reloaded
    or that failed to, each model's readiness per replica, and the pool's status."""
    _sync_replicas(locked, replicas, retiring)
    for replica, name in reloaded:
        event_record(
            actor=None,
            obj=locked,
            action=EventAction.MODEL_RELOADED,
            to_state="ready",
            reason=f"{name} on {replica}",
            data={"model": name, "replica": replica},
        )
    for (replica, name), message in reload_errors.items():
        event_record(
            actor=None,
            obj=locked,
            action=EventAction.MODEL_RELOAD_FAILED,
            reason=message[:2000],
            data={"model": name, "replica": replica},
        )
    for pool_model in wanted:
        if pool_model.replica_ready != readiness[pool_model.pk]:
            PoolModel.objects.filter(pk=pool_model.pk).update(
                replica_ready=readiness[pool_model.pk], updated_at=timezone.now()
            )
            route_changed(model="deployments.poolmodel")  # an update() sends no signal
    status, reason = _pool_status(locked, [r for r in replicas if r.name not in retiring])
    if (status, reason) != (locked.status, locked.status_reason):
        old = locked.status
        locked.status, locked.status_reason = status, reason
        locked.save(update_fields=["status", "status_reason", "updated_at"])
        if old != status:
            event_record(
                actor=None,
                obj=locked,
                action=EventAction.STATUS_CHANGED,
                from_state=old,
                to_state=status,
                reason=reason,
            )


def _replica_down(pool_id: int, info) -> None:
    """Record at once a replica the driver found dead or hung, before it restarts it (a
    restart takes seconds: /healthz, the pool page and the route table must not wait)."""
    with transaction.atomic():
        pool = pool_for_update(pool_id)
        row = PoolReplica.objects.filter(pool=pool, name=info.name).first()
        if row is None or (row.status, row.last_error) == (ReplicaStatus.DOWN, info.error[:5000]):
            return
        old = row.status
        row.status, row.last_error = ReplicaStatus.DOWN, info.error[:5000]
        row.save(update_fields=["status", "last_error"])
        event_record(
            actor=None,
            obj=pool,
            action=EventAction.REPLICA_DOWN,
            from_state=old,
            to_state=ReplicaStatus.DOWN,
            reason=info.error,
            data={"replica": info.name, "pid": info.pid},
        )
        if pool.status == PoolStatus.READY:
            pool.status, pool.status_reason = PoolStatus.DEGRADED, f"{info.name} down: {info.error}"[:2000]
            pool.save(update_fields=["status", "status_reason", "updated_at"])
            event_record(
                actor=None,
                obj=pool,
                action=EventAction.STATUS_CHANGED,
                from_state=PoolStatus.READY,
                to_state=PoolStatus.DEGRADED,
                reason=pool.status_reason,
            )


def _pool_failed(pool: ServingPool, reason: str) -> ServingPool:
    with transaction.atomic():
        locked = pool_for_update(pool.pk)
        if (locked.status, locked.status_reason) != (PoolStatus.FAILED, reason):
            old = locked.status
            locked.status, locked.status_reason = PoolStatus.FAILED, reason
            locked.save(update_fields=["status", "status_reason", "updated_at"])
            event_record(
                actor=None,
                obj=locked,
                action=EventAction.STATUS_CHANGED,
                from_state=old,
                to_state=PoolStatus.FAILED,
                reason=reason,
            )
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
                event_record(
                    actor=None,
                    obj=pool,
                    action=EventAction.REPLICA_RETIRING,
                    from_state=ReplicaStatus.READY,
                    to_state=ReplicaStatus.STOPPED,
                    reason=f"{row.name}: scaled down to {pool.replicas}",
                    data={"replica": row.name, "stop_after_s": RETIRE_AFTER_S},
                )
            if (now - row.retiring_since).total_seconds() < RETIRE_AFTER_S:
                names.add(row.name)
    return names


def _sync_replicas(pool: ServingPool, replicas, retiring: set[str] = frozenset()) -> None:
    """Mirror the driver's replicas into PoolReplica rows; audit downs and restarts."""
    now = timezone.now()
    existing = {r.name: r for r in PoolReplica.objects.filter(pool=pool)}
    for info in replicas:
        row = existing.pop(info.name, None)
        started = datetime.fromtimestamp(info.started_at, tz=UTC) if info.started_at else None
        fields = {
            "status": ReplicaStatus.STOPPED if info.name in retiring else info.status,
            "http_url": info.http_url,
            "grpc_url": info.grpc_url,
            "metrics_url": info.metrics_url,
            "pid": info.pid,
            "log_path": info.log_path,
            "restarts": info.restarts,
            "last_error": info.error[:5000],
            "started_at": started,
        }
        if row is None:
            PoolReplica.objects.create(pool=pool, name=info.name, last_seen_at=now if info.ready else None, **fields)
            continue
        if row.status == ReplicaStatus.READY and info.status != ReplicaStatus.READY:
            event_record(
                actor=None,
                obj=pool,
                action=EventAction.REPLICA_DOWN,
                from_state=row.status,
                to_state=info.status,
                reason=info.error,
                data={"replica": info.name},
            )
        if info.restarts > row.restarts:
            event_record(
                actor=None,
                obj=pool,
                action=EventAction.REPLICA_RESTARTED,
                to_state=info.status,
                reason=info.error,
                data={"replica": info.name, "restarts": info.restarts, "pid": info.pid},
            )
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
            event_record(actor=None, obj=locked, action=EventAction.DELETE_FAILED, reason=str(exc))
        raise
    with transaction.atomic():
        locked = pool_for_update(pool.pk)
        event_record(
            actor=None, obj=locked, action=EventAction.DELETED, from_state=PoolStatus.DELETING, to_state="deleted"
        )
        PoolModel.objects.filter(pool=locked).delete()
        locked.delete()
