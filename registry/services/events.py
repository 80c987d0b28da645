"""The audit trail: every state change in every app is one Event row, written by the
service that makes the change, in the same transaction. Once that transaction commits,
the event is also one INFO line of the `modelplane.events` logger: what `make run` prints
(a build's status, a rollout's steps, an alert), so the terminal and the audit trail agree."""

import logging

from django.db import transaction

from registry.models import Event, EventAction

log = logging.getLogger("modelplane.events")


def event_record(
    *,
    actor,
    obj,
    action: EventAction,
    team=None,
    from_state: str = "",
    to_state: str = "",
    reason: str = "",
    data: dict | None = None,
) -> Event:
    """Append one audit event; call inside the transaction of the change it records.
    `action` is a member of EventAction (the trail's one vocabulary); anything else is a
    programming error, refused before anything is written."""
    if not isinstance(action, EventAction):
        raise TypeError(f"event_record: action {action!r} is not an EventAction (registry.models.EventAction)")
    if team is None:
        team = getattr(obj, "team", None)
    event = Event.objects.create(
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
    transaction.on_commit(lambda: log.info("%s", event_line(event)))
    return event


def event_line(event: Event) -> str:
    """One line a person reads: "rollout 4 (demo-ctr): step_1 -> step_2: the judge passed"."""
    kind = event.object_type.split(".", 1)[-1].replace("registeredmodel", "model").replace("modelversion", "version")
    subject = event.object_repr if event.object_repr.startswith(kind) else f"{kind} {event.object_repr}"
    text = f"{subject}: {event.action.replace('_', ' ')}"
    if event.from_state or event.to_state:
        text += (
            f" {event.from_state or '-'} -> {event.to_state or '-'}" if event.from_state else f" -> {event.to_state}"
        )
    if event.reason:
        text += f": {event.reason[:300]}"
    return text
