"""The error-rate comparison of the canary judge: an always-valid e-process on the candidate's
error odds against the control's (the statistics are in monitoring/judge/verdict.py's docstring).
verdict.py and llm_checks.py both call it: here, below both, neither imports the other for it."""

from __future__ import annotations

import numpy as np

from deployments.rollout_machine import Verdict
from monitoring.judge import eprocess
from monitoring.judge.evidence import SKIPPED, ArmWindow, JudgeConfig, progress
from monitoring.judge.evidence import make_check as _check
from monitoring.judge.guardrails import NO_CONTROL

PASS, FAIL, INCONCLUSIVE = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE


# --- error rate: always-valid e-process --------------------------------------------------------
def error_e_value(stable_ticks, candidate_ticks, odds_ratios=JudgeConfig.odds_ratios) -> float:
    """The mixture e-value (equal weights over `odds_ratios`) after all the ticks given.

    Ticks are aligned: tick i of both lists covers the same interval (monitoring/judge/eprocess.py)."""
    return eprocess.e_value(eprocess.conditional_steps(stable_ticks, candidate_ticks, odds_ratios))


def error_e_path(stable_ticks, candidate_ticks, odds_ratios=JudgeConfig.odds_ratios) -> np.ndarray:
    """The e-value after each tick (what continuous monitoring sees), vectorised."""
    return eprocess.e_path(eprocess.conditional_steps(stable_ticks, candidate_ticks, odds_ratios))


def check_error_rate(
    stable: ArmWindow, candidate: ArmWindow, config: JudgeConfig, seconds: float | None = None, *, compare: bool = True
) -> dict:
    """The error-rate comparison; `compare=False`: nothing serves beside the candidate (a
    100 % step), and without `min_requests` of control history (an undo, a Ship) the
    check says so instead of waiting for a control that gets no traffic."""
    if not compare and stable.requests < config.min_requests:
        return _check("error_rate", "test", SKIPPED, window="none", why=NO_CONTROL)
    e_value = error_e_value(stable.ticks, candidate.ticks, config.odds_ratios)
    threshold = 1.0 / config.alpha
    n_s, n_c = stable.requests, candidate.requests
    rate_s = stable.errors / n_s if n_s else None
    rate_c = candidate.errors / n_c if n_c else None
    difference = (rate_c - rate_s) if rate_s is not None and rate_c is not None else None
    if e_value >= threshold and n_c >= config.min_error_fail_requests:
        outcome = FAIL
    elif n_c >= config.min_requests and difference is not None and difference <= config.error_margin:
        outcome = PASS
    else:
        outcome = INCONCLUSIVE
    return _check(
        "error_rate",
        "test",
        outcome,
        test="mixture e-process (conditional binomial LR, Ville)",
        samples={"stable": n_s, "candidate": n_c},
        errors={"stable": stable.errors, "candidate": candidate.errors},
        rates={"stable": rate_s, "candidate": rate_c},
        statistic=difference,
        e_value=e_value,
        threshold=threshold,
        min_samples=config.min_requests,
        min_fail_samples=config.min_error_fail_requests,
        margin=config.error_margin,
        **progress(n_c, config.min_requests, "requests", seconds),
    )
