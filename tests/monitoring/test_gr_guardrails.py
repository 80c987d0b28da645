"""A generative recommender's guardrails (monitoring/judge/gr_guardrails.py), from Triton's exposition
text through the collector's counts to the judge's verdict."""

from __future__ import annotations

import pytest

from monitoring.collection import collect, triton_samples
from monitoring.judge.evidence import ArmWindow, JudgeConfig
from monitoring.judge.gr_guardrails import GR_HIT_MARGIN, check_gr_guardrails
from monitoring.judge.verdict import judge
from monitoring.judge.windows import arms_from_rows

CONFIG = JudgeConfig(min_guardrail_requests=100, guardrail_failure_limit=2, guardrail_sustain_s=5.0)


def _arm(lookups=0.0, hits=0.0, beams=0.0, illegal=0.0, requests=400) -> ArmWindow:
    counts = {"gr_cache_lookups": lookups, "gr_cache_hits": hits, "gr_beams": beams, "gr_illegal_beams": illegal}
    return ArmWindow(ticks=[(requests, 0.0)], latency_buckets={0.01: float(requests)}, counts=counts)


def _by_name(checks):
    return {c["name"]: c for c in checks}


def test_the_models_counters_become_the_arms_counts():
    def text(hit, miss, grown, beams, illegal):
        lines = [
            f'gr_cache_lookups_total{{model="m",version="1",result="{r}"}} {n}'
            for r, n in (("hit", hit), ("miss", miss), ("grown", grown))
        ]
        lines += [f'gr_beams_total{{model="m",version="1"}} {beams}', 'gr_beam_width{model="m",version="1"} 32']
        lines += [f'gr_illegal_beams_total{{model="m",version="1"}} {illegal}']
        return "\n".join(lines) + "\n"

    before = triton_samples.triton_snapshot(text(3, 5, 1, 100, 0))
    after = triton_samples.triton_snapshot(text(10, 6, 2, 400, 1))
    totals = triton_samples.triton_deltas(
        before, after, seconds=2.0, models={"m": triton_samples.TritonModelMap("recs", "v1")}
    )
    derived = collect.derive(totals[("recs", "v1")])
    assert derived["gr_cache_lookups"] == 9 and derived["gr_cache_hits"] == 8  # hit and grown reuse the prefix
    assert derived["gr_cache_hit_rate"] == pytest.approx(8 / 9)
    assert derived["gr_beams"] == 300 and derived["gr_illegal_beams"] == 1
    assert derived["gr_illegal_rate"] == pytest.approx(1 / 300)
    rows = [("v1", metric, None, value) for metric, value in derived.items()]
    assert arms_from_rows(rows, ["v1"])["v1"].counts == {
        "gr_cache_lookups": 9,
        "gr_cache_hits": 8,
        "gr_beams": 300,
        "gr_illegal_beams": 1,
    }


def test_a_ranker_gets_no_gr_checks():
    assert check_gr_guardrails(ArmWindow(), ArmWindow(), CONFIG) == []


def test_one_illegal_beam_fails_a_candidate_whose_control_has_none_and_the_judge_says_why():
    control, candidate = _arm(200, 150, 6400), _arm(200, 150, 6400, illegal=1)
    checks = _by_name(check_gr_guardrails(control, candidate, CONFIG))
    assert checks["gr_illegal_items"]["outcome"] == "fail"
    decision = judge(control, candidate, CONFIG)
    assert decision.outcome == "fail" and "no catalog item" in decision.reason
    clean = _by_name(check_gr_guardrails(control, _arm(200, 150, 6400), CONFIG))
    assert clean["gr_illegal_items"]["outcome"] == "pass"
    early = _by_name(check_gr_guardrails(control, _arm(10, 5, 40), CONFIG))
    assert early["gr_illegal_items"]["outcome"] == "inconclusive"


def test_a_hit_rate_equal_to_the_cold_controls_passes_and_a_sustained_drop_fails():
    cold_baseline = _arm(lookups=300, hits=60, beams=9600)  # both started empty: 20 % hits
    cold_candidate = _arm(lookups=300, hits=57, beams=9600)
    checks = _by_name(check_gr_guardrails(cold_baseline, cold_candidate, CONFIG, now_s=0.0))
    assert checks["gr_cache_hit_rate"]["outcome"] == "pass"

    scattered = _arm(lookups=300, hits=60 - 300 * GR_HIT_MARGIN - 30, beams=9600)  # routing broke
    first = _by_name(check_gr_guardrails(cold_baseline, scattered, CONFIG, now_s=0.0))["gr_cache_hit_rate"]
    assert first["outcome"] == "inconclusive" and first["breaches"] == 1  # one look is not yet a failure
    second = _by_name(
        check_gr_guardrails(cold_baseline, scattered, CONFIG, previous={"gr_cache_hit_rate": first}, now_s=6.0)
    )["gr_cache_hit_rate"]
    assert second["outcome"] == "fail" and "cache hit rate" in second["reason"]


def test_the_hit_rate_waits_for_lookups_and_is_skipped_without_a_control_beside():
    few = _by_name(check_gr_guardrails(_arm(50, 10, 100), _arm(50, 0, 100), CONFIG))["gr_cache_hit_rate"]
    assert few["outcome"] == "inconclusive" and few["progress"] == {"have": 50, "need": 100, "unit": "lookups"}
    alone = _by_name(check_gr_guardrails(_arm(), _arm(300, 0, 300), CONFIG, compare=False))["gr_cache_hit_rate"]
    assert alone["outcome"] == "skipped"
