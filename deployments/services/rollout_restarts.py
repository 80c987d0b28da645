"""Rollouts started from another one: `rollout_retry` (the same candidate and plan again,
after a rollback or a failure) and `rollout_undo` (the endpoint back to the stable it had
before its last promotion). Both start an ordinary rollout through `rollout_start`, so the
candidate is loaded, gets traffic only once READY and is judged like any other; the new
rollout's creation event says where it came from (`retry_of` / `undo_of`), and an undo
also leaves an event on the endpoint.

Why a new rollout and not a rewind: a rollout that ended is history (its events and
verdicts stay as they were), and the previous stable was unloaded when it was replaced,
so it has to be loaded again before it may take traffic."""

from __future__ import annotations

from django.db import transaction

from deployments.models import Endpoint, Rollout
from deployments.rollout_machine import FULL_BP, UNDO_PLAN, State
from deployments.selectors.pools import artifact_get
from deployments.services.rollouts import rollout_start
from kernel.errors import Conflict, NotFound
from registry.models import Artifact, EventAction, Role
from registry.names import variant_name
from registry.selectors.events import event_list
from registry.services.events import event_record
from registry.services.teams import require_role

RETRYABLE = (State.ROLLED_BACK, State.FAILED)


def rollout_retry(*, user, rollout: Rollout, reason: str = "") -> Rollout:
    """Start the rolled-back or failed `rollout` again: its candidate with its plan (steps,
    minimums, deadline, policy, shadow, fair baseline), against the endpoint's stable now.
    409 `not_retryable` while it runs or after it succeeded."""
    require_role(user=user, team=rollout.endpoint.team, role=Role.DEPLOYER)
    if rollout.state not in RETRYABLE:
        raise Conflict(
            f"rollout #{rollout.pk} is {rollout.state}; only a rolled back or failed rollout can be retried.",
            code="not_retryable",
        )
    return rollout_start(
        user=user,
        endpoint=rollout.endpoint,
        candidate=rollout.candidate_artifact,
        strategy=rollout.strategy,
        steps_bp=list(rollout.steps_bp),
        shadow_seconds=rollout.shadow_seconds,
        shadow_sample_rate=rollout.shadow_sample_rate,
        step_min_seconds=rollout.step_min_seconds,
        step_min_requests=rollout.step_min_requests,
        step_deadline_seconds=rollout.step_deadline_seconds,
        on_inconclusive=rollout.on_inconclusive,
        promote_grace_seconds=rollout.promote_grace_seconds,
        fair_baseline=bool(rollout.baseline_model),
        origin={"retry_of": rollout.pk},
        origin_reason=reason or f"retry of rollout #{rollout.pk} ({rollout.state}) by {user}",
    )


def previous_stable(*, user, endpoint: Endpoint) -> Artifact | None:
    """The artifact the endpoint served before its current stable: the `from` of the last
    stable change that made the current stable stable; None when it never changed."""
    if endpoint.stable_artifact_id is None:
        return None
    change = (
        event_list(user=user, object_type=endpoint._meta.label_lower, object_id=endpoint.pk)
        .filter(action=EventAction.STABLE_CHANGED, to_state=str(endpoint.stable_artifact_id))
        .exclude(from_state="")
        .order_by("-time", "-id")
        .first()
    )
    if change is None or not change.from_state.isdigit():
        return None
    try:
        return artifact_get(user=user, artifact_id=int(change.from_state))
    except NotFound:  # deleted since, or no longer visible
        return None


def rollout_undo(
    *,
    user,
    endpoint: Endpoint,
    reason: str = "",
    steps_bp=None,
    step_min_seconds: float = UNDO_PLAN.step_min_seconds,
    step_min_requests: int = UNDO_PLAN.step_min_requests,
    promote_grace_seconds: float = 0.0,
) -> Rollout:
    """Bring back the endpoint's previous stable (what it served before its last promotion)
    as a rollout: by default one step at 100 % that promotes on the judge's first pass (the
    previous stable served all the traffic before), after 30 s without traffic (nothing to
    judge), or at the step deadline without a verdict (UNDO_PLAN: nothing showed it worse). 409 `no_previous_stable` when the
    endpoint's stable never changed (or the previous one is gone); the usual 409s when a
    rollout or an experiment runs."""
    require_role(user=user, team=endpoint.team, role=Role.DEPLOYER)
    previous = previous_stable(user=user, endpoint=endpoint)
    if previous is None:
        raise Conflict(
            f"Endpoint {endpoint.name!r} has no previous stable to go back to: its stable artifact never changed "
            "by a promotion.",
            code="no_previous_stable",
        )
    current = endpoint.stable_artifact
    why = reason or f"undo by {user}: back to {variant_name(previous)} (artifact {previous.pk})"
    with transaction.atomic():  # the rollout and the endpoint's event, or neither
        rollout = rollout_start(
            user=user,
            endpoint=endpoint,
            candidate=previous,
            steps_bp=steps_bp or [FULL_BP],
            step_min_seconds=step_min_seconds,
            step_min_requests=step_min_requests,
            step_deadline_seconds=max(600.0, step_min_seconds),
            on_inconclusive=UNDO_PLAN.on_inconclusive,
            promote_grace_seconds=promote_grace_seconds,
            origin={"undo_of": current.pk},
            origin_reason=why,
        )
        event_record(
            actor=user,
            obj=endpoint,
            action=EventAction.UPDATED,
            from_state=str(current.pk),
            to_state=str(previous.pk),
            reason=f"{why} (rollout #{rollout.pk})",
            data={"undo": True, "rollout": rollout.pk, "from_artifact": current.pk, "to_artifact": previous.pk},
        )
    return rollout
