"""Signs of life of the background components (worker, beat, pool supervisor) that
GET /healthz checks: one ComponentHeartbeat row per component."""

from datetime import datetime

from django.utils import timezone

from config.models import ComponentHeartbeat


def heartbeat_record(*, name: str, detail: dict, at: datetime | None = None) -> None:
    ComponentHeartbeat.objects.update_or_create(name=name, defaults={"seen_at": at or timezone.now(), "detail": detail})
