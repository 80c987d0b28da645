"""Celery tasks of online experiments; thin: call a service. Beat schedule: config/celery.py."""

from celery import shared_task


@shared_task(name="experiments.ingest", ignore_result=True, acks_late=True, soft_time_limit=20, time_limit=30)
def ingest() -> dict:
    """Drain a bounded batch of the gateway's exposure and feedback streams into the store."""
    from experiments.services.ingest import ingest_once
    from experiments.store import store_is_embedded

    if store_is_embedded():  # chdb lives in one process: run_experiment_data ingests
        return {"skipped": "the embedded store is owned by manage.py run_experiment_data"}
    reader = _log_reader()
    if reader is not None:  # the gateway writes the durable log (NATS JetStream)
        from experiments.services.log_ingest import ingest_log_once

        return ingest_log_once(reader, redis_client=_redis())
    return ingest_once()


_READER: dict = {}


def _log_reader():
    """This worker's reader of the NATS log, when EVENT_LOG_URL answers (made once per process)."""
    from django.conf import settings

    from experiments.eventlog import log_url

    url = log_url()
    if not url:
        return None
    if url not in _READER:
        from experiments.eventlog.reader import NatsReader

        _READER[url] = NatsReader(url, settings.EVENT_LOG_PREFIX)
    return _READER[url]


def _redis():
    from experiments.services.streams import stream_client

    return stream_client()


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
