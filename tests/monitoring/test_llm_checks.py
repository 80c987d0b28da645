"""The judge on LLM endpoints (monitoring/judge/llm_checks.py), on synthetic windows: TTFT and
ITL drawn tick by tick (seeded) into the gateway's buckets, as the collector stores them."""

import math

import numpy as np
import pytest

from monitoring.judge.checks import FAIL, INCONCLUSIVE, PASS
from monitoring.judge.evidence import SKIPPED, ArmWindow, JudgeConfig
from monitoring.judge.verdict import judge

TTFT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, math.inf)
ITL_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, math.inf)


def _hist(samples, bounds) -> dict[float, float]:
    """Non-empty buckets and the empty one just below each (its bound is the lower edge),
    as the collector stores them (collect.decumulate)."""
    counts = np.bincount(np.searchsorted(bounds, samples, side="left"), minlength=len(bounds))
    return {
        le: float(n) for i, (le, n) in enumerate(zip(bounds, counts)) if n or (i + 1 < len(bounds) and counts[i + 1])
    }


def arm(
    rng, *, ticks=30, per_tick=40, ttft_ms=40.0, itl_ms=4.0, error_rate=0.0, tokens=20, slow_share=0.0, slow_ms=0.0
) -> ArmWindow:
    """An LLM arm: per tick `per_tick` requests (lognormal TTFT around `ttft_ms`, `tokens`
    - 1 gaps around `itl_ms`), errors at `error_rate`; `slow_share` of first tokens at
    `slow_ms` instead."""
    llm_ticks, ttft_ticks, itl_ticks = [], [], []
    for _ in range(ticks):
        ttft = rng.lognormal(math.log(ttft_ms / 1000), 0.25, per_tick)
        if slow_share:
            ttft[rng.random(per_tick) < slow_share] = slow_ms / 1000
        gaps = rng.lognormal(math.log(itl_ms / 1000), 0.25, per_tick * (tokens - 1))
        llm_ticks.append((float(per_tick), float(rng.binomial(per_tick, error_rate))))
        ttft_ticks.append(_hist(ttft, TTFT_BUCKETS))
        itl_ticks.append(_hist(gaps, ITL_BUCKETS))
    return ArmWindow(
        ticks=[(0.0, 0.0)] * ticks,
        llm_ticks=llm_ticks,
        ttft_ticks=ttft_ticks,
        ttft_buckets=_sum(ttft_ticks),
        itl_ticks=itl_ticks,
        itl_buckets=_sum(itl_ticks),
    )


def _sum(per_tick):
    out: dict[float, float] = {}
    for h in per_tick:
        for le, n in h.items():
            out[le] = out.get(le, 0.0) + n
    return out


def config(**kw) -> JudgeConfig:
    return JudgeConfig(kind="llm", latency_margin=0.2, slo_error_rate=0.05, **kw)


def by_name(decision) -> dict[str, dict]:
    return {c["name"]: c for c in decision.checks}


CASES = [
    # (id, candidate arm, config kwargs, compare_latency, expected outcome, {check: outcome}, reason parts)
    (
        "healthy candidate passes every check",
        dict(),
        dict(ttft_slo_ms=250, itl_slo_ms=20),
        True,
        PASS,
        {"ttft": PASS, "ttft_tail": PASS, "itl": PASS, "itl_tail": PASS, "ttft_slo": PASS, "itl_slo": PASS},
        ["every guardrail"],
    ),
    (
        "a slower first token (400 ms vs 40 ms) is rolled back on TTFT",
        dict(ttft_ms=400.0),
        dict(),
        True,
        FAIL,
        {"ttft": FAIL, "ttft_tail": FAIL, "itl": PASS, "error_rate": PASS},
        ["TTFT slower than baseline +20% +50 ms at p50 in", "windows", "ms vs", "e-value"],
    ),
    (
        "slower decoding (12 ms vs 4 ms a token) is rolled back on ITL",
        dict(itl_ms=12.0),
        dict(),
        True,
        FAIL,
        {"itl": FAIL, "ttft": PASS},
        ["ITL slower than baseline"],
    ),
    (
        "token gaps of 1.5 ms vs 0.4 ms (scheduling noise, +275 %) are under the 5 ms floor: no regression",
        dict(itl_ms=1.5, control_itl_ms=0.4),
        dict(),
        True,
        PASS,
        {"itl": PASS, "itl_tail": PASS},
        ["every guardrail"],
    ),
    (
        "more errors is rolled back on the error rate",
        dict(error_rate=0.15),
        dict(),
        True,
        FAIL,
        {"error_rate": FAIL, "error_slo": FAIL, "ttft": PASS},
        ["candidate error rate 1", "vs baseline 0.00%"],
    ),
    (
        "at 100 % (no control) a TTFT over its SLO in every tick fails the guardrail; the rank tests are skipped",
        dict(slow_share=0.2, slow_ms=800.0),
        dict(ttft_slo_ms=500),
        False,
        FAIL,
        {"ttft_slo": FAIL, "ttft": SKIPPED, "itl_tail": SKIPPED},
        ["candidate TTFT p99", "over the SLO 500 ms", "first tokens over 500 ms"],
    ),
    (
        "a few requests are not evidence",
        dict(ticks=2, per_tick=5),
        dict(ttft_slo_ms=250),
        True,
        INCONCLUSIVE,
        {"ttft": INCONCLUSIVE, "ttft_slo": INCONCLUSIVE, "error_rate": INCONCLUSIVE},
        ["waiting for evidence", "ttft (", "error_rate (10 of 500 requests"],
    ),
]


@pytest.mark.parametrize(
    "candidate,kwargs,compare,outcome,checks,reason", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_llm_verdicts(candidate, kwargs, compare, outcome, checks, reason):
    rng = np.random.default_rng(7)
    ticks = candidate.get("ticks", 30)
    candidate = dict(candidate)
    control_itl = candidate.pop("control_itl_ms", 4.0)
    control = arm(rng, ticks=ticks, per_tick=candidate.get("per_tick", 40), itl_ms=control_itl)
    cand = arm(rng, **candidate)
    decision = judge(control, cand, config(**kwargs), compare_latency=compare, control="baseline")
    got = by_name(decision)
    assert decision.outcome == outcome, decision.reason
    assert {name: got[name]["outcome"] for name in checks} == checks, decision.reason
    for part in reason:
        assert part in decision.reason
    # no tensor check on an LLM endpoint: its request duration and scores mean nothing here
    assert not {"latency", "latency_tail", "p99_slo", "psi"} & set(got)


def test_slow_pool_is_not_the_candidates_fault():
    """Both arms' first tokens over the SLO alike (a slow pool): the guardrail against the
    control holds, the TTFT SLO check never fails (it waits, or passes once the pool's tail is
    shown window after window), nor does the comparison."""
    rng = np.random.default_rng(3)
    control = arm(rng, slow_share=0.1, slow_ms=800.0)
    cand = arm(rng, slow_share=0.1, slow_ms=800.0)
    decision = judge(control, cand, config(ttft_slo_ms=500), control="baseline")
    got = by_name(decision)
    assert got["ttft_slo"]["outcome"] != FAIL and got["ttft_slo"]["e_value"] > 100
    assert got["ttft_slo"]["e_value_control"] < 100
    assert got["ttft"]["outcome"] != FAIL and decision.outcome != FAIL


def test_step_window_is_what_the_rank_tests_read():
    """The rank tests compare the current step's window (latency=...), the anchored checks
    the whole rollout: a slow first step does not fail a candidate now as fast as its control."""
    rng = np.random.default_rng(5)
    anchored_control, anchored_cand = arm(rng), arm(rng, ttft_ms=400.0)
    step = (arm(rng), arm(rng))
    decision = judge(anchored_control, anchored_cand, config(), latency=step)
    got = by_name(decision)
    assert got["ttft"]["outcome"] == PASS and got["ttft"]["window"] == "step"


def test_tensor_endpoints_are_judged_as_before():
    """kind "tensor" (the default) on the same windows: no LLM check appears."""
    rng = np.random.default_rng(1)
    decision = judge(arm(rng), arm(rng, ttft_ms=400.0), JudgeConfig())
    assert {c["name"] for c in decision.checks} == {"shared_outage", "error_rate", "latency", "latency_tail"}


def test_windows_add_up_with_their_llm_parts():
    """stable + baseline pooled (the anchored control) keeps the LLM ticks and histograms."""
    rng = np.random.default_rng(2)
    a, b = arm(rng, ticks=3), arm(rng, ticks=3)
    both = a.plus(b)
    assert both.as_llm().requests == a.as_llm().requests + b.as_llm().requests
    assert sum(both.ttft_buckets.values()) == 240 and len(both.itl_ticks) == 3
    with pytest.raises(ValueError):
        a.plus(arm(rng, ticks=4))
