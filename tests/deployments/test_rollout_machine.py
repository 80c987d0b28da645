import pytest

from deployments.rollout_machine import (
    ACTIVE,
    FULL_BP,
    IllegalTransition,
    Plan,
    Split,
    State,
    Strategy,
    Verdict,
    after_loaded,
    check_transition,
    on_tick,
    split_for,
)

PLAN = Plan(steps_bp=(500, 2500, 5000, 10000), step_min_seconds=10, step_min_requests=100, step_deadline_seconds=60)


def tick(state=State.CANARY, step=0, elapsed=11, requests=150, verdict=Verdict.PASS, plan=PLAN):
    return on_tick(
        state=state, step_index=step, plan=plan, step_elapsed_s=elapsed, candidate_requests=requests, verdict=verdict
    )


def test_transitions_are_closed_and_terminal_states_are_final():
    check_transition("canary", "rolling_back")
    check_transition("paused", "canary")
    for terminal in ("succeeded", "rolled_back", "failed"):
        for target in State:
            with pytest.raises(IllegalTransition):
                check_transition(terminal, target)
    with pytest.raises(IllegalTransition):
        check_transition("pending", "canary")  # traffic only after loading (READY everywhere)
    assert State.ROLLING_BACK in ACTIVE and State.SUCCEEDED not in ACTIVE


def test_splits_follow_the_state():
    assert split_for("loading", 0, PLAN) == Split(FULL_BP, 0, "")
    assert split_for("shadow", 0, PLAN) == Split(FULL_BP, 0, "shadow")
    assert split_for("canary", 1, PLAN) == Split(7500, 2500, "canary")
    assert split_for("paused", 2, PLAN, paused_from="canary") == Split(5000, 5000, "canary")
    assert split_for("promoting", 3, PLAN) == Split(0, FULL_BP, "canary")
    assert split_for("rolling_back", 2, PLAN) == Split(FULL_BP, 0, "")


def test_a_step_advances_only_after_min_time_and_min_sample():
    assert tick(elapsed=5).to_state is None
    assert tick(requests=50).to_state is None
    decision = tick()
    assert (decision.to_state, decision.step_index) == (State.CANARY, 1)
    assert tick(step=3).to_state == State.PROMOTING


def test_fail_rolls_back_at_once_even_early():
    decision = on_tick(
        state="canary",
        step_index=0,
        plan=PLAN,
        step_elapsed_s=0.5,
        candidate_requests=3,
        verdict=Verdict.FAIL,
        verdict_reason="error rate 9% > SLO 1%",
    )
    assert decision.to_state == State.ROLLING_BACK and "error rate" in decision.reason


def test_inconclusive_waits_until_the_deadline_then_applies_the_policy():
    rolling = Plan(step_min_seconds=10, step_deadline_seconds=60, on_inconclusive="rollback")
    assert tick(verdict=Verdict.INCONCLUSIVE, elapsed=59, plan=rolling).to_state is None
    assert tick(verdict=Verdict.INCONCLUSIVE, elapsed=61, plan=rolling).to_state == State.ROLLING_BACK
    pausing = Plan(step_min_seconds=10, step_deadline_seconds=60, on_inconclusive="pause")
    assert tick(verdict=Verdict.INCONCLUSIVE, elapsed=61, plan=pausing).to_state == State.PAUSED
    # promote: nothing showed the candidate worse, so the step counts as passed; the next one is judged as usual
    promoting = Plan(
        steps_bp=(500, 5000, 10000), step_min_seconds=10, step_deadline_seconds=60, on_inconclusive="promote"
    )
    going_on = tick(verdict=Verdict.INCONCLUSIVE, elapsed=61, plan=promoting)
    assert (going_on.to_state, going_on.step_index) == (
        State.CANARY,
        1,
    ) and "on_inconclusive=promote" in going_on.reason
    assert tick(verdict=Verdict.INCONCLUSIVE, elapsed=61, step=2, plan=promoting).to_state == State.PROMOTING
    assert (
        tick(verdict=Verdict.FAIL, elapsed=61, plan=promoting).to_state == State.ROLLING_BACK
    )  # a failure still rolls back


def test_the_default_policy_never_rolls_a_healthy_candidate_back():
    default = Plan(step_min_seconds=10, step_deadline_seconds=60)
    assert default.on_inconclusive == "pause"
    assert tick(verdict=Verdict.INCONCLUSIVE, elapsed=6000, plan=default).to_state == State.PAUSED


def test_shadow_phase_then_canary_or_blue_green_switch():
    with_shadow = Plan(shadow_seconds=20, step_min_seconds=10, step_deadline_seconds=60)
    assert after_loaded(with_shadow).to_state == State.SHADOW
    assert after_loaded(PLAN).to_state == State.CANARY
    assert tick(state=State.SHADOW, elapsed=10, plan=with_shadow).to_state is None
    assert tick(state=State.SHADOW, elapsed=21, requests=0, plan=with_shadow).to_state == State.CANARY
    blue_green = Plan(strategy=Strategy.BLUE_GREEN, shadow_seconds=20, step_deadline_seconds=60, step_min_seconds=10)
    assert tick(state=State.SHADOW, elapsed=21, plan=blue_green).to_state == State.PROMOTING


@pytest.mark.parametrize(
    "kwargs",
    [
        {"steps_bp": ()},
        {"steps_bp": (500, 500)},
        {"steps_bp": (2500, 500)},
        {"steps_bp": (0, 100)},
        {"steps_bp": (500, 20000)},
        {"strategy": Strategy.BLUE_GREEN},
        {"on_inconclusive": "ignore"},
        {"step_min_seconds": 100, "step_deadline_seconds": 10},
    ],
)
def test_bad_plans_are_refused(kwargs):
    with pytest.raises(ValueError):
        Plan(**kwargs)
