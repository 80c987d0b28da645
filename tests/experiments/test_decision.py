"""The experiment's tick decision, table-tested (experiments/decision.py), like
tests/deployments/test_rollout_machine.py for rollouts."""

import pytest

from experiments.decision import STAY, decide_experiment, harm_reason

FAIL_V2 = {"v2": {"reason": "error rate 100% vs 0%", "checks": [{"name": "error_rate", "outcome": "fail"}]}}


def cand(decision, lift=0.1):
    return {"decision": decision, "lift": lift}


CASES = [
    # (state, candidates, failed guardrails) -> (to_state, decision, winner, harm)
    ("running", {"v2": cand("continue")}, {}, (None, "", None, False)),
    ("running", {"v2": cand("blocked")}, {}, (None, "", None, False)),
    ("running", {"v2": cand("ship", 0.2)}, {}, ("decided", "ship", "v2", False)),
    ("running", {"v2": cand("stop", -0.2)}, {}, ("decided", "stop", "v1", False)),
    # a guardrail stops for harm whatever the lift says (even a ship reading)
    ("running", {"v2": cand("ship", 0.5)}, FAIL_V2, ("decided", "stop", "v1", True)),
    ("running", {"v2": cand("blocked")}, FAIL_V2, ("decided", "stop", "v1", True)),
    # several candidates: the best shipping lift wins; one harming and one continuing keeps running
    ("running", {"v2": cand("ship", 0.1), "v3": cand("ship", 0.3)}, {}, ("decided", "ship", "v3", False)),
    ("running", {"v2": cand("stop"), "v3": cand("continue")}, {}, (None, "", None, False)),
    ("running", {"v2": cand("stop"), "v3": cand("stop")}, {}, ("decided", "stop", "v1", False)),
    ("running", {"v2": cand("ship", 0.1), "v3": cand("stop")}, {}, ("decided", "ship", "v2", False)),
    ("running", {}, {}, (None, "", None, False)),
    # only a running experiment moves: the tick of any other state saves evidence only
    ("draft", {"v2": cand("ship")}, {}, (None, "", None, False)),
    ("decided", {"v2": cand("ship")}, FAIL_V2, (None, "", None, False)),
    ("stopped", {"v2": cand("stop")}, {}, (None, "", None, False)),
]


@pytest.mark.parametrize("state,candidates,failed,expected", CASES)
def test_decide_experiment(state, candidates, failed, expected):
    verdict = decide_experiment(state=state, control="v1", candidates=candidates, failed_guardrails=failed)
    assert (verdict.to_state, verdict.decision, verdict.winner, verdict.harm) == expected
    if expected[0] is None:
        assert verdict == STAY


def test_reasons_name_the_arm_and_the_check():
    assert decide_experiment(
        state="running", control="v1", candidates={"v2": cand("ship")}, failed_guardrails={}
    ).reason.startswith("v2: lower bound")
    harm = decide_experiment(state="running", control="v1", candidates={}, failed_guardrails=FAIL_V2)
    assert (
        harm.reason
        == harm_reason(FAIL_V2)
        == "stopped for harm: guardrail failed on v2 (error_rate: error rate 100% vs 0%)"
    )
    assert harm.data["guardrails"] == FAIL_V2
