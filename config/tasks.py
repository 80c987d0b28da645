import os
import socket

from celery import shared_task
from django.utils import timezone

from config.models import ComponentHeartbeat


@shared_task(name="platform.heartbeat", ignore_result=True, expires=20)
def heartbeat(scheduled_at: str | None = None) -> None:
    """Run by a worker every few seconds on beat's schedule: proves broker, beat and a worker live."""
    now = timezone.now()
    detail = {"host": socket.gethostname(), "pid": os.getpid()}
    ComponentHeartbeat.objects.update_or_create(name="worker", defaults={"seen_at": now, "detail": detail})
    ComponentHeartbeat.objects.update_or_create(name="beat", defaults={"seen_at": now, "detail": {"via": "platform.heartbeat"}})
