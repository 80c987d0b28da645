"""Celery tasks of deployments: thin, named, idempotent (the rows decide what remains).

The pool requests (services/pools.py) send the pool tasks by object after commit;
`rollouts_reconcile` runs on beat's schedule (config/celery.py). Each task imports its
service when it runs, so that the services can import these task objects."""

from celery import shared_task

CONTROL = {"acks_late": True, "reject_on_worker_lost": True, "ignore_result": True}


@shared_task(name="deployments.pool_reconcile", soft_time_limit=240, time_limit=300, **CONTROL)
def pool_reconcile_task(pool_id: int) -> None:
    from deployments.services.reconcile import pool_reconcile

    pool_reconcile(pool_id=pool_id)


@shared_task(name="deployments.pool_model_load", soft_time_limit=300, time_limit=360, **CONTROL)
def pool_model_load_task(pool_model_id: int) -> None:
    from deployments.services.reconcile import pool_model_load

    pool_model_load(pool_model_id=pool_model_id)


@shared_task(name="deployments.pool_model_unload", soft_time_limit=660, time_limit=720, **CONTROL)
def pool_model_unload_task(pool_model_id: int, drain_timeout_s: float = 30.0, force: bool = False) -> None:
    from deployments.services.reconcile import pool_model_unload

    pool_model_unload(pool_model_id=pool_model_id, drain_timeout_s=drain_timeout_s, force=force)


@shared_task(name="deployments.pool_teardown", soft_time_limit=120, time_limit=180, **CONTROL)
def pool_teardown_task(pool_id: int) -> None:
    from deployments.services.reconcile import pool_teardown

    pool_teardown(pool_id=pool_id)


@shared_task(name="deployments.rollouts_reconcile", ignore_result=True, expires=10, soft_time_limit=20, time_limit=30)
def rollouts_reconcile(limit: int = 50) -> int:
    """Every ~1 s (beat): one reconcile step for a bounded batch of active rollouts."""
    from deployments.selectors.rollouts import rollouts_to_reconcile
    from deployments.services.rollouts import rollout_reconcile

    ids = rollouts_to_reconcile(limit=limit)
    for rollout_id in ids:
        rollout_reconcile(rollout_id=rollout_id)
    return len(ids)


@shared_task(name="deployments.releases_reconcile", ignore_result=True, expires=10, soft_time_limit=20, time_limit=30)
def releases_reconcile(limit: int = 20) -> int:
    """Every ~2 s (beat): one step for a bounded batch of active releases (build → tune → canary)."""
    from deployments.selectors.releases import releases_to_reconcile
    from deployments.services.releases import release_reconcile

    ids = releases_to_reconcile(limit=limit)
    for release_id in ids:
        release_reconcile(release_id=release_id)
    return len(ids)
