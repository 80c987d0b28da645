"""manage.py run_experiment_data: the one process that owns the embedded experiment store.

chdb (EXPERIMENT_STORE=chdb) keeps its data directory open in one process, so this process
does everything that touches it: every second it ingests the log (NATS JetStream when
EVENT_LOG_URL answers, said once in the log, else the Redis Streams) into the store, and
every ANALYSIS_EVERY_S it runs the analysis tick, whose results (evidence with each arm's
sums) go to the relational database the web process reads; between ingest runs it builds the
datasets the web process asked for (experiments/services/dataset_requests.py). With a shared store (PostgreSQL,
a ClickHouse server) Celery's `experiments.ingest` and `experiments.analyze` do the same.
"""

import logging
import time

from django.conf import settings
from django.core.management.base import BaseCommand

log = logging.getLogger(__name__)
ANALYSIS_EVERY_S = 15.0


class Command(BaseCommand):
    help = "Own the embedded experiment store: ingest the log into it and run the analysis tick."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="One ingest run and one tick, then exit.")

    def handle(self, *args, once=False, **options):
        from experiments.eventlog import log_url
        from experiments.eventlog.reader import NatsReader
        from experiments.services import ingest, ticks
        from experiments.services.dataset_requests import dataset_requests_run
        from experiments.services.log_ingest import ingest_log_once
        from experiments.store import default_store

        store = default_store()
        url = log_url()
        reader = NatsReader(url, settings.EVENT_LOG_PREFIX) if url else None
        redis_client = ingest.stream_client()
        log.info(
            "experiment data: store %s, log %s",
            settings.EXPERIMENT_STORE,
            f"NATS JetStream at {url}" if reader else "Redis Streams (no NATS answers at EVENT_LOG_URL)",
        )
        next_tick = 0.0
        while True:
            started = time.monotonic()
            totals = ingest_log_once(reader, store=store, redis_client=redis_client) if reader else ingest.ingest_once()
            if totals.get("store_down"):
                log.warning("experiment data: the store refused a write, the log keeps it: %s", totals["store_down"])
            dataset_requests_run(store=store)  # builds the web process asked for (it never opens chdb)
            if started >= next_tick:
                ticks.experiments_analyze_all(store=store, budget_s=ANALYSIS_EVERY_S * 2)
                next_tick = started + ANALYSIS_EVERY_S
            if once:
                self.stdout.write(str(totals))
                return
            time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
