"""The rollout state machine as plain data and functions (no database access).

    pending → loading → [shadow] → canary(step 0..n-1) → promoting → succeeded
                 ↘ failed        ↘ paused ↔ (shadow | canary)
    any active state → rolling_back → rolled_back

Services persist the state (with select_for_update and a generation number) and write
an Event per transition; this module only says which transitions exist, what traffic
split a state implies, and what a reconcile tick should do next: while loading (on_loading:
started, failed or timed out), in shadow or canary given the judge's verdict (on_tick), rolling
back (on_rolling_back) and promoting (on_promoting). The services do the side effects (load and
unload requests, the endpoint's stable) and record what this module decided. Keeping it pure
makes every rule testable without processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

FULL_BP = 10_000  # weights are basis points: 10_000 = 100 %


class State(StrEnum):
    PENDING = "pending"
    LOADING = "loading"
    SHADOW = "shadow"
    CANARY = "canary"
    PAUSED = "paused"
    PROMOTING = "promoting"
    SUCCEEDED = "succeeded"
    ROLLING_BACK = "rolling_back"
    ROLLED_BACK = "rolled_back"
    FAILED = "failed"


TERMINAL = frozenset({State.SUCCEEDED, State.ROLLED_BACK, State.FAILED})
ACTIVE = frozenset(State) - TERMINAL

TRANSITIONS: dict[State, frozenset[State]] = {
    State.PENDING: frozenset({State.LOADING, State.ROLLING_BACK, State.FAILED}),
    State.LOADING: frozenset({State.SHADOW, State.CANARY, State.ROLLING_BACK, State.FAILED}),
    State.SHADOW: frozenset({State.CANARY, State.PROMOTING, State.PAUSED, State.ROLLING_BACK}),
    State.CANARY: frozenset({State.CANARY, State.PROMOTING, State.PAUSED, State.ROLLING_BACK}),
    State.PAUSED: frozenset({State.SHADOW, State.CANARY, State.PROMOTING, State.ROLLING_BACK}),
    State.PROMOTING: frozenset({State.SUCCEEDED, State.ROLLING_BACK}),
    State.ROLLING_BACK: frozenset({State.ROLLED_BACK}),
    State.SUCCEEDED: frozenset(),
    State.ROLLED_BACK: frozenset(),
    State.FAILED: frozenset(),
}


class IllegalTransition(ValueError):
    pass


def check_transition(current: str, target: str) -> None:
    if State(target) not in TRANSITIONS[State(current)]:
        raise IllegalTransition(f"a rollout in state {current} cannot go to {target}")


class VariantRole(StrEnum):
    """A variant's role in the gateway's route table (gateway/contracts/route_table.schema.json keeps
    the same words: the gateway imports nothing of Django)."""

    STABLE = "stable"  # the fallback and the rest of the traffic
    CANARY = "canary"  # a rollout's candidate
    SHADOW = "shadow"  # copies only
    BASELINE = "baseline"  # a fresh copy of the stable with the candidate's share (fair baseline)
    ARM = "arm"  # an online experiment's arm


class Strategy(StrEnum):
    CANARY = "canary"
    BLUE_GREEN = "blue-green"  # shadow, then switch


class Verdict(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"


class OnInconclusive(StrEnum):
    """What a step does when its deadline passes without a conclusive verdict.

    rollback: weight 0 at once; pause: hold the split and alert (a person decides);
    promote: nothing showed the candidate worse (no check failed, so non-inferiority
    could not be rejected): the step counts as passed and the rollout goes on (later
    steps are judged as usual)."""

    ROLLBACK = "rollback"
    PAUSE = "pause"
    PROMOTE = "promote"


DEFAULT_ON_INCONCLUSIVE = OnInconclusive.PAUSE  # never rolls a healthy-but-unproven candidate back


# The default canary steps. The first share is what detection time allows: at a 5 % share
# of 200 req/s a 2.5 %-failing candidate errs every 4 s, too little information for a
# verdict within 15 s; at 10 % (20 req/s to the candidate) two errors come in ~4 s median
# (docs/rollouts.md, "Detection time"). monitoring/judge/forecast.py suggests steps for an endpoint's own
# traffic (larger first steps at low traffic) and the endpoint page offers them.
DEFAULT_STEPS_BP = (1_000, 2_500, 5_000, FULL_BP)


class StepsProblem(StrEnum):
    """Why canary steps break the steps rule (each caller words it for its own readers)."""

    EMPTY = "empty"
    OUT_OF_RANGE = "out_of_range"  # a weight <= 0 or above FULL_BP
    NOT_INCREASING = "not_increasing"


@dataclass(frozen=True)
class Plan:
    """How a rollout proceeds: weights per step and what each step needs to pass.

    The one owner of the plan's defaults (`Plan()`, i.e. DEFAULT_PLAN: forms, serializers,
    services and the forecast read them from here) and of the steps rule (`steps_problem`)."""

    strategy: Strategy = Strategy.CANARY
    steps_bp: tuple[int, ...] = DEFAULT_STEPS_BP
    shadow_seconds: float = 0.0
    step_min_seconds: float = 30.0
    step_min_requests: int = 200
    step_deadline_seconds: float = 600.0
    on_inconclusive: str = DEFAULT_ON_INCONCLUSIVE
    baseline: bool = False  # a fresh copy of the stable gets the candidate's share (fair_baseline)

    STEPS_RULE = f"strictly increasing weights in (0, {FULL_BP}]"  # basis points (a class constant, not a field)

    @staticmethod
    def steps_problem(steps_bp) -> StepsProblem | None:
        """The steps rule: at least one weight, each in (0, FULL_BP], strictly increasing."""
        steps = list(steps_bp)
        if not steps:
            return StepsProblem.EMPTY
        if any(not 0 < s <= FULL_BP for s in steps):
            return StepsProblem.OUT_OF_RANGE
        if any(b <= a for a, b in zip(steps, steps[1:])):
            return StepsProblem.NOT_INCREASING
        return None

    def __post_init__(self):
        if self.strategy == Strategy.CANARY and self.steps_problem(self.steps_bp):
            raise ValueError(f"steps_bp must be {self.STEPS_RULE}")
        if self.strategy == Strategy.BLUE_GREEN and self.shadow_seconds <= 0:
            raise ValueError("blue-green needs a shadow phase (shadow_seconds > 0)")
        if self.on_inconclusive not in set(OnInconclusive):
            raise ValueError("on_inconclusive is rollback, pause or promote")
        if (
            self.step_min_seconds < 0
            or self.step_min_requests < 0
            or self.step_deadline_seconds < self.step_min_seconds
        ):
            raise ValueError("step minimums must be >= 0 and the deadline >= the minimum time")


DEFAULT_PLAN = Plan()  # what a rollout gets for every value it is not given
# `rollout undo`: the previous stable back at once, one step of all traffic with no minimum time or
# requests (it served before; the judge's SLO guardrails still watch it while it serves), and
# at the deadline without a verdict it goes on (nothing showed it worse)
UNDO_PLAN = Plan(steps_bp=(FULL_BP,), step_min_seconds=0.0, step_min_requests=0, on_inconclusive=OnInconclusive.PROMOTE)
# What the judge's reason starts with while the candidate has had no request (the endpoint
# page, the experiment page and `watch` show it).
WAITING_FOR_TRAFFIC = "waiting for traffic"
# A step whose plan needs no requests (an undo, a Ship) and that got none for this long is
# done: there is nothing to judge, and its plan asks for nothing.
NO_TRAFFIC_WAIT_S = 30.0


@dataclass(frozen=True)
class Split:
    """Traffic implied by a state: weights of stable, candidate and baseline (a fresh copy
    of the stable artifact with the candidate's share, when the plan has one), and the
    candidate's role."""

    stable_bp: int
    candidate_bp: int
    candidate_role: str  # VariantRole.CANARY, VariantRole.SHADOW or "" (not routed)
    baseline_bp: int = 0


def baseline_share(candidate_bp: int) -> int:
    """The baseline's weight beside a candidate at `candidate_bp`: the same share while
    that fits (up to 50 %), else what the candidate leaves (the stable then gets none)."""
    return max(0, min(candidate_bp, FULL_BP - candidate_bp))


def split_for(state: str, step_index: int, plan: Plan, paused_from: str = "") -> Split:
    state = State(state)
    if state == State.PAUSED:  # a paused rollout holds the traffic of the phase it paused in
        return split_for(paused_from or State.CANARY, step_index, plan)
    if state == State.SHADOW:
        return Split(FULL_BP, 0, VariantRole.SHADOW)
    if state == State.CANARY:
        weight = plan.steps_bp[min(step_index, len(plan.steps_bp) - 1)]
        baseline = baseline_share(weight) if plan.baseline else 0
        return Split(FULL_BP - weight - baseline, weight, VariantRole.CANARY, baseline)
    if state in (State.PROMOTING, State.SUCCEEDED):
        return Split(0, FULL_BP, VariantRole.CANARY)
    return Split(FULL_BP, 0, "")  # pending, loading, rolling back, rolled back, failed


@dataclass(frozen=True)
class Decision:
    to_state: State | None  # None: stay
    step_index: int
    reason: str


def after_loaded(plan: Plan) -> Decision:
    if plan.shadow_seconds > 0:
        return Decision(State.SHADOW, 0, f"candidate READY on every replica; shadow for {plan.shadow_seconds:g}s")
    return Decision(State.CANARY, 0, f"candidate READY on every replica; canary at {plan.steps_bp[0] / 100:g}%")


def on_loading(*, plan: Plan, load_error: str | None, ready: bool, waited_s: float, load_timeout_s: float) -> Decision:
    """What a reconcile tick does in LOADING: a candidate that failed to load (`load_error`,
    Triton's message) fails the rollout; READY on every replica (and its baseline, when the
    plan has one: `ready`) starts the first phase; not READY past `load_timeout_s` since the
    rollout was created fails it; else it waits."""
    if load_error is not None:
        return Decision(State.FAILED, 0, f"candidate failed to load: {load_error[:1500]}")
    if ready:
        return after_loaded(plan)
    if waited_s > load_timeout_s:
        return Decision(State.FAILED, 0, f"candidate not READY on every replica after {load_timeout_s:g}s")
    return Decision(None, 0, "")


def on_rolling_back(*, step_index: int, candidate_off_pool: bool, reason: str) -> Decision:
    """What a reconcile tick does in ROLLING_BACK: done once the candidate is off the pool
    (unloaded, failed, never loaded, or still used by another rollout, whose unload it is),
    with the reason it rolled back for; else it waits for the unload."""
    if candidate_off_pool:
        return Decision(State.ROLLED_BACK, step_index, reason or "rolled back")
    return Decision(None, step_index, "")


def on_promoting(*, step_index: int, held_s: float, grace_s: float) -> Decision:
    """What a reconcile tick does in PROMOTING: the candidate takes every request for
    `grace_s` (the judge still watches it) before it becomes the stable; then succeeded."""
    if held_s < grace_s:
        return Decision(None, step_index, "")
    return Decision(State.SUCCEEDED, step_index, f"promotion held for {grace_s:g}s; old stable unloaded")


def on_tick(
    *,
    state: str,
    step_index: int,
    plan: Plan,
    step_elapsed_s: float,
    candidate_requests: int,
    verdict: str,
    verdict_reason: str = "",
) -> Decision:
    """What a reconcile tick does in shadow or canary given the judge's verdict.

    fail → roll back now; pass for the step's minimum time and sample → next step (or
    promote after the last); inconclusive → wait, until the step deadline, then the
    plan's policy (roll back, pause, or go on as if passed). A step whose plan needs no
    requests (an undo, a Ship) and whose candidate got none for `NO_TRAFFIC_WAIT_S` is done
    (`candidate_requests`: the candidate's requests in the step, whatever the verdict).
    """
    state = State(state)
    if state not in (State.SHADOW, State.CANARY):
        return Decision(None, step_index, "")
    if verdict == Verdict.FAIL:
        return Decision(State.ROLLING_BACK, step_index, f"judge: {verdict_reason or 'candidate failed'}")
    enough = step_elapsed_s >= (plan.shadow_seconds if state == State.SHADOW else plan.step_min_seconds)
    enough = enough and (state == State.SHADOW or candidate_requests >= plan.step_min_requests)
    passed = "passed"
    if (
        verdict == Verdict.INCONCLUSIVE
        and state == State.CANARY
        and plan.step_min_requests == 0
        and candidate_requests == 0
        and step_elapsed_s >= max(plan.step_min_seconds, NO_TRAFFIC_WAIT_S)
    ):
        verdict, enough = Verdict.PASS, True
        passed = f"done: no request in {step_elapsed_s:.0f}s, nothing to judge, and the plan needs none"
    if verdict == Verdict.PASS and enough:
        if state == State.SHADOW:
            if plan.strategy == Strategy.BLUE_GREEN:
                return Decision(State.PROMOTING, step_index, "shadow passed; blue-green switch")
            return Decision(State.CANARY, 0, f"shadow passed; canary at {plan.steps_bp[0] / 100:g}%")
        if step_index + 1 >= len(plan.steps_bp):
            return Decision(State.PROMOTING, step_index, f"last step {passed}")
        nxt = step_index + 1
        return Decision(State.CANARY, nxt, f"step {step_index + 1} {passed}; canary at {plan.steps_bp[nxt] / 100:g}%")
    if step_elapsed_s >= plan.step_deadline_seconds:
        why = f"no conclusive verdict within the step deadline ({plan.step_deadline_seconds:g}s)"
        if verdict_reason:  # what the judge still waited for: what a person deciding reads first
            why += f"; the judge: {verdict_reason}"
        if plan.on_inconclusive == OnInconclusive.PAUSE:
            return Decision(State.PAUSED, step_index, why)
        if plan.on_inconclusive == OnInconclusive.PROMOTE:
            why += "; no check showed the candidate worse (on_inconclusive=promote)"
            if state == State.SHADOW:
                if plan.strategy == Strategy.BLUE_GREEN:
                    return Decision(State.PROMOTING, step_index, why)
                return Decision(State.CANARY, 0, f"{why}; canary at {plan.steps_bp[0] / 100:g}%")
            if step_index + 1 >= len(plan.steps_bp):
                return Decision(State.PROMOTING, step_index, why)
            return Decision(State.CANARY, step_index + 1, f"{why}; canary at {plan.steps_bp[step_index + 1] / 100:g}%")
        return Decision(State.ROLLING_BACK, step_index, why)
    return Decision(None, step_index, "")
