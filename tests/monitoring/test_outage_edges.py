"""The edges of a shared outage, as fast unit tests of the collector's accounting and the pure
judge: when the pool's only replica comes back, the stable is served again before the
candidate (its model still loading, or its breaker still backing off), and the candidate's
attempts fail over to a stable that answers. Those ticks are the outage's recovery, not
evidence (monitoring/judge/outage.py); a candidate that fails with errors of its own after the
outage is still rolled back.

The numbers are the ticks a real run met (tests/deployments/test_rollout_outage_undo.py at
a 50 % step with a fair baseline: the stable serves nothing but failovers)."""

from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from deployments.rollout_machine import Plan, State, on_tick
from monitoring.collection import collect, gateway_samples
from monitoring.judge.evidence import ArmWindow, JudgeConfig
from monitoring.judge.outage import NOT_JUDGED, outage_ticks
from monitoring.judge.verdict import judge
from monitoring.judge.windows import arms_from_rows

CONFIG = JudgeConfig()


# --- the collector: whose request a failover is ---------------------------------------------------
def _registry():
    registry = CollectorRegistry()
    requests = Counter("gateway_requests", "r", ["endpoint", "variant", "status", "fault"], registry=registry)
    failovers = Counter(
        "gateway_failovers", "f", ["endpoint", "from_variant", "to_variant", "reason"], registry=registry
    )
    failed = Counter("gateway_failovers_failed", "x", ["endpoint", "from_variant", "reason"], registry=registry)
    return registry, requests, failovers, failed


def _derived(registry, before) -> dict:
    after = gateway_samples.gateway_snapshot(generate_latest(registry).decode())
    totals = gateway_samples.gateway_deltas(before, after, seconds=2.0)
    return {variant: collect.derive(t) for (_, variant), t in totals.items()}


def _judged(derived: dict) -> dict[str, ArmWindow]:
    """The judge's windows over one tick of those stored metrics (as the store gives them back)."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [(variant, metric, at, value) for variant, values in derived.items() for metric, value in values.items()]
    return arms_from_rows(rows, list(derived))


def test_the_judge_counts_the_stable_s_own_requests_and_names_unreached_attempts():
    """The tick after the restart: the stable (no share of its own at 50 %) answered the 70
    failovers of the baseline and the candidate, whose breakers were still open. The gateway
    counts those 70 under the stable (stored so: Triton agrees); for the judge they are the
    arms' errors that never reached their model, so the stable's own sample is 0 requests and
    the control (stable + baseline) fails as much as the candidate: a shared outage."""
    registry, requests, failovers, failed = _registry()
    before = gateway_samples.gateway_snapshot(generate_latest(registry).decode())
    requests.labels("ctr", "v1", "200", "none").inc(70)  # every one a failover from an arm
    for arm, moved, refused in (("v1-baseline", 34, 6), ("v3", 36, 4)):
        failovers.labels("ctr", arm, "v1", "unavailable").inc(moved)
        requests.labels("ctr", arm, "503", "backend").inc(refused)  # no_ready_backend, nothing to retry on
    derived = _derived(registry, before)
    assert (derived["v1"]["requests"], derived["v1"]["failovers_in"]) == (70, 70)  # what it answered
    arms = _judged(derived)
    assert arms["v1"].ticks == [(0.0, 0.0)]
    assert arms["v1-baseline"].ticks == [(40.0, 40.0)] and arms["v3"].ticks == [(40.0, 40.0)]
    assert arms["v3"].unreached_errors == [36.0] and arms["v1-baseline"].unreached_errors == [34.0]
    control = arms["v1"].plus(arms["v1-baseline"])
    assert outage_ticks(control, arms["v3"], CONFIG).tolist() == [True]


def test_a_stable_with_traffic_of_its_own_keeps_it_and_only_unreached_reasons_are_unreached():
    registry, requests, failovers, failed = _registry()
    before = gateway_samples.gateway_snapshot(generate_latest(registry).decode())
    requests.labels("ctr", "v1", "200", "none").inc(100 + 7)  # its own 100 and 7 served failovers
    requests.labels("ctr", "v1", "503", "backend").inc(3 + 2)  # its own 3 errors and 2 failed failovers
    requests.labels("ctr", "v2", "200", "none").inc(30)
    failovers.labels("ctr", "v2", "v1", "5xx").inc(4)  # the candidate's model answered 500: its own
    failovers.labels("ctr", "v2", "v1", "not_loaded").inc(3)  # its model not loaded on the replica
    failovers.labels("ctr", "v2", "v1", "connect").inc(2)  # the replica down ...
    failed.labels("ctr", "v2", "connect").inc(2)  # ... for the stable too: shared
    derived = _derived(registry, before)
    assert (derived["v1"]["requests"], derived["v1"]["errors"]) == (112, 5)  # what it answered
    arms = _judged(derived)
    assert arms["v1"].ticks == [(103.0, 3.0)]  # 100 + 3 of its own
    assert arms["v2"].ticks == [(37.0, 7.0)]
    assert arms["v2"].unreached_errors == [3.0] and arms["v2"].shared_failures == [2.0]


# --- the judge: the outage's recovery set aside, a candidate's own errors not ----------------------
HEALTHY = ((80, 0), (40, 0, 0, 0))  # control (stable + baseline), candidate (requests, errors, shared, unreached)
OUTAGE = ((40, 40), (40, 40, 0, 0))  # the replica down: both arms answered 503s
RECOVERING = ((40, 0), (40, 40, 0, 36))  # the stable served again; the candidate still ejected: failed over
OWN_ERRORS = ((80, 0), (40, 30, 0, 0))  # after the outage, the candidate's model answers 500s
MOSTLY_OWN = ((80, 0), (40, 40, 0, 12))  # breaker cycling on its own 503s: most errors reached the model
EJECTED = ((80, 0), (40, 40, 0, 40))  # every attempt refused by its own breaker, no outage before


def _windows(phases) -> tuple[ArmWindow, ArmWindow]:
    ticks = [tick for count, tick in phases for _ in range(count)]
    control = ArmWindow(ticks=[(float(n), float(e)) for (n, e), _ in ticks])
    candidate = ArmWindow(
        ticks=[(float(n), float(e)) for _, (n, e, _, _) in ticks],
        shared_failures=[float(s) for _, (_, _, s, _) in ticks],
        unreached_errors=[float(u) for _, (_, _, _, u) in ticks],
    )
    return control, candidate


def _looks(phases, first_look: int) -> list:
    """The judge's decision at every look from `first_look` ticks on, as the beat looks."""
    control, candidate = _windows(phases)
    out = []
    for look in range(first_look, len(control.ticks) + 1):
        cut = [
            ArmWindow(
                ticks=a.ticks[:look],
                shared_failures=a.shared_failures[:look],
                unreached_errors=a.unreached_errors[:look],
            )
            for a in (control, candidate)
        ]
        out.append(judge(cut[0], cut[1], CONFIG, now_s=2.0 * look))
    return out


@pytest.mark.parametrize(
    ("phases", "fails", "why"),
    [
        (
            [(10, HEALTHY), (2, OUTAGE), (3, RECOVERING), (10, HEALTHY)],
            False,
            "the observed restart: recovery set aside",
        ),
        ([(10, HEALTHY), (2, OUTAGE), (15, RECOVERING), (5, HEALTHY)], False, "a recovery as long as the cap"),
        ([(10, HEALTHY), (2, OUTAGE), (4, OWN_ERRORS)], True, "its own errors after the outage"),
        ([(10, HEALTHY), (2, OUTAGE), (2, RECOVERING), (4, OWN_ERRORS)], True, "its own errors after its recovery"),
        ([(10, HEALTHY), (2, OUTAGE), (4, MOSTLY_OWN)], True, "errors that mostly reached its model"),
        ([(10, HEALTHY), (2, OUTAGE), (20, RECOVERING)], True, "never served again: judged after the cap"),
        ([(10, HEALTHY), (4, EJECTED)], True, "ejected for its own failures, no outage before"),
    ],
)
def test_the_outage_recovery_is_set_aside_and_a_candidate_failing_after_it_is_rolled_back(phases, fails, why):
    looks = _looks(phases, first_look=11)
    outcomes = [d.outcome for d in looks]
    assert ("fail" in outcomes) is fails, (why, [d.reason for d in looks])
    if fails:
        first = outcomes.index("fail")
        assert "candidate error rate" in looks[first].reason, looks[first].reason
        assert not looks[first].reason.startswith(NOT_JUDGED)
        plan = Plan(steps_bp=(5000, 10000))
        rolled = on_tick(
            state=State.CANARY, step_index=0, plan=plan, step_elapsed_s=60.0, candidate_requests=400, verdict="fail"
        )
        assert rolled.to_state == State.ROLLING_BACK
    else:
        assert looks[-1].outcome != "fail"


def test_while_the_candidate_recovers_the_verdict_says_shared_outage_and_names_its_recovery():
    looks = _looks([(10, HEALTHY), (2, OUTAGE), (3, RECOVERING), (1, HEALTHY)], first_look=11)
    recovering = looks[12 - 11 + 1 : 15 - 11 + 1]  # the looks whose latest tick is a recovery tick
    for decision in recovering:
        assert decision.reason.startswith(NOT_JUDGED), decision.reason
    assert "and 3 ticks of its recovery" in recovering[-1].reason
    assert "108 candidate attempts never reached its model" in recovering[-1].reason
    shared = {c["name"]: c for c in looks[-1].checks}["shared_outage"]
    assert (shared["ticks_set_aside"], shared["recovery_ticks"], shared["outcome"]) == (5, 3, "pass")


def test_without_the_unreached_count_the_recovery_would_be_the_candidates_fault():
    """The same ticks from a source that does not count unreached attempts: the rule is what
    holds the candidate harmless (this is the rollback the real run met)."""
    control, candidate = _windows([(10, HEALTHY), (2, OUTAGE), (3, RECOVERING)])
    assert judge(control, candidate, CONFIG, now_s=30.0).outcome != "fail"
    candidate.unreached_errors = []
    assert judge(control, candidate, CONFIG, now_s=30.0).outcome == "fail"
