import os
import socket

from celery import shared_task
from django.utils import timezone

from config.heartbeats import heartbeat_record


@shared_task(name="platform.heartbeat", ignore_result=True, expires=20)
def heartbeat(scheduled_at: str | None = None) -> None:
    """Run by a worker every few seconds on beat's schedule: proves broker, beat and a worker live."""
    now = timezone.now()
    detail = {"host": socket.gethostname(), "pid": os.getpid()}
    heartbeat_record(name="worker", detail=detail, at=now)
    heartbeat_record(name="beat", detail={"via": "platform.heartbeat"}, at=now)
