"""Celery tasks of online experiments; thin: call a service. Beat schedule: config/celery.py."""

from celery import shared_task


@shared_task(name="experiments.ingest", ignore_result=True, acks_late=True, soft_time_limit=20, time_limit=30)
def ingest() -> dict:
    """Drain a bounded batch of the gateway's exposure and feedback streams into the store."""
    from experiments.services.ingest import ingest_once
    from experiments.store import store_is_embedded

    if store_is_embedded():  # chdb lives in one process: run_experiment_data ingests
        return {"skipped": "the embedded store is owned by manage.py run_experiment_data"}
    return ingest_once()


@shared_task(name="experiments.analyze", ignore_result=True, acks_late=True, soft_time_limit=55, time_limit=60)
def analyze() -> dict:
    """One analysis tick over every running experiment, each isolated; shipping ones follow their rollout."""
    from experiments.services.ticks import experiments_analyze_all
    from experiments.store import store_is_embedded

    if store_is_embedded():  # chdb lives in one process: run_experiment_data analyses
        return {"skipped": "the embedded store is owned by manage.py run_experiment_data"}
    return experiments_analyze_all()


@shared_task(name="experiments.retention", ignore_result=True, acks_late=True, soft_time_limit=240, time_limit=300)
def retention() -> dict:
    """Delete feedback, exposures and dead letters past their retention (bounded per run)."""
    from experiments.services.retention import retention_run

    return retention_run()
