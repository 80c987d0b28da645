"""A rollout's live status for GET /api/v1/rollouts/{id}/status/: its transitions, the
judge's latest verdicts (through deployments.rollout_verdicts) and who rolled it back,
besides the rollout itself (which the API serializes). `modelplane rollout watch` polls it,
one request per poll, with If-None-Match."""

from __future__ import annotations

from deployments.rollout_machine import State
from deployments.rollout_verdicts import latest_verdicts
from registry.selectors.events import event_list

EVENTS_SHOWN = 100  # a rollout has a few transitions per step; the latest are kept
VERDICTS_SHOWN = 10  # the judge writes one a second while the candidate gets traffic


def rolled_back_by(event) -> dict | None:
    """Who sent the rollout to rolling_back: a person (abort / rollback), the judge (a
    failed verdict, or the plan's policy at a step deadline without a conclusive one), or
    the platform (e.g. a plan that no longer holds)."""
    if event is None:
        return None
    data = event.data or {}
    if event.actor_id:
        kind = "person"
    elif data.get("verdict") is not None or data.get("outcome"):
        kind = "judge"
    else:
        kind = "platform"
    return {
        "kind": kind,
        "actor": str(event.actor) if event.actor_id else None,
        "reason": event.reason,
        "time": event.time,
    }


def rollout_status(*, user, rollout) -> dict:
    """{events (oldest first), verdicts (oldest first), rolled_back_by}."""
    events = event_list(user=user, object_type=rollout._meta.label_lower, object_id=rollout.pk)
    recent = list(events.order_by("-time", "-id")[:EVENTS_SHOWN])
    back = events.filter(to_state=State.ROLLING_BACK).order_by("-time", "-id").first()
    return {
        "events": [
            {
                "id": e.id,
                "time": e.time,
                "actor": str(e.actor) if e.actor_id else None,
                "action": e.action,
                "from_state": e.from_state,
                "to_state": e.to_state,
                "reason": e.reason,
            }
            for e in reversed(recent)
        ],
        "verdicts": list(reversed(latest_verdicts(user=user, rollout_id=rollout.pk, limit=VERDICTS_SHOWN))),
        "rolled_back_by": rolled_back_by(back),
    }
