"""Celery tasks of deployments: thin, named, idempotent (the rows decide what remains)."""

from celery import shared_task

from deployments import services

CONTROL = {"acks_late": True, "reject_on_worker_lost": True, "ignore_result": True}


@shared_task(name="deployments.pool_reconcile", soft_time_limit=240, time_limit=300, **CONTROL)
def pool_reconcile_task(pool_id: int) -> None:
    services.pool_reconcile(pool_id=pool_id)


@shared_task(name="deployments.pool_model_load", soft_time_limit=300, time_limit=360, **CONTROL)
def pool_model_load_task(pool_model_id: int) -> None:
    services.pool_model_load(pool_model_id=pool_model_id)


@shared_task(name="deployments.pool_model_unload", soft_time_limit=660, time_limit=720, **CONTROL)
def pool_model_unload_task(pool_model_id: int, drain_timeout_s: float = 30.0, force: bool = False) -> None:
    services.pool_model_unload(pool_model_id=pool_model_id, drain_timeout_s=drain_timeout_s, force=force)


@shared_task(name="deployments.pool_teardown", soft_time_limit=120, time_limit=180, **CONTROL)
def pool_teardown_task(pool_id: int) -> None:
    services.pool_teardown(pool_id=pool_id)
