import logging
import os

from celery import Celery
from celery.signals import setup_logging, worker_ready
from kombu import Queue

from config.schedules import watched

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("modelplane")


@setup_logging.connect
def _django_logging(**kwargs):
    """Worker and beat log through Django's LOGGING (LOG_LEVEL, the housekeeping filter in
    config/log_filters.py) instead of Celery's own root-logger setup."""
    from logging.config import dictConfig

    from django.conf import settings

    dictConfig(settings.LOGGING)


@worker_ready.connect
def _reap_scratch_servers(**kwargs):
    """A worker's start ends the scratch tritonservers no live build attempt holds (a
    SIGKILLed worker's: registry/factory/scratch.py)."""
    from django.db import close_old_connections

    from registry.factory.scratch import scratch_reap

    try:
        done = scratch_reap()
        if done["killed"] or done["removed"]:
            logging.getLogger(__name__).warning(
                "worker start: reaped scratch tritonservers %s and work dirs %s", done["killed"], done["removed"]
            )
    except Exception:  # a worker starts anyway; the next attempt reaps again
        logging.getLogger(__name__).exception("worker start: reaping scratch tritonservers failed")
    finally:
        close_old_connections()


app.config_from_object("django.conf:settings", namespace="CELERY")
# Queues per kind of work (DESIGN.md): builds never starve the control loop.
app.conf.task_queues = [Queue(name) for name in ("control", "build-cpu", "build-gpu")]
app.autodiscover_tasks()  # each app's tasks.py

# Periodic work (each task processes a bounded batch per tick); apps add their entries here.
app.conf.beat_schedule = {
    "platform-heartbeat": {
        "task": "platform.heartbeat",
        "schedule": 5.0,
        "options": {"queue": "control", "expires": 20},
    },
    "monitoring-collect": {
        "task": "monitoring.collect",
        # every 2 s while a rollout or an experiment is watched; every 10 s otherwise (dashboards, alerts)
        "schedule": watched(2.0, 10.0, "config.schedules:collector_watched"),
        "options": {"queue": "control", "expires": 4},
    },
    "monitoring-rollup": {
        "task": "monitoring.rollup",
        "schedule": 30.0,
        "options": {"queue": "control", "expires": 60},
    },
    "monitoring-retention": {
        "task": "monitoring.retention",
        "schedule": 600.0,
        "options": {"queue": "control", "expires": 600},
    },
}
# Artifact factory: requeue builds whose worker died (lease expired); BUILD_RECLAIM_INTERVAL_S.
app.conf.beat_schedule["registry-builds-reclaim"] = {
    "task": "registry.builds_reclaim",
    "schedule": float(os.environ.get("BUILD_RECLAIM_INTERVAL_S", "15")),
    "options": {"queue": "control", "expires": 60},
}
# The closed loop: rollout reconcile and the canary judge tick every second.
app.conf.beat_schedule["deployments-rollouts-reconcile"] = {
    "task": "deployments.rollouts_reconcile",
    "schedule": watched(1.0, 15.0, "deployments.selectors.rollouts:rollouts_watched"),
    "options": {"queue": "control", "expires": 3},
}
# Releases (build -> tune -> canary): move each active one on when its build or rollout ends.
app.conf.beat_schedule["deployments-releases-reconcile"] = {
    "task": "deployments.releases_reconcile",
    "schedule": watched(2.0, 15.0, "deployments.selectors.releases:releases_watched"),
    "options": {"queue": "control", "expires": 5},
}
app.conf.beat_schedule["monitoring-canary-tick"] = {
    "task": "monitoring.canary_tick",
    "schedule": watched(1.0, 15.0, "deployments.selectors.rollouts:rollouts_watched"),
    "options": {"queue": "control", "expires": 3},
}
# Online experiments: drain the gateway's exposure/feedback streams; analyse running experiments.
app.conf.beat_schedule["experiments-ingest"] = {
    "task": "experiments.ingest",
    "schedule": 1.0,
    "options": {"queue": "control", "expires": 3},
}
app.conf.beat_schedule["experiments-analyze"] = {
    "task": "experiments.analyze",
    "schedule": 15.0,
    "options": {"queue": "control", "expires": 30},
}
app.conf.beat_schedule["experiments-retention"] = {
    "task": "experiments.retention",
    "schedule": 3600.0,
    "options": {"queue": "control", "expires": 600},
}
