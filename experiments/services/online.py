"""Writes of online experiments: create, start, analyse, decide, ship, stop.

State machine (`TRANSITIONS`): draft -> running -> decided -> shipped | stopped; draft and
running may also stop. Every transition locks the row, checks the machine and writes the
audit Event in the same transaction. The decision itself is the pure function
experiments.decision.decide_experiment (over experiments.analysis.decide's per-arm
readings); `experiment_analyze` loads the numbers and each arm's machine guardrails
(services/guardrails.py: monitoring's judge, arm against control), calls it and saves
what it says; a failing guardrail stops the experiment for harm. Shipping starts a one-step (100 %) rollout of the winning arm through the
deployments services, so the existing rollout machinery makes it stable.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils import timezone

from deployments.rollout_machine import ACTIVE, FULL_BP, TERMINAL, UNDO_PLAN, Strategy
from deployments.rollout_machine import State as RolloutState
from deployments.selectors.compatibility import require_servable_beside_stable
from deployments.selectors.rollouts import rollout_list, rollout_outcomes
from deployments.services import pools as pool_services
from deployments.services import rollouts as rollout_services
from deployments.services.endpoints import require_servable
from experiments import analysis
from experiments.decision import decide_experiment
from experiments.models import Arm, Experiment, ExperimentState
from experiments.selectors.online import arms_analysis
from experiments.services import guardrails, mlflow_log
from experiments.store import default_store
from kernel.errors import Conflict, InvalidInput
from registry.models import EventAction, Role
from registry.names import variant_name
from registry.services.events import event_record
from registry.services.teams import require_role

S = ExperimentState
TRANSITIONS = {
    S.DRAFT: {S.RUNNING, S.STOPPED},
    S.RUNNING: {S.DECIDED, S.STOPPED},
    S.DECIDED: {S.SHIPPING, S.STOPPED, S.RUNNING},  # RUNNING: continue after a blocked/continue read
    S.SHIPPING: {S.SHIPPED, S.DECIDED},  # DECIDED again: the ship's rollout did not succeed (it says why)
    S.SHIPPED: set(),
    S.STOPPED: set(),
}
HISTORY_MAX = 500  # points kept for the chart (older ones are thinned)


def _transition(experiment: Experiment, to: str, *, actor, reason: str, data: dict | None = None) -> Experiment:
    if to not in TRANSITIONS[S(experiment.state)]:
        raise Conflict(
            f"experiment {experiment.name!r} is {experiment.state}; it cannot become {to}.", code="illegal_transition"
        )
    from_state = experiment.state
    experiment.state = to
    now = timezone.now()
    if to == S.RUNNING and experiment.started_at is None:
        experiment.started_at = now
    if to in (S.SHIPPED, S.STOPPED, S.DECIDED) and from_state != S.SHIPPING:
        experiment.ended_at = now
    try:
        with transaction.atomic():
            experiment.save()
    except IntegrityError:
        raise Conflict("endpoint already runs another experiment.", code="experiment_running") from None
    event_record(
        actor=actor,
        obj=experiment,
        team=experiment.endpoint.team,
        action=EventAction.STATUS_CHANGED,
        from_state=from_state,
        to_state=to,
        reason=reason,
        data=data or {},
    )
    return experiment


def _locked(experiment: Experiment) -> Experiment:
    """The experiment and its endpoint locked (a rollout's start locks the endpoint too: one of
    them runs at a time); not the team's row, which the pool supervisor's pool lock joined
    (the two deadlocked on it when an experiment started on a reconciling pool)."""
    return (
        Experiment.objects.select_for_update(of=("self", "endpoint"))
        .select_related("endpoint__team")
        .get(pk=experiment.pk)
    )


def experiment_create(
    *,
    user,
    endpoint,
    name: str,
    candidates: list,
    allocation_bp: list[int] | None = None,
    hypothesis: str = "",
    **settings_,
) -> Experiment:
    """A draft experiment: the endpoint's stable artifact is the control arm, `candidates`
    (artifacts of the team) the other arms; allocation in basis points, control first."""
    require_role(user=user, team=endpoint.team, role=Role.DEPLOYER)
    if endpoint.stable_artifact_id is None:
        raise InvalidInput("endpoint: it has no stable artifact to be the control.", code="no_stable", field="endpoint")
    if not candidates:
        raise InvalidInput("candidates: give at least one candidate artifact.", field="candidates")
    arms = [endpoint.stable_artifact, *candidates]
    if len({a.pk for a in arms}) != len(arms):
        raise InvalidInput(
            "candidates: each arm needs a different artifact (and not the stable one).", field="candidates"
        )
    for artifact in candidates:
        require_servable(artifact, endpoint.team, "candidates")
        require_servable_beside_stable(endpoint=endpoint, artifact=artifact, field="candidates")
    allocation_bp = list(allocation_bp or [])
    if not allocation_bp:
        share = FULL_BP // len(arms)
        allocation_bp = [FULL_BP - share * (len(arms) - 1)] + [share] * (len(arms) - 1)
    if len(allocation_bp) != len(arms) or any(int(b) <= 0 for b in allocation_bp) or sum(allocation_bp) != FULL_BP:
        raise InvalidInput(
            f"allocation_bp: give {len(arms)} positive shares (control first) summing to {FULL_BP}.",
            field="allocation_bp",
        )
    for field in ("mde",):
        if field in settings_ and not settings_[field]:
            raise InvalidInput("mde: give a non-zero relative effect, e.g. 0.05.", field="mde")
    experiment = Experiment(
        endpoint=endpoint,
        name=name,
        hypothesis=hypothesis,
        created_by=user,
        unit_header=endpoint.sticky_header,
        **settings_,
    )
    try:
        plan = analysis.plan_sample(
            baseline=experiment.baseline_rate,
            mde=experiment.mde,
            alpha=experiment.alpha,
            power=experiment.power,
            exposures_per_unit=experiment.exposures_per_unit,
            allocation=(allocation_bp[0], min(allocation_bp[1:])),
        )
    except ValueError as exc:
        raise InvalidInput(f"plan: {exc}.", field="mde") from None
    experiment.planned_units_per_arm = plan.units_per_arm
    experiment.evidence = {
        "plan": {"units_per_arm": plan.units_per_arm, "fixed_units_per_arm": plan.fixed_units_per_arm}
    }
    with transaction.atomic():
        experiment.save()
        for i, (artifact, bp) in enumerate(zip(arms, allocation_bp)):
            Arm.objects.create(
                experiment=experiment,
                name=variant_name(artifact),
                artifact=artifact,
                is_control=i == 0,
                allocation_bp=int(bp),
            )
        event_record(
            actor=user,
            obj=experiment,
            team=endpoint.team,
            action=EventAction.CREATED,
            to_state=S.DRAFT,
            data={
                "arms": [variant_name(a) for a in arms],
                "allocation_bp": allocation_bp,
                "planned_units_per_arm": plan.units_per_arm,
            },
        )
    return experiment


def experiment_start(*, user, experiment: Experiment) -> Experiment:
    """Running: candidates are loaded into the endpoint's pool and the route table serves
    the arms (role `arm`) with the experiment's salt. No rollout may be in progress."""
    require_role(user=user, team=experiment.endpoint.team, role=Role.DEPLOYER)
    with transaction.atomic():
        locked = _locked(experiment)
        if rollout_list(user=user, endpoint=locked.endpoint).filter(state__in=list(ACTIVE)).exists():
            raise Conflict("endpoint has a rollout in progress; finish it first.", code="rollout_in_progress")
        if locked.arms.get(is_control=True).artifact_id != locked.endpoint.stable_artifact_id:
            raise Conflict(
                "the endpoint's stable artifact changed since the experiment was drafted.", code="stale_control"
            )
        for arm in locked.arms.filter(is_control=False).select_related("artifact"):
            pool_services.pool_load_request(user=user, pool=locked.endpoint.pool, artifact=arm.artifact)
        return _transition(locked, S.RUNNING, actor=user, reason="started")


def analysis_evaluate(*, experiment, arms, store, now, guardrail_source=None):
    """One tick's reading of `experiment` (not saved): the store's numbers, the guardrails, the
    analysis and the pure decision; sets history, evidence and analyzed_at on the instance.
    Returns (result, verdict, failing guardrails)."""
    sums, extras, counts = store.arm_sums(experiment)
    control = next(a for a in arms if a.is_control)
    if experiment.state == S.RUNNING:
        guards = guardrails.experiment_guardrails(experiment=experiment, arms=arms, now=now, source=guardrail_source)
    else:  # judged while it ran; a decided experiment keeps its last reading
        guards = guardrails.stored_guardrails(experiment)
    result = arms_analysis(experiment, arms, sums, extras, guards)
    result["feedback"] = counts
    result["plan"] = experiment.evidence.get("plan", {})
    result["guardrails"] = guards
    failed = guardrails.failing(guards)
    result["guardrails_ok"] = not failed
    point = {"t": now.isoformat(), "units": min((r["units"] for r in result["arms"].values()), default=0)}
    for name, cand in result["candidates"].items():
        point[name] = [cand["lift"], cand["lower"], cand["upper"]]
    history = experiment.history + [point]
    if len(history) > HISTORY_MAX:
        history = history[:1] + history[2::2] + history[-1:]
    experiment.history = history
    experiment.evidence = {
        **result,
        **({"ship": experiment.evidence["ship"]} if "ship" in experiment.evidence else {}),
    }
    experiment.analyzed_at, experiment.analysis_error = now, ""
    verdict = decide_experiment(
        state=experiment.state,
        control=control.name,
        candidates=result["candidates"],
        failed_guardrails=failed,
        srm=result["srm"],
    )
    return result, verdict, failed


def experiment_analyze(*, experiment_id: int, store=None, now=None) -> dict:
    """One analysis tick: numbers from the store, each candidate arm's machine guardrails
    (monitoring's judge against the control, experiments/services/guardrails.py), the pure
    decision, evidence and chart point saved. A failing guardrail stops a running
    experiment for harm (decided, decision `stop`, with the failing checks in its audit
    event and an alert); otherwise a ship/stop decision moves it to `decided`."""
    store = store or default_store()
    now = now or timezone.now()
    with transaction.atomic():
        experiment = _locked(Experiment(pk=experiment_id))
        arms = list(experiment.arms.all())
        result, verdict, failed = analysis_evaluate(experiment=experiment, arms=arms, store=store, now=now)
        if verdict.to_state is None:
            experiment.save(update_fields=["history", "evidence", "analyzed_at", "analysis_error"])
        else:
            experiment.decision = verdict.decision
            experiment.winner = next(a for a in arms if a.name == verdict.winner)
            _transition(experiment, verdict.to_state, actor=None, reason=verdict.reason, data=verdict.data)
            if verdict.harm:
                guardrails.raise_harm_alert(experiment=experiment, failed=failed, reason=verdict.reason)
    if experiment.state == S.DECIDED and not experiment.mlflow_run_id:
        run_id = mlflow_log.log_result(experiment, result)
        if run_id:
            Experiment.objects.filter(pk=experiment.pk).update(mlflow_run_id=run_id)
    return result


def experiment_ship(*, user, experiment: Experiment, reason: str = ""):
    """The winning arm becomes stable through a one-step rollout (100 %: loading -> canary ->
    promoting -> succeeded by the rollout reconcile): the experiment is `shipping` until that
    rollout succeeds (`shipped`, at the next analysis tick) or ends otherwise (`decided`
    again, its evidence and audit event saying why; Ship may be tried again)."""
    require_role(user=user, team=experiment.endpoint.team, role=Role.DEPLOYER)
    with transaction.atomic():
        locked = _locked(experiment)
        if locked.state != S.DECIDED or locked.decision != analysis.ArmDecision.SHIP or locked.winner_id is None:
            raise Conflict(
                f"experiment {locked.name!r} has no ship decision (state {locked.state}, decision "
                f"{locked.decision or 'none'}).",
                code="not_decided",
            )
        winner = locked.winner
        if winner.is_control:
            raise Conflict("the control won: nothing to ship.", code="control_won")
        # one step at 100 %, judged by the SLO guardrails; like an undo it needs no requests (the
        # winner served its share through the experiment): done after 30 s without traffic, or
        # at the deadline without a verdict (nothing showed it worse)
        rollout = rollout_services.rollout_start(
            user=user,
            endpoint=locked.endpoint,
            candidate=winner.artifact,
            strategy=Strategy.CANARY,
            steps_bp=[FULL_BP],
            step_min_requests=UNDO_PLAN.step_min_requests,
            on_inconclusive=UNDO_PLAN.on_inconclusive,
        )
        locked.rollout_id = rollout.pk
        locked.evidence = {**locked.evidence, "ship": {"rollout": rollout.pk, "state": "started"}}
        why = f"{winner.name} ships via rollout #{rollout.pk}" + (f": {reason}" if reason else "")
        return _transition(
            locked, S.SHIPPING, actor=user, reason=why, data={"rollout": rollout.pk, "winner": winner.name}
        )


def experiments_ship_follow(*, experiment_ids=None) -> int:
    """Each `shipping` experiment follows its rollout: succeeded -> `shipped`; rolled back or
    failed -> `decided` again with the rollout's reason (the page says the ship failed)."""
    shipping = Experiment.objects.filter(state=S.SHIPPING)
    if experiment_ids is not None:
        shipping = shipping.filter(pk__in=list(experiment_ids))
    pairs = dict(shipping.values_list("pk", "rollout_id"))
    outcomes = rollout_outcomes(rollout_ids=[r for r in pairs.values() if r])
    moved = 0
    for pk, rollout_id in pairs.items():
        state, why = outcomes.get(rollout_id, ("missing", "the rollout no longer exists"))
        if state not in TERMINAL and state != "missing":
            continue  # still shipping (what its rollout waits for: selectors.online.ship_status)
        with transaction.atomic():
            locked = _locked(Experiment(pk=pk))
            if locked.state != S.SHIPPING or locked.rollout_id != rollout_id:
                continue
            ship = {"rollout": rollout_id, "state": state, "reason": why}
            locked.evidence = {**locked.evidence, "ship": ship}
            if state == RolloutState.SUCCEEDED:
                _transition(locked, S.SHIPPED, actor=None, reason=f"rollout #{rollout_id} succeeded", data=ship)
            else:
                _transition(
                    locked,
                    S.DECIDED,
                    actor=None,
                    reason=f"ship failed: rollout #{rollout_id} {state}: {why}"[:4000],
                    data=ship,
                )
            moved += 1
    return moved


def experiment_stop(*, user, experiment: Experiment, reason: str = "") -> Experiment:
    """Stop: arms leave the route table at the next gateway poll; the control stays stable."""
    require_role(user=user, team=experiment.endpoint.team, role=Role.DEPLOYER)
    with transaction.atomic():
        locked = _locked(experiment)
        return _transition(locked, S.STOPPED, actor=user, reason=reason or f"stopped by {user}")
