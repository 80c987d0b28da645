"""The judge's decisions that fit the traffic, on synthetic data:
the PSI guardrail fires on sustained breaches only (the p99 guardrail's evidence:
test_p99_guardrail.py), every check says how much of its sample it
has and when it will have the rest, the error test pools stable and baseline as its
control, and at a 5 % share of 200 req/s two candidate errors are enough evidence."""

import numpy as np
import pytest

from monitoring.judge import statistics
from monitoring.judge.checks import check_error_rate
from monitoring.judge.evidence import ArmWindow, JudgeConfig
from monitoring.judge.verdict import judge
from tests.monitoring.judge_data import bucketize, latencies

SLO = JudgeConfig(slo_p99_ms=50.0, min_guardrail_requests=100)


def test_psi_breach_must_be_sustained_too():
    rng = np.random.default_rng(2)
    stable = ArmWindow(ticks=[(400, 0)], score_bins=statistics.score_bins(rng.beta(2, 8, 400)))
    drifted = ArmWindow(ticks=[(400, 0)], score_bins=statistics.score_bins(rng.beta(5, 5, 400)))
    once = judge(stable, drifted, JudgeConfig(), now_s=0.0, previous={})
    psi = next(c for c in once.checks if c["name"] == "psi")
    assert psi["outcome"] == "inconclusive" and psi["statistic"] > 0.25
    memory = {"psi": {**psi, "breaches": 2, "breach_since": -12.0}}
    assert (
        next(c for c in judge(stable, drifted, JudgeConfig(), now_s=0.0, previous=memory).checks if c["name"] == "psi")[
            "outcome"
        ]
        == "fail"
    )
    # three looks, but not yet 10 s: the reason says what is missing ("breach 10 of 3" never)
    held = judge(
        stable, drifted, JudgeConfig(), now_s=0.0, previous={"psi": {**psi, "breaches": 9, "breach_since": -4.0}}
    )
    assert "psi (breaching for 4 s of 10 s needed to fail)" in held.reason


def test_every_check_carries_progress_and_an_eta():
    rng = np.random.default_rng(3)
    stable = ArmWindow(
        ticks=[(1900, 0)] * 10,
        latency_buckets=bucketize(latencies(rng, 19000)),
        score_bins=statistics.score_bins(rng.beta(2, 8, 950)),
    )
    candidate = ArmWindow(
        ticks=[(10, 0)] * 10,
        latency_buckets=bucketize(latencies(rng, 100)),
        score_bins=statistics.score_bins(rng.beta(2, 8, 100)),
    )
    decision = judge(stable, candidate, JudgeConfig(slo_p99_ms=500, slo_error_rate=0.01), seconds=10.0, now_s=10.0)
    by_name = {c["name"]: c for c in decision.checks}
    assert by_name["error_rate"]["progress"] == {"have": 100, "need": 500, "unit": "requests"}
    assert by_name["error_rate"]["eta_seconds"] == pytest.approx(40.0)  # 400 more at 10 req/s
    # latency compares windows (here only the totals are known: one window) of 20+ requests each
    assert by_name["latency"]["progress"] == {"have": 1, "need": 8, "unit": "windows"}
    assert by_name["psi"]["progress"] == {"have": 100, "need": 200, "unit": "scores"}
    assert by_name["p99_slo"]["progress"]["have"] == 100 and by_name["p99_slo"]["eta_seconds"] == 0.0
    assert all("progress" in c and "eta_seconds" in c for c in decision.checks)
    assert "error_rate (100 of 500 requests, ~40 s)" in decision.reason


def test_two_candidate_errors_at_a_5_percent_share_are_enough():
    """Information per second is what limits detection: at 5 % of 200 req/s a 2.5 %
    failing candidate errs every 4 s. With odds ratios up to 64 in the mixture, two
    errors (none on the control) cross 1/alpha, at a 5 % and at a 10 % share; with the
    old grid (up to 8) they did not."""
    stable = ArmWindow(ticks=[(190, 0)] * 7 + [(190, 0)])
    candidate = ArmWindow(ticks=[(10, 0)] * 3 + [(10, 1)] + [(10, 0)] * 3 + [(10, 1)])
    assert check_error_rate(stable, candidate, JudgeConfig())["outcome"] == "fail"
    old = JudgeConfig(odds_ratios=(1.25, 1.5, 2.0, 3.0, 5.0, 8.0))
    assert check_error_rate(stable, candidate, old)["outcome"] != "fail"
    one = ArmWindow(ticks=[(10, 0)] * 7 + [(10, 1)])
    assert check_error_rate(stable, one, JudgeConfig())["outcome"] != "fail"  # one error is not a regression
    at_10 = check_error_rate(ArmWindow(ticks=[(180, 0)] * 3), ArmWindow(ticks=[(20, 1)] * 2 + [(20, 0)]), JudgeConfig())
    assert at_10["outcome"] == "fail" and at_10["e_value"] > 20
    # the same two errors among the candidate's first 40 requests: enough e-value, too few
    # requests for the effect it claims (a load spike's timeouts were "14 % errors" so)
    early = check_error_rate(ArmWindow(ticks=[(180, 0)] * 2), ArmWindow(ticks=[(20, 1)] * 2), JudgeConfig())
    assert early["e_value"] > 20 and early["outcome"] == "inconclusive" and early["min_fail_samples"] == 50
    assert check_error_rate(ArmWindow(ticks=[(180, 0)] * 2), ArmWindow(ticks=[(20, 1)] * 2), old)["outcome"] != "fail"


def test_error_control_pools_stable_and_baseline():
    """Against a baseline of the candidate's size alone, two errors are a coin's worth of
    evidence; pooled with the stable (the same artifact) they are not."""
    stable = ArmWindow(ticks=[(180, 0)] * 8)
    baseline = ArmWindow(ticks=[(10, 0)] * 8)
    candidate = ArmWindow(ticks=[(10, 0)] * 3 + [(10, 1)] + [(10, 0)] * 3 + [(10, 1)])
    assert check_error_rate(baseline, candidate, JudgeConfig())["outcome"] != "fail"
    pooled = judge(baseline, candidate, JudgeConfig(), error_control=baseline.plus(stable), compare_latency=False)
    assert next(c for c in pooled.checks if c["name"] == "error_rate")["outcome"] == "fail"
    assert next(c for c in pooled.checks if c["name"] == "error_rate")["samples"]["stable"] == 1520
