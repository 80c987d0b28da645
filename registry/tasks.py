"""Celery tasks of the registry; thin: load by id, call the runner or a service. Each task
imports what it calls when it runs, so that the build services can import `build_run`."""

import os
import socket

from celery import shared_task

from registry.factory import conf


@shared_task(
    name="registry.build_run",
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
    soft_time_limit=int(conf.get("BUILD_SOFT_TIME_LIMIT_S")),
    time_limit=int(conf.get("BUILD_TIME_LIMIT_S")),
)
def build_run(self, build_id: int) -> str:
    """Run (or resume after a lost worker) one build; safe to deliver twice: the Build
    row's lease decides who works on it. Queue build-cpu or build-gpu (see build_start)."""
    from django.db import close_old_connections

    from registry.factory import runner

    close_old_connections()
    owner = f"{socket.gethostname()}:{os.getpid()}:{self.request.id}"
    try:
        return runner.run(int(build_id), owner=owner)
    finally:
        close_old_connections()


@shared_task(name="registry.builds_reclaim", ignore_result=True, acks_late=True, expires=60)
def builds_reclaim() -> int:
    """Periodic (beat): requeue running builds whose lease expired; a bounded batch."""
    from registry.services import builds as build_services

    return len(build_services.builds_reclaim())
