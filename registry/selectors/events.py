"""Reads of the audit trail (team-scoped)."""

from django.db.models import QuerySet

from registry.models import Event
from registry.selectors.teams import team_ids_for


def event_list(*, user, object_type: str | None = None, object_id: str | None = None) -> QuerySet:
    qs = Event.objects.select_related("actor", "team")
    ids = team_ids_for(user)
    if ids is not None:
        qs = qs.filter(team_id__in=ids)
    if object_type:
        qs = qs.filter(object_type=object_type)
    if object_id is not None:
        qs = qs.filter(object_id=str(object_id))
    return qs
