"""manage.py run_experiment_data: the one process that owns the embedded experiment store.

chdb (EXPERIMENT_STORE=chdb, `make run`'s default) keeps its data directory open in one process,
so this process does everything that touches it: every second it ingests the log (NATS
JetStream when EVENT_LOG_URL answers, else the Redis Streams; which one is said once in the log)
into the store, and every ANALYSIS_EVERY_S it runs the analysis tick, whose results (evidence
with each arm's sums) go to the relational database the web process reads; between ingest runs
it builds the datasets the web process asked for (experiments/services/dataset_requests.py).
With a shared store (PostgreSQL, a ClickHouse server) Celery's `experiments.ingest` and
`experiments.analyze` do the same.

Its heartbeat (row `experiment-data`, what /healthz's component of that name reads) is recorded
every few seconds by a thread while the loop goes round: a loop stuck longer than LOOP_STALL_S
(a tick's budget is 30 s, a dataset build ~20 s at most) stops it, and /healthz says so.
"""

import logging
import threading
import time

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import close_old_connections

log = logging.getLogger(__name__)
ANALYSIS_EVERY_S = 15.0
HEARTBEAT_EVERY_S = 5.0
LOOP_STALL_S = 90.0


class LoopHeartbeat(threading.Thread):
    """Records heartbeat `experiment-data` while the loop's last round ended recently."""

    def __init__(self, detail: dict):
        super().__init__(name="experiment-data-heartbeat", daemon=True)
        self.detail, self.last_round = detail, time.monotonic()
        self.stopping = threading.Event()

    def beat_once(self) -> None:
        from config.heartbeats import heartbeat_record

        since = time.monotonic() - self.last_round
        if since <= LOOP_STALL_S:  # a stuck loop records nothing: /healthz names the component down
            heartbeat_record(name="experiment-data", detail={**self.detail, "last_round_s": round(since, 1)})

    def run(self) -> None:
        while True:
            try:
                self.beat_once()
            except Exception as exc:  # noqa: BLE001 - the database is down: the loop goes on
                log.warning("experiment data: cannot record its heartbeat: %s", exc)
            finally:
                close_old_connections()
            if self.stopping.wait(HEARTBEAT_EVERY_S):
                return


class Command(BaseCommand):
    help = "Own the embedded experiment store: ingest the log into it and run the analysis tick."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="One ingest run and one tick, then exit.")

    def handle(self, *args, once=False, **options):
        from experiments.eventlog import log_url
        from experiments.eventlog.reader import NatsReader
        from experiments.services import ingest, streams, ticks
        from experiments.services.dataset_requests import dataset_requests_run
        from experiments.services.log_ingest import ingest_log_once
        from experiments.store import default_store

        store = default_store()
        url = log_url()
        reader = NatsReader(url, settings.EVENT_LOG_PREFIX) if url else None
        redis_client = streams.stream_client()
        log_name = f"NATS JetStream at {url}" if reader else "Redis Streams (no NATS answers at EVENT_LOG_URL)"
        log.info("experiment data: store %s, log %s", settings.EXPERIMENT_STORE, log_name)
        heartbeat = LoopHeartbeat({"store": settings.EXPERIMENT_STORE, "log": log_name})
        if not once:
            heartbeat.start()
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
            heartbeat.last_round = time.monotonic()
            if once:
                self.stdout.write(str(totals))
                return
            time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
