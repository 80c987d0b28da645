"""Celery tasks of online experiments; thin: call a service. Beat schedule: config/celery.py."""

from celery import shared_task


@shared_task(name="experiments.ingest", ignore_result=True, acks_late=True, soft_time_limit=20, time_limit=30)
def ingest() -> dict:
    """Drain a bounded batch of the gateway's exposure and feedback streams into the store."""
    from experiments.online.ingest import ingest_once

    return ingest_once()


@shared_task(name="experiments.analyze", ignore_result=True, acks_late=True, soft_time_limit=50, time_limit=60)
def analyze(limit: int = 20) -> int:
    """One analysis tick per running experiment: evidence, chart point, decision."""
    from experiments.models import Experiment, ExperimentState
    from experiments.services.experiments import experiment_analyze

    ids = list(Experiment.objects.filter(state=ExperimentState.RUNNING).order_by("pk").values_list("pk", flat=True)[:limit])
    for pk in ids:
        experiment_analyze(experiment_id=pk)
    return len(ids)
