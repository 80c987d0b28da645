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
    on_loading,
    on_promoting,
    on_rolling_back,
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


def test_a_pause_at_the_deadline_says_what_the_judge_still_waited_for():
    """On a busy host every process of one model may be over the p99 SLO: the guardrail holds
    the step until it can tell the candidate from the host, and the pause says so."""
    waited = "waiting for evidence: p99_slo (351 of 12009 requests over 50 ms (2.9%, 1% allowed); control 2.1% over)"
    paused = on_tick(
        state=State.CANARY,
        step_index=0,
        plan=Plan(step_min_seconds=10, step_deadline_seconds=60),
        step_elapsed_s=61,
        candidate_requests=12009,
        verdict=Verdict.INCONCLUSIVE,
        verdict_reason=waited,
    )
    assert paused.to_state == State.PAUSED
    assert paused.reason == f"no conclusive verdict within the step deadline (60s); the judge: {waited}"


def test_shadow_phase_then_canary_or_blue_green_switch():
    with_shadow = Plan(shadow_seconds=20, step_min_seconds=10, step_deadline_seconds=60)
    assert after_loaded(with_shadow).to_state == State.SHADOW
    assert after_loaded(PLAN).to_state == State.CANARY
    assert tick(state=State.SHADOW, elapsed=10, plan=with_shadow).to_state is None
    assert tick(state=State.SHADOW, elapsed=21, requests=0, plan=with_shadow).to_state == State.CANARY
    blue_green = Plan(strategy=Strategy.BLUE_GREEN, shadow_seconds=20, step_deadline_seconds=60, step_min_seconds=10)
    assert tick(state=State.SHADOW, elapsed=21, plan=blue_green).to_state == State.PROMOTING


WITH_SHADOW = Plan(shadow_seconds=20, step_min_seconds=10, step_deadline_seconds=60)


@pytest.mark.parametrize(
    "plan,load_error,ready,waited_s,to_state,reason",
    [
        (PLAN, None, False, 10, None, ""),  # still loading, within the timeout
        (PLAN, None, False, 300, None, ""),  # at the timeout exactly: not past it yet
        (PLAN, None, False, 301, State.FAILED, "candidate not READY on every replica after 300s"),
        (PLAN, None, True, 5, State.CANARY, "canary at 5%"),
        (PLAN, None, True, 999, State.CANARY, "canary at 5%"),  # ready wins over the timeout
        (WITH_SHADOW, None, True, 5, State.SHADOW, "shadow for 20s"),
        (PLAN, "no such backend", False, 5, State.FAILED, "candidate failed to load: no such backend"),
        (PLAN, "", True, 5, State.FAILED, "candidate failed to load: "),  # a failed load wins, even unexplained
        (PLAN, "x" * 2000, False, 5, State.FAILED, "x" * 1500),
    ],
)
def test_loading_starts_fails_or_times_out(plan, load_error, ready, waited_s, to_state, reason):
    decision = on_loading(plan=plan, load_error=load_error, ready=ready, waited_s=waited_s, load_timeout_s=300)
    assert decision.to_state == to_state
    assert reason in decision.reason and decision.step_index == 0
    if load_error is not None:
        assert len(decision.reason) <= len("candidate failed to load: ") + 1500


@pytest.mark.parametrize(
    "off_pool,reason,to_state,why",
    [
        (False, "judge: error rate", None, ""),  # the candidate's unload is still under way
        (True, "judge: error rate", State.ROLLED_BACK, "judge: error rate"),  # the reason it rolled back for
        (True, "", State.ROLLED_BACK, "rolled back"),
    ],
)
def test_rolling_back_ends_once_the_candidate_is_off_the_pool(off_pool, reason, to_state, why):
    decision = on_rolling_back(step_index=2, candidate_off_pool=off_pool, reason=reason)
    assert (decision.to_state, decision.reason, decision.step_index) == (to_state, why, 2)


@pytest.mark.parametrize(
    "held_s,to_state",
    [(0.0, None), (29.9, None), (30.0, State.SUCCEEDED), (31.0, State.SUCCEEDED)],
)
def test_promoting_holds_for_the_grace_then_succeeds(held_s, to_state):
    decision = on_promoting(step_index=3, held_s=held_s, grace_s=30)
    assert decision.to_state == to_state and decision.step_index == 3
    if to_state:
        assert decision.reason == "promotion held for 30s; old stable unloaded"


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
