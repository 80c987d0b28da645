"""Writes of rollouts. Every transition goes through `_transition` on a
row locked with select_for_update: it checks the state machine
(deployments/rollout_machine.py), bumps the rollout's generation, and writes the audit
Event in the same transaction. The gateway's route table is derived from these rows
(deployments/routes.py), so a committed transition is live within one gateway poll.

Two drivers move a rollout:
- `rollout_reconcile` (deployments, every tick): loading → traffic once the candidate is
  READY on every replica; rolling_back → unload (drain) → rolled_back; promoting →
  (grace period) → stable swapped, old stable unloaded → succeeded.
- `rollout_apply_verdict` (called by monitoring's canary judge): the statistical
  decision for shadow / canary / promoting.
Manual controls (promote, pause, resume, rollback) are services too; the API, the
dashboard and the admin call them.

Why this is one long module: the rollout's writes (start, reconcile, verdicts, manual controls)
all go through one transition helper that checks the machine and records the event; the pool
side (its models loaded, waited on and unloaded) is in rollout_loads.py.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from deployments.lock_objects import endpoint_for_update, rollout_for_update
from deployments.models import Endpoint, PoolModelState, Rollout
from deployments.rollout_machine import (
    DEFAULT_PLAN,
    FULL_BP,
    TERMINAL,
    WAITING_FOR_TRAFFIC,
    Decision,
    IllegalTransition,
    Plan,
    State,
    Strategy,
    Verdict,
    check_transition,
    on_loading,
    on_promoting,
    on_rolling_back,
    on_tick,
)
from deployments.route_overlays import route_overlays
from deployments.selectors.compatibility import require_servable_beside_stable
from deployments.services import rollout_loads as loads
from deployments.services.endpoints import require_servable
from kernel.errors import Conflict, InvalidInput
from registry.models import Artifact, EventAction, Role, Task
from registry.names import baseline_triton_name
from registry.services.events import event_record
from registry.services.teams import require_role


def _require_cold_control(endpoint, strategy, steps, baseline: bool) -> None:
    """A generative recommender's canary starts with an empty cache while the stable's is warm:
    its first requests are all misses. It is judged against the fair baseline, a copy of the
    stable loaded with it and as cold (monitoring/judge/gr_guardrails.py), so it cannot be left out."""
    split = Strategy(strategy) == Strategy.CANARY and any(s < FULL_BP for s in steps)
    if split and not baseline and endpoint.stable_artifact.version.model.task == Task.GENERATIVE_REC:
        raise InvalidInput(
            "fair_baseline: a generative recommender's canary starts with a cold cache and is judged against "
            "an equally cold copy of the stable; leave fair_baseline on.",
            code="cold_cache_needs_baseline",
            field="fair_baseline",
        )


def rollout_start(
    *,
    user,
    endpoint: Endpoint,
    candidate: Artifact,
    strategy: str = Strategy.CANARY,
    steps_bp=None,
    shadow_seconds: float = DEFAULT_PLAN.shadow_seconds,
    shadow_sample_rate: float = 1.0,
    step_min_seconds: float = DEFAULT_PLAN.step_min_seconds,
    step_min_requests: int = DEFAULT_PLAN.step_min_requests,
    step_deadline_seconds: float = DEFAULT_PLAN.step_deadline_seconds,
    on_inconclusive: str | None = None,
    promote_grace_seconds: float = 30.0,
    fair_baseline: bool = True,
    origin: dict | None = None,
    origin_reason: str = "",
) -> Rollout:
    """Start bringing `candidate` into `endpoint`: it is loaded into the endpoint's pool and
    gets traffic only once READY on every replica. One rollout per endpoint at a time.

    `fair_baseline` (canary strategy): a fresh copy of the stable artifact is loaded too,
    under its own Triton name, and gets the candidate's share of traffic; the judge compares
    the candidate with it (both arms small, both equally cold), the stable serves the rest,
    and the copy is unloaded when the rollout ends. If the copy cannot be loaded the
    rollout goes on against the stable and says so. `on_inconclusive`: the endpoint's
    policy unless given. `origin` / `origin_reason`: why this rollout was started (a retry,
    an undo), recorded on its creation event."""
    require_role(user=user, team=endpoint.team, role=Role.DEPLOYER)
    require_servable(candidate, endpoint.team, "candidate")
    if endpoint.stable_artifact_id is None:
        raise InvalidInput(
            "endpoint: it has no stable artifact to compare against; create it with one.",
            code="no_stable",
            field="endpoint",
        )
    if candidate.pk == endpoint.stable_artifact_id:
        raise InvalidInput(
            "candidate: it is already the stable artifact of this endpoint.", code="already_stable", field="candidate"
        )
    require_servable_beside_stable(endpoint=endpoint, artifact=candidate, field="candidate")
    overlay = route_overlays([endpoint]).get(endpoint.pk)
    if overlay is not None:
        raise Conflict(
            f"Endpoint {endpoint.name!r} is running experiment {overlay.name}; stop it or let it decide first.",
            code="experiment_running",
        )
    if strategy == Strategy.BLUE_GREEN:
        steps_bp = [FULL_BP]
    steps = tuple(int(s) for s in (steps_bp or DEFAULT_PLAN.steps_bp))
    on_inconclusive = on_inconclusive or endpoint.on_inconclusive
    baseline = bool(fair_baseline) and Strategy(strategy) == Strategy.CANARY and any(s < FULL_BP for s in steps)
    _require_cold_control(endpoint, strategy, steps, baseline)
    try:
        plan = Plan(
            strategy=Strategy(strategy),
            steps_bp=steps,
            shadow_seconds=float(shadow_seconds),
            step_min_seconds=float(step_min_seconds),
            step_min_requests=int(step_min_requests),
            step_deadline_seconds=float(step_deadline_seconds),
            on_inconclusive=on_inconclusive,
            baseline=baseline,
        )
    except ValueError as exc:
        raise InvalidInput(f"plan: {exc}", code="bad_plan", field="steps_bp") from None
    if not 0 <= float(shadow_sample_rate) <= 1:
        raise InvalidInput("shadow_sample_rate: give a fraction in 0..1.", field="shadow_sample_rate")
    now = timezone.now()
    try:
        with transaction.atomic():
            rollout = Rollout.objects.create(
                endpoint=endpoint,
                candidate_artifact=candidate,
                baseline_artifact=endpoint.stable_artifact,
                strategy=plan.strategy,
                steps_bp=list(plan.steps_bp),
                shadow_seconds=plan.shadow_seconds,
                shadow_sample_rate=shadow_sample_rate,
                step_min_seconds=plan.step_min_seconds,
                step_min_requests=plan.step_min_requests,
                step_deadline_seconds=plan.step_deadline_seconds,
                on_inconclusive=plan.on_inconclusive,
                promote_grace_seconds=float(promote_grace_seconds),
                baseline_model=baseline_triton_name(endpoint.stable_artifact) if baseline else "",
                state=State.PENDING,
                state_entered_at=now,
                created_by=user,
            )
            event_record(
                actor=user,
                obj=rollout,
                team=endpoint.team,
                action=EventAction.CREATED,
                to_state=State.PENDING,
                reason=origin_reason,
                data={
                    "candidate": candidate.pk,
                    "baseline": endpoint.stable_artifact_id,
                    "steps_bp": list(plan.steps_bp),
                    "fair_baseline": rollout.baseline_model,
                    "on_inconclusive": plan.on_inconclusive,
                    **(origin or {}),
                },
            )
            asked, _ = loads.candidate_request(rollout, user, retry_failed=True)
            loads.baseline_request(rollout, user)
            reason = "candidate load requested" if asked else loads.draining_reason(rollout)
            _transition(rollout, State.LOADING, actor=user, reason=reason, now=now)
    except IntegrityError:
        raise Conflict(
            f"Endpoint {endpoint.name!r} already has a rollout in progress.", code="rollout_in_progress"
        ) from None
    return rollout


def _step_label(state: str, step_index: int) -> str:
    return f"{state}[{step_index}]" if state == State.CANARY else state


def _transition(
    rollout: Rollout,
    to_state: State,
    *,
    actor,
    reason: str,
    now: datetime,
    step_index: int | None = None,
    data: dict | None = None,
) -> Rollout:
    """Move a locked rollout; the caller holds the row lock inside its transaction."""
    old_state, old_step = rollout.state, rollout.step_index
    new_step = old_step if step_index is None else step_index
    check_transition(old_state, to_state)
    if to_state == State.PAUSED:
        rollout.paused_from = old_state
        rollout.paused_step_elapsed_s = (
            (now - rollout.step_started_at).total_seconds() if rollout.step_started_at else 0.0
        )
    elif (
        old_state == State.PAUSED
        and to_state in (State.SHADOW, State.CANARY)
        and to_state == rollout.paused_from
        and new_step == old_step
    ):
        rollout.step_started_at = now - timedelta(
            seconds=rollout.paused_step_elapsed_s or 0.0
        )  # the step timer resumes
        rollout.paused_from, rollout.paused_step_elapsed_s = "", None
    elif to_state in (State.SHADOW, State.CANARY) and (to_state != old_state or new_step != old_step):
        rollout.step_started_at = now
    if to_state in (State.SHADOW, State.CANARY) and rollout.traffic_started_at is None:
        rollout.traffic_started_at = now
    if to_state == State.ROLLING_BACK and rollout.traffic_stopped_at is None:
        rollout.traffic_stopped_at = now
    if to_state in TERMINAL:
        rollout.finished_at = now
    rollout.state, rollout.step_index, rollout.state_entered_at = to_state, new_step, now
    rollout.generation += 1
    rollout.reason = reason[:4000]
    rollout.save()
    event_record(
        actor=actor,
        obj=rollout,
        team=rollout.endpoint.team,
        action=EventAction.STATUS_CHANGED,
        from_state=_step_label(old_state, old_step),
        to_state=_step_label(to_state, new_step),
        reason=reason,
        data={"generation": rollout.generation, **(data or {})},
    )
    return rollout


def _plan_problem(rollout: Rollout) -> str:
    """Why the rollout's plan does not hold (Plan's own checks), or ""."""
    try:
        rollout.plan  # noqa: B018 - its checks run on construction
    except ValueError as exc:
        return str(exc)[:300]
    return ""


def rollout_reconcile(*, rollout_id: int, now: datetime | None = None) -> Rollout | None:
    """One reconcile step for a rollout; safe to run twice or concurrently (a row locked by
    another tick is skipped)."""
    now = now or timezone.now()
    with transaction.atomic():
        locked = rollout_for_update(rollout_id, skip_locked=True)
        if locked is None or locked.state in TERMINAL:
            return locked
        state = State(locked.state)
        if state != State.ROLLING_BACK and (problem := _plan_problem(locked)):
            # a row written around the API's checks: it rolls back alone, the other rollouts go on
            return _transition(
                locked, State.ROLLING_BACK, actor=None, reason=f"its plan does not hold ({problem})", now=now
            )
        if state in (State.PENDING, State.LOADING):
            return _reconcile_loading(locked, now)
        if state == State.ROLLING_BACK:
            return _reconcile_rolling_back(locked, now)
        if state == State.PROMOTING:
            return _reconcile_promoting(locked, now)
        return locked  # shadow / canary / paused: the judge (monitoring) or a person decides


def _reconcile_loading(locked: Rollout, now: datetime) -> Rollout:
    if locked.state == State.PENDING:
        asked, _ = loads.candidate_request(locked, locked.created_by, retry_failed=True)
        reason = "candidate load requested" if asked else loads.draining_reason(locked)
        return _transition(locked, State.LOADING, actor=None, reason=reason, now=now)
    try:  # a copy that was still draining when the rollout started (an undo right after a promotion)
        _, pool_model = loads.candidate_request(locked, locked.created_by, retry_failed=False)
    except Conflict:  # the pool cannot take it now (no replicas, being deleted): the load timeout decides
        pool_model = loads.pool_model_of(locked, locked.candidate_artifact)
    failed = pool_model is not None and pool_model.state == PoolModelState.FAILED
    decision = on_loading(
        plan=locked.plan,
        load_error=pool_model.error if failed else None,
        ready=not failed and loads.ready_everywhere(pool_model) and loads.baseline_ready(locked, now),
        waited_s=(now - locked.created_at).total_seconds(),
        load_timeout_s=locked.load_timeout_seconds,
    )
    if decision.to_state is None:
        return locked
    if decision.to_state == State.FAILED:
        loads.baseline_unload(locked)
        return _transition(locked, State.FAILED, actor=None, now=now, reason=decision.reason)
    reason = decision.reason + (
        f" beside a fresh baseline copy of the stable ({locked.baseline_model})" if locked.baseline_model else ""
    )
    return _transition(locked, decision.to_state, actor=None, now=now, reason=reason, step_index=decision.step_index)


def _reconcile_rolling_back(locked: Rollout, now: datetime) -> Rollout:
    loads.baseline_unload(locked)
    pool_state = loads.artifact_unload(locked, locked.candidate_artifact)
    off_pool = pool_state in ("", PoolModelState.UNLOADED, PoolModelState.FAILED) or loads.still_used(
        locked.candidate_artifact, locked.endpoint.pool_id, locked.pk
    )
    decision = on_rolling_back(step_index=locked.step_index, candidate_off_pool=off_pool, reason=locked.reason)
    if decision.to_state is None:
        return locked
    return _transition(locked, decision.to_state, actor=None, reason=decision.reason, now=now)


def _reconcile_promoting(locked: Rollout, now: datetime) -> Rollout:
    held = (now - locked.state_entered_at).total_seconds() if locked.state_entered_at else 0.0
    decision = on_promoting(step_index=locked.step_index, held_s=held, grace_s=locked.promote_grace_seconds)
    if decision.to_state is None:
        return locked
    endpoint = endpoint_for_update(locked.endpoint_id)
    old_stable = endpoint.stable_artifact
    endpoint.stable_artifact = locked.candidate_artifact
    endpoint.save(update_fields=["stable_artifact", "updated_at"])
    event_record(
        actor=None,
        obj=endpoint,
        action=EventAction.STABLE_CHANGED,
        from_state=str(getattr(old_stable, "pk", "")),
        to_state=str(locked.candidate_artifact_id),
        reason=f"rollout #{locked.pk} promoted",
    )
    locked.endpoint = endpoint
    rollout = _transition(locked, decision.to_state, actor=None, now=now, reason=decision.reason)
    loads.baseline_unload(rollout)
    if old_stable is not None and old_stable.pk != locked.candidate_artifact_id:
        loads.artifact_unload(rollout, old_stable)
    return rollout


def rollout_apply_verdict(
    *,
    rollout_id: int,
    outcome: str,
    reason: str,
    step_requests: int,
    now: datetime | None = None,
    verdict_id: int | None = None,
) -> tuple[Rollout | None, Decision | None]:
    """Apply the canary judge's verdict to a rollout in shadow, canary or promoting.

    fail → rolling_back now (the candidate's weight is 0 in the next route table);
    pass held for the step's minimum time and sample → next step / promote;
    inconclusive past the step deadline → the plan's policy. Returns (rollout, decision)."""
    now = now or timezone.now()
    with transaction.atomic():
        locked = rollout_for_update(rollout_id, skip_locked=True)
        if locked is None or locked.state not in (State.SHADOW, State.CANARY, State.PROMOTING):
            return locked, None
        if locked.state == State.PROMOTING:
            if outcome != Verdict.FAIL:
                return locked, None
            decision = Decision(State.ROLLING_BACK, locked.step_index, f"judge during promotion: {reason}")
        else:
            elapsed = (now - locked.step_started_at).total_seconds() if locked.step_started_at else 0.0
            decision = on_tick(
                state=locked.state,
                step_index=locked.step_index,
                plan=locked.plan,
                step_elapsed_s=elapsed,
                candidate_requests=step_requests,
                verdict=outcome,
                verdict_reason=reason,
            )
        if decision.to_state is None:
            waiting = reason.startswith(WAITING_FOR_TRAFFIC)
            if (waiting or locked.reason.startswith(WAITING_FOR_TRAFFIC)) and locked.reason != reason:
                # the rollout says it waits for traffic (the pages and `watch` read it), and stops saying so
                locked.reason = reason[:4000] if waiting else "the candidate gets requests: the judge is judging"
                locked.save(update_fields=["reason"])
            return locked, decision
        _transition(
            locked,
            decision.to_state,
            actor=None,
            now=now,
            reason=decision.reason,
            step_index=decision.step_index,
            data={"verdict": verdict_id, "outcome": outcome},
        )
        return locked, decision


def _manual(
    *, user, rollout: Rollout, to_state: State | None, reason: str, expected_generation: int | None = None
) -> Rollout:
    """A person's transition; `to_state=None` resumes the phase a paused rollout paused in."""
    require_role(user=user, team=rollout.endpoint.team, role=Role.DEPLOYER)
    with transaction.atomic():
        locked = rollout_for_update(rollout.pk)
        if expected_generation is not None and int(expected_generation) != locked.generation:
            raise Conflict(
                f"The rollout changed meanwhile (generation {locked.generation}, you saw {expected_generation}); reload and retry.",
                code="stale_generation",
            )
        if to_state is None:
            if locked.state != State.PAUSED:
                raise Conflict(f"rollout #{locked.pk} is {locked.state}, not paused.", code="illegal_transition")
            to_state = State(locked.paused_from or State.CANARY)
        try:
            return _transition(locked, to_state, actor=user, now=timezone.now(), reason=reason)
        except IllegalTransition as exc:
            raise Conflict(f"{exc}.", code="illegal_transition") from None


def rollout_promote(*, user, rollout: Rollout, reason: str = "", expected_generation: int | None = None) -> Rollout:
    """Skip the remaining steps: 100 % to the candidate, then the grace period."""
    return _manual(
        user=user,
        rollout=rollout,
        to_state=State.PROMOTING,
        reason=reason or f"promoted by {user}",
        expected_generation=expected_generation,
    )


def rollout_pause(*, user, rollout: Rollout, reason: str = "", expected_generation: int | None = None) -> Rollout:
    """Hold the current split; the step timer stops until resume."""
    return _manual(
        user=user,
        rollout=rollout,
        to_state=State.PAUSED,
        reason=reason or f"paused by {user}",
        expected_generation=expected_generation,
    )


def rollout_resume(*, user, rollout: Rollout, reason: str = "", expected_generation: int | None = None) -> Rollout:
    """Back to the phase and step it paused in, with the step timer where it stopped."""
    return _manual(
        user=user,
        rollout=rollout,
        to_state=None,
        reason=reason or f"resumed by {user}",
        expected_generation=expected_generation,
    )


def rollout_rollback(*, user, rollout: Rollout, reason: str = "", expected_generation: int | None = None) -> Rollout:
    """Candidate weight to 0 at once (next route table), then drain and unload it."""
    return _manual(
        user=user,
        rollout=rollout,
        to_state=State.ROLLING_BACK,
        reason=reason or f"rolled back by {user}",
        expected_generation=expected_generation,
    )
