"""Row locks for concurrent writes (select_for_update), one helper per object kind."""

from deployments.models import Endpoint, InferenceKey, PoolModel, Release, Rollout, ServingPool


def pool_for_update(pool_id: int) -> ServingPool:
    """The pool row only: not its team's row, which every transaction locking a pool, an
    experiment or a key of that team would otherwise queue on (a deadlock between an
    experiment's start and the pool supervisor's reconcile, met on real processes)."""
    return ServingPool.objects.select_for_update(of=("self",)).select_related("team").get(pk=pool_id)


def pool_model_for_update(pool_model_id: int) -> PoolModel:
    return PoolModel.objects.select_for_update().select_related("pool", "pool__team", "artifact").get(pk=pool_model_id)


def endpoint_for_update(endpoint_id: int) -> Endpoint:
    return Endpoint.objects.select_for_update().get(pk=endpoint_id)


def rollout_for_update(rollout_id: int, *, skip_locked: bool = False) -> Rollout | None:
    """The rollout row (only it, not its joins) locked, with what a transition reads.
    skip_locked: None when another transaction holds it (a concurrent tick moves on)
    or it is gone; otherwise wait for the lock (DoesNotExist when it is gone)."""
    rows = Rollout.objects.select_for_update(skip_locked=skip_locked, of=("self",)).select_related(
        "endpoint",
        "endpoint__team",
        "endpoint__pool",
        "candidate_artifact__version__model",
        "baseline_artifact__version__model",
        "created_by",
    )
    return rows.filter(pk=rollout_id).first() if skip_locked else rows.get(pk=rollout_id)


def inference_key_for_update(key_id: int) -> InferenceKey:
    return InferenceKey.objects.select_for_update(of=("self",)).select_related("team").get(pk=key_id)


def release_for_update(release_id: int) -> Release:
    return (
        Release.objects.select_for_update(of=("self",))
        .select_related("endpoint__team", "endpoint__pool", "version__model", "build", "rollout", "created_by")
        .get(pk=release_id)
    )
