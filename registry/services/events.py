"""The audit trail: every state change in every app is one Event row, written by the
service that makes the change, in the same transaction."""

from registry.models import Event


def event_record(
    *,
    actor,
    obj,
    action: str,
    team=None,
    from_state: str = "",
    to_state: str = "",
    reason: str = "",
    data: dict | None = None,
) -> Event:
    """Append one audit event; call inside the transaction of the change it records."""
    if team is None:
        team = getattr(obj, "team", None)
    return Event.objects.create(
        actor=actor if getattr(actor, "is_authenticated", False) else None,
        team=team,
        object_type=obj._meta.label_lower,
        object_id=str(obj.pk),
        object_repr=str(obj)[:200],
        action=action,
        from_state=from_state or "",
        to_state=to_state or "",
        reason=reason or "",
        data=data or {},
    )
