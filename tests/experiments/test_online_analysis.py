"""The experiment statistics, checked by simulation (vectorised, fixed seeds, a few seconds).

Each test states the figure the issue asks for and measures it on simulated traffic;
none of them can pass with a broken interval (a fixed-horizon z-interval peeked at every
look fails the A/A test; a per-exposure variance fails the coverage test)."""

import numpy as np
import pytest

from experiments import analysis as A
from experiments import simulate as S

ALPHA = 0.05
MDE = 0.05
BASE = 0.2
M = 4.0  # exposures per unit
LOOKS = 50


@pytest.fixture(scope="module")
def plan():
    return A.plan_sample(baseline=BASE, mde=MDE, alpha=ALPHA, power=0.8, exposures_per_unit=M)


def _run(rng, plan, rates, sims):
    upl = int(np.ceil(2 * plan.units_per_arm / LOOKS))
    arms = S.simulate(
        rng,
        sims=sims,
        looks=LOOKS,
        units_per_look=upl,
        rates=rates,
        allocation={"control": 0.5, "candidate": 0.5},
        exposures_per_unit=M,
        heterogeneity=0,
    )
    lf = A.lift(arms["control"], arms["candidate"], alpha=ALPHA, mde=MDE)
    return arms, lf


def test_continuously_monitored_aa_false_ship_rate_is_at_most_alpha(plan):
    _, lf = _run(np.random.default_rng(20261123), plan, {"control": BASE, "candidate": BASE}, sims=240)
    decisions = A.decide(lower=lf["lower"], upper=lf["upper"], mde=MDE, srm_flagged=False)
    first, _ = S.first_decision(decisions)  # looked at after every one of 50 batches
    false_ship = (first == A.ArmDecision.SHIP).mean()
    false_any = (first != A.ArmDecision.CONTINUE).mean()
    assert false_ship <= ALPHA and false_any <= ALPHA
    # The same data peeked at with a fixed-horizon interval ships far more often: the
    # simulation has the power to catch an invalid interval.
    peek = S.first_decision(A.decide(lower=lf["fixed_lower"], upper=lf["fixed_upper"], mde=MDE, srm_flagged=False))[0]
    assert (peek != A.ArmDecision.CONTINUE).mean() > 2 * ALPHA


def test_five_percent_lift_is_detected_with_80_percent_power_at_the_planned_sample(plan):
    assert plan.units_per_arm > plan.fixed_units_per_arm  # the price of peeking, stated in the plan
    arms, lf = _run(np.random.default_rng(7), plan, {"control": BASE, "candidate": BASE * (1 + MDE)}, sims=240)
    assert abs(arms["control"]["units"][:, -1].mean() / plan.units_per_arm - 1) < 0.03
    first, look = S.first_decision(A.decide(lower=lf["lower"], upper=lf["upper"], mde=MDE, srm_flagged=False))
    assert (first == A.ArmDecision.SHIP).mean() >= 0.8
    assert (first == A.ArmDecision.STOP).mean() == 0
    # Sequential stops early on average.
    assert np.median(look[first == A.ArmDecision.SHIP]) < LOOKS - 1


def test_srm_flags_a_one_percent_skew_by_400k_units_and_never_flags_a_fair_split():
    rng = np.random.default_rng(3)
    sims, looks, per = 300, 80, 5000  # 400 000 units at the last look
    for p, expect in ((0.505, 0.95), (0.5, 0.0)):
        first_arm = np.cumsum(rng.binomial(per, p, size=(sims, looks)), axis=1)
        counts = np.stack([first_arm, np.arange(1, looks + 1) * per - first_arm], axis=-1)
        flagged = (A.srm_evalue(counts, [0.5, 0.5]) >= 1000).any(axis=1).mean()
        if expect:
            assert flagged >= expect  # 50.5 % / 49.5 % against a 50/50 plan
        else:
            assert flagged <= 0.001 * 10  # anytime-valid at alpha_srm = 0.001 (a few in 300 at most)


def test_srm_blocks_a_decision_even_with_a_clear_lift():
    assert A.decide(lower=0.1, upper=0.3, mde=MDE, srm_flagged=True) == A.ArmDecision.BLOCKED
    assert A.decide(lower=0.1, upper=0.3, mde=MDE, srm_flagged=False) == A.ArmDecision.SHIP
    assert A.decide(lower=0.1, upper=0.3, mde=MDE, srm_flagged=False, guardrails_ok=False) == A.ArmDecision.STOP
    assert A.decide(lower=-0.3, upper=-0.1, mde=MDE, srm_flagged=False) == A.ArmDecision.STOP
    # A metric planned to fall (negative MDE) ships on the other side.
    assert A.decide(lower=-0.3, upper=-0.1, mde=-MDE, srm_flagged=False) == A.ArmDecision.SHIP


def test_delta_method_covers_where_the_per_exposure_binomial_variance_does_not():
    rng = np.random.default_rng(11)
    sims, units, true = 400, 3000, 0.1
    n = 1 + rng.poisson(9, size=(sims, units))
    pu = rng.beta(true * 5, (1 - true) * 5, size=n.shape)  # strongly heterogeneous users
    c = rng.binomial(n, pu)
    s = A.sums_from_units(n, c)
    ctr, var, _ = A.ratio_stats(s)
    covered = np.abs(ctr - true) <= 1.96 * np.sqrt(var)
    naive = np.abs(ctr - true) <= 1.96 * np.sqrt(ctr * (1 - ctr) / s["n"])
    assert 0.92 <= covered.mean() <= 0.98
    assert naive.mean() < 0.85


def test_cuped_keeps_the_ratio_and_cuts_its_variance():
    rng = np.random.default_rng(5)
    units = 20000
    n = 1 + rng.poisson(4, size=units)
    pu = rng.beta(0.5, 2, size=units)  # users differ a lot: the pre-period predicts
    pre = rng.binomial(20, pu) / 20  # the unit's CTR in the pre-period
    c = rng.binomial(n, pu)
    plain = A.sums_from_units(n, c)
    adj = A.cuped_ratio_sums(n, c, pre)
    r0, v0, _ = A.ratio_stats(plain)
    r1, v1, _ = A.ratio_stats(adj)
    assert r1 == pytest.approx(r0, rel=1e-9)
    assert v1 < 0.7 * v0


def test_analyze_reports_arms_lift_and_srm():
    rng = np.random.default_rng(1)
    arms = {}
    for name, rate, units in (("control", 0.2, 20000), ("candidate", 0.24, 20000)):
        n = 1 + rng.poisson(3, size=units)
        arms[name] = A.sums_from_units(n, rng.binomial(n, rate))
    res = A.analyze(arms, control="control", allocation={"control": 0.5, "candidate": 0.5}, alpha=ALPHA, mde=MDE)
    cand = res["candidates"]["candidate"]
    assert cand["lower"] < 0.2 < cand["upper"] and cand["decision"] == A.ArmDecision.SHIP
    assert res["arms"]["control"]["units"] == 20000 and not res["srm"]["flagged"]


def test_plan_rejects_nonsense():
    with pytest.raises(ValueError, match="mde"):
        A.plan_sample(baseline=0.2, mde=0.0)


def test_a_failing_guardrail_stops_for_harm_even_under_a_flagged_srm_and_pending_blocks_nothing():
    # machine harm is real whatever the split: a failing guardrail stops where SRM would block
    assert A.decide(lower=0.1, upper=0.3, mde=MDE, srm_flagged=True, guardrails_ok=False) == A.ArmDecision.STOP
    assert A.decide(lower=np.nan, upper=np.nan, mde=MDE, srm_flagged=False, guardrails_ok=False) == A.ArmDecision.STOP
    assert A.decide(lower=np.nan, upper=np.nan, mde=MDE, srm_flagged=False) == A.ArmDecision.CONTINUE
    vec = A.decide(
        lower=[0.1, 0.1, -0.2], upper=[0.3, 0.3, -0.1], mde=MDE, srm_flagged=False, guardrails_ok=[True, False, True]
    )
    assert list(vec) == [A.ArmDecision.SHIP, A.ArmDecision.STOP, A.ArmDecision.STOP]

    rng = np.random.default_rng(2)
    arms = {}
    for name, rate in (("control", 0.2), ("good", 0.26), ("slow", 0.26), ("new", 0.2)):
        n = 1 + rng.poisson(3, size=20000 if name != "new" else 1)
        arms[name] = A.sums_from_units(n, rng.binomial(n, rate))
    res = A.analyze(
        arms,
        control="control",
        allocation=dict.fromkeys(arms, 0.25),
        alpha=ALPHA,
        mde=MDE,
        guardrails={"good": "pending", "slow": "fail", "new": "fail"},
    )
    cands = res["candidates"]
    # a pending guardrail (not enough data yet) does not hold a clear lift; a failing one stops,
    # with or without a lift to read (one unit: no interval) — though a 20 000-unit SRM is flagged here
    assert res["srm"]["flagged"] and cands["good"]["decision"] == A.ArmDecision.BLOCKED
    assert (
        cands["slow"]["decision"] == A.ArmDecision.STOP
        and cands["new"]["decision"] == A.ArmDecision.STOP
        and cands["new"]["lower"] is None
    )
    assert [cands[n]["guardrails"] for n in ("good", "slow", "new")] == ["pending", "fail", "fail"]
    balanced = A.analyze(
        {k: arms[k] for k in ("control", "good")},
        control="control",
        allocation={"control": 0.5, "good": 0.5},
        alpha=ALPHA,
        mde=MDE,
        guardrails={"good": "pending"},
    )
    assert balanced["candidates"]["good"]["decision"] == A.ArmDecision.SHIP
