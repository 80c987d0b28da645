"""The state of an endpoint's page, built once per request: the header's status, the
selected rollout's card (split, step "k of n", step timer), and the table of rollouts all
read the same Rollout rows, so no part of the page can contradict another.
The page and each htmx refresh render from `endpoint_page`; monitoring's template tags add
the judge's verdicts and the open alerts in the same response."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from deployments.rollout_machine import ACTIVE, TERMINAL, TRANSITIONS, State, VariantRole
from deployments.selectors.rollouts import rollout_list
from registry.names import baseline_variant_name, variant_name
from registry.selectors.events import event_list

TABLE_ROWS = 20
_BADGE = {
    State.SUCCEEDED: "succeeded",
    State.ROLLED_BACK: "failed",
    State.FAILED: "failed",
    State.ROLLING_BACK: "failed",
    State.PAUSED: "warning",
}


# The words of `arms` (the rollout API's field, the page and the CLI): the route table's
# roles, with the rollout's canary called "candidate" as people say it.
ARM_ROLES = ("stable", "baseline", "candidate", "shadow", "arm")
# One colour per role, the same on every page and in every rollout (never per variant name).
ROLE_COLORS = {
    "stable": "#2f5bea",
    "baseline": "#7a5af8",
    "candidate": "#f79009",
    "shadow": "#667085",
    "arm": "#12805c",
}


def rollout_arms(rollout) -> list[dict]:
    """Every arm of a rollout with its share now: [{"role", "variant", "weight_bp"}], the
    candidate first, then the fair baseline (when the rollout has one), then the stable;
    the weights add up to 10,000 bp (a shadow's copies are weight 0). The one source of
    the rollout API's `arms`, the endpoint page's split and the CLI's watch view."""
    split = rollout.split
    role = "shadow" if split.candidate_role == VariantRole.SHADOW else "candidate"
    arms = [{"role": role, "variant": variant_name(rollout.candidate_artifact), "weight_bp": split.candidate_bp}]
    if rollout.baseline_model:
        arms.append(
            {
                "role": "baseline",
                "variant": baseline_variant_name(rollout.baseline_artifact),
                "weight_bp": split.baseline_bp,
            }
        )
    arms.append({"role": "stable", "variant": variant_name(rollout.baseline_artifact), "weight_bp": split.stable_bp})
    return arms


def arms_text(arms: list[dict]) -> str:
    """ "candidate 25 % · baseline 25 % · stable 50 %": what the page and the CLI print."""
    return " · ".join(f"{arm['role']} {arm['weight_bp'] / 100:g} %" for arm in arms)


@dataclass(frozen=True)
class StepTimer:
    seconds: float
    running: bool  # False once the rollout is paused or over: the figure no longer moves


@dataclass(frozen=True)
class RolloutStatus:
    """What every part of the page says about one rollout."""

    rollout: object
    state: str
    label: str  # "canary · step 2 of 4", "rolled back"
    badge: str
    active: bool
    step_number: int | None  # 1-based, only while stepping through the canary weights
    step_count: int
    stable_pct: float
    candidate_pct: float
    candidate_role: str
    steps_pct: list[float]
    timer: StepTimer | None
    candidate_variant: str
    baseline_variant: str
    arms: list  # rollout_arms(), each with its "pct" and "color" for the page
    arms_text: str
    actions: tuple[str, ...] = ()  # the buttons the state allows now (rollout_actions)
    outcome_text: str = ""  # once over: who serves now, in place of a split that no longer holds


def rollout_actions(state: State) -> tuple[str, ...]:
    """What a person may do to a rollout in `state`, from the machine's own transitions: no
    Pause while it loads (the machine refuses it), no Promote while it promotes."""
    allowed = TRANSITIONS.get(state, frozenset())
    actions = []
    if State.PAUSED in allowed:
        actions.append("pause")
    if state == State.PAUSED:
        actions.append("resume")
    if State.PROMOTING in allowed:
        actions.append("promote")
    if State.ROLLING_BACK in allowed:
        actions.append("rollback")
    return tuple(actions)


def outcome_text(rollout, state: State) -> str:
    """Who serves once a rollout is over (its last split no longer describes the endpoint)."""
    candidate, stable = variant_name(rollout.candidate_artifact), variant_name(rollout.baseline_artifact)
    if state == State.SUCCEEDED:
        return f"{candidate} is the stable now and takes 100 % of traffic"
    if state in (State.ROLLED_BACK, State.FAILED):
        return f"{stable} stayed the stable and takes 100 % of traffic; {candidate} serves none"
    return ""


def step_label(rollout) -> str:
    """The one wording of a rollout's position, used by the header, the card and the table."""
    state = State(rollout.state)
    steps = len(rollout.plan.steps_bp)
    if state == State.CANARY:
        return f"canary · step {rollout.step_index + 1} of {steps}"
    if state == State.PAUSED and rollout.paused_from == State.CANARY:
        return f"paused · step {rollout.step_index + 1} of {steps}"
    return state.value.replace("_", " ")


_AUDIT_STEP = re.compile(r"^canary\[(\d+)\]$")


def audit_state_label(value: str, step_count: int) -> str:
    """An audit event's state ("canary[1]", kept so for the CLI and the API) in the page's
    words: "canary · step 2 of 4"."""
    match = _AUDIT_STEP.match(value or "")
    if match:
        return f"canary · step {int(match.group(1)) + 1} of {step_count}"
    return (value or "").replace("_", " ")


def rollout_events(*, user, rollout, limit: int = 30) -> list:
    """The rollout's audit trail for the page, its states in the words of the header."""
    steps = len(rollout.plan.steps_bp)
    events = list(event_list(user=user, object_type="deployments.rollout", object_id=rollout.pk)[:limit])
    for event in events:  # display copies: never saved
        event.from_state = audit_state_label(event.from_state, steps) if event.from_state else ""
        event.to_state = audit_state_label(event.to_state, steps)
    return events


def _timer(rollout, now: datetime) -> StepTimer | None:
    if rollout.step_started_at is None:
        return None
    if rollout.state == State.PAUSED and rollout.paused_step_elapsed_s is not None:
        return StepTimer(rollout.paused_step_elapsed_s, running=False)
    if rollout.state in TERMINAL or rollout.state == State.ROLLING_BACK:
        # Frozen at the moment the step ended: traffic stopped (rollback) or the rollout finished.
        ended = rollout.traffic_stopped_at or rollout.finished_at or rollout.state_entered_at or now
        return StepTimer(max(0.0, (ended - rollout.step_started_at).total_seconds()), running=False)
    return StepTimer(max(0.0, (now - rollout.step_started_at).total_seconds()), running=True)


def rollout_status(rollout, *, now: datetime | None = None) -> RolloutStatus:
    now = now or timezone.now()
    split = rollout.split
    state = State(rollout.state)
    stepping = state == State.CANARY or (state == State.PAUSED and rollout.paused_from == State.CANARY)
    arms = rollout_arms(rollout)
    return RolloutStatus(
        rollout=rollout,
        state=state.value,
        label=step_label(rollout),
        badge=_BADGE.get(state, "running"),
        active=state in ACTIVE,
        step_number=rollout.step_index + 1 if stepping else None,
        step_count=len(rollout.plan.steps_bp),
        stable_pct=split.stable_bp / 100,
        candidate_pct=split.candidate_bp / 100,
        candidate_role=split.candidate_role or "",
        steps_pct=[s / 100 for s in rollout.plan.steps_bp],
        timer=_timer(rollout, now),
        candidate_variant=variant_name(rollout.candidate_artifact),
        baseline_variant=variant_name(rollout.baseline_artifact),
        arms=[{**arm, "pct": arm["weight_bp"] / 100, "color": ROLE_COLORS[arm["role"]]} for arm in arms],
        arms_text=arms_text(arms),
        actions=rollout_actions(state),
        outcome_text=outcome_text(rollout, state),
    )


def chart_config(rollout, *, now: datetime | None = None) -> dict:
    """What the endpoint page's three charts share: one time range (from a minute before
    the rollout started to now, or to a minute after its traffic stopped once it is over)
    and the rollout's arms with their role colours (only these variants are drawn)."""
    now = now or timezone.now()
    since = rollout.created_at - timedelta(minutes=1)
    ended = None
    if rollout.state in TERMINAL:
        ended = rollout.traffic_stopped_at or rollout.finished_at or rollout.state_entered_at
    until = min(now, ended + timedelta(minutes=1)) if ended else None
    return {
        "rollout": rollout.pk,
        "since": since.isoformat(),
        "until": until.isoformat() if until else None,  # None: the range ends now and moves on
        "arms": [
            {"role": arm["role"], "variant": arm["variant"], "color": ROLE_COLORS[arm["role"]]}
            for arm in rollout_arms(rollout)
        ],
    }


def endpoint_page(*, user, endpoint, rollout_id: int | None = None, now: datetime | None = None) -> dict:
    """Everything the endpoint page shows about rollouts, from one read of the rows: the
    selected rollout (the given one, else the newest), its status, and the table rows
    (whose entry for the selected rollout is the very same object)."""
    now = now or timezone.now()
    rollouts = list(rollout_list(user=user, endpoint=endpoint)[:TABLE_ROWS])
    rollout = None
    if rollout_id is not None:
        rollout = next((r for r in rollouts if r.pk == rollout_id), None)
        if rollout is None:
            rollout = rollout_list(user=user, endpoint=endpoint).filter(pk=rollout_id).first()
    elif rollouts:
        rollout = rollouts[0]
    statuses = {r.pk: rollout_status(r, now=now) for r in rollouts}
    current = statuses.get(rollout.pk) if rollout else None
    if rollout is not None and current is None:
        current = rollout_status(rollout, now=now)
    active = next((statuses[r.pk] for r in rollouts if r.state in ACTIVE), None)
    return {
        "endpoint": endpoint,
        "rollout": rollout,
        "status": current,
        "active_status": active,  # the header names the rollout in flight even when another is selected
        "table": [statuses[r.pk] for r in rollouts],
        "now": now,
    }
