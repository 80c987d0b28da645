"""The pool side of a rollout: its candidate's and baseline copy's pool models, asked for,
waited on and unloaded through the pools' services (deployments/services/rollouts.py drives
the rollout itself)."""

from __future__ import annotations

from datetime import datetime

from deployments.models import Endpoint, PoolModel, PoolModelState, Rollout
from deployments.rollout_machine import ACTIVE
from deployments.services import pools as pool_services
from kernel.errors import Conflict
from registry.models import Artifact, EventAction
from registry.names import triton_name
from registry.services.events import event_record


def pool_model_of(rollout: Rollout, artifact: Artifact, name: str = "") -> PoolModel | None:
    return PoolModel.objects.filter(
        pool_id=rollout.endpoint.pool_id, triton_model_name=name or triton_name(artifact)
    ).first()


def model_request(
    rollout: Rollout, artifact: Artifact, user, *, name: str = "", retry_failed: bool
) -> tuple[bool, PoolModel | None]:
    """Ask the rollout's pool for `artifact` (under `name`: the baseline copy's alias) unless it
    is there or on its way. A copy still draining (the stable a promotion has just replaced: an
    undo right after it; the baseline of the rollout before) is asked for again once the drain
    is over, at a later tick. `retry_failed`: a FAILED copy is asked for again (a new rollout's
    start, a baseline; a rollout's own tick leaves its candidate's failure to the rollout,
    which fails on it). Returns (False while a drain is waited for, else True; the pool model
    as it stands after)."""
    pool_model = pool_model_of(rollout, artifact, name)
    if pool_model is not None and pool_model.state == PoolModelState.DRAINING:
        return False, pool_model
    if pool_model is not None and (
        pool_model.state in (PoolModelState.READY, PoolModelState.LOADING)
        or (pool_model.state == PoolModelState.FAILED and not retry_failed)
    ):
        return True, pool_model
    asked = pool_services.pool_load_request(user=user, pool=rollout.endpoint.pool, artifact=artifact, model_name=name)
    return True, asked


def candidate_request(rollout: Rollout, user, *, retry_failed: bool) -> tuple[bool, PoolModel | None]:
    """`model_request` for the rollout's candidate."""
    return model_request(rollout, rollout.candidate_artifact, user, retry_failed=retry_failed)


def draining_reason(rollout: Rollout) -> str:
    return (
        f"waiting for {triton_name(rollout.candidate_artifact)} to finish draining on pool "
        f"{rollout.endpoint.pool.name} (the stable a promotion replaced): it is loaded again once the drain ends"
    )


def baseline_request(rollout: Rollout, user) -> None:
    """`model_request` for the rollout's baseline copy, when it has one (a failed copy is asked
    for again: the rollout gives it up at its load timeout, not at its first failure)."""
    if rollout.baseline_model:
        model_request(rollout, rollout.baseline_artifact, user, name=rollout.baseline_model, retry_failed=True)


def _baseline_used_elsewhere(rollout: Rollout) -> bool:
    return (
        Rollout.objects.filter(
            endpoint__pool_id=rollout.endpoint.pool_id,
            baseline_model=rollout.baseline_model,
            state__in=[s.value for s in ACTIVE],
        )
        .exclude(pk=rollout.pk)
        .exists()
    )


def baseline_unload(rollout: Rollout) -> None:
    """Drain and unload the rollout's baseline copy (unless another rollout on the pool uses it)."""
    if not rollout.baseline_model or _baseline_used_elsewhere(rollout):
        return
    pool_model = pool_model_of(rollout, rollout.baseline_artifact, rollout.baseline_model)
    if pool_model is not None and pool_model.state in (
        PoolModelState.READY,
        PoolModelState.LOADING,
        PoolModelState.FAILED,
    ):
        pool_services.pool_unload_request(
            user=rollout.created_by,
            pool=rollout.endpoint.pool,
            model_name=pool_model.triton_model_name,
            drain_timeout_s=30.0,
            force=True,
        )


def still_used(artifact: Artifact, pool_id: int, excluding_rollout: int) -> bool:
    """Is the artifact served by an endpoint on this pool or wanted by another rollout?"""
    if Endpoint.objects.filter(pool_id=pool_id, stable_artifact=artifact).exists():
        return True
    return (
        Rollout.objects.filter(
            endpoint__pool_id=pool_id, candidate_artifact=artifact, state__in=[s.value for s in ACTIVE]
        )
        .exclude(pk=excluding_rollout)
        .exists()
    )


def artifact_unload(rollout: Rollout, artifact: Artifact) -> str:
    """Ask the pool to drain and unload `artifact` unless something still uses it; returns
    the pool model's state ("" when it is not in the pool)."""
    pool_model = pool_model_of(rollout, artifact)
    if pool_model is None:
        return ""
    if pool_model.state in (PoolModelState.READY, PoolModelState.LOADING) and not still_used(
        artifact, rollout.endpoint.pool_id, rollout.pk
    ):
        pool_model = pool_services.pool_unload_request(
            user=rollout.created_by,
            pool=rollout.endpoint.pool,
            model_name=pool_model.triton_model_name,
            drain_timeout_s=30.0,
            force=True,
        )
    return pool_model.state


def ready_everywhere(pool_model: PoolModel | None) -> bool:
    return (
        pool_model is not None
        and pool_model.state == PoolModelState.READY
        and bool(pool_model.replica_ready)
        and all(pool_model.replica_ready.values())
    )


def baseline_ready(locked: Rollout, now: datetime) -> bool:
    """Is the baseline copy READY (or given up on: then the rollout goes on against the stable)?"""
    if not locked.baseline_model:
        return True
    pool_model = pool_model_of(locked, locked.baseline_artifact, locked.baseline_model)
    if ready_everywhere(pool_model):
        return True
    waited = (now - locked.created_at).total_seconds()
    if (
        pool_model is not None and pool_model.state == PoolModelState.FAILED
    ) or waited > locked.load_timeout_seconds / 2:
        why = (
            pool_model.error[:1500] if pool_model is not None and pool_model.error else f"not READY after {waited:.0f}s"
        )
        event_record(
            actor=None,
            obj=locked,
            team=locked.endpoint.team,
            action=EventAction.BASELINE_UNAVAILABLE,
            reason=f"baseline copy {locked.baseline_model} could not be loaded ({why}); judging against the stable",
        )
        baseline_unload(locked)
        locked.baseline_model = ""
        locked.save(update_fields=["baseline_model"])
        return True
    try:
        baseline_request(locked, locked.created_by)  # a copy that was still draining from the rollout before
    except Conflict:
        pass
    return False
