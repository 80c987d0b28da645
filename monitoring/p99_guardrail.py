"""The p99 SLO guardrail: "p99 <= SLO" judged as what it says about requests, "at most 1 %
of them over the SLO", with the judge's always-valid tests (monitoring/eprocess.py).

Why not the p99 of the window against the SLO: a p99 from 141 requests is the 2nd slowest
of them, so two slow requests put it over the SLO (a healthy candidate was rolled back so),
and counting that breach at several looks of a cumulative window adds no evidence. Here:

* Counting. A request is counted over the SLO when its histogram bucket lies wholly above
  the SLO: the bucket's lower bound is at or over it (the collector keeps each non-empty
  bucket's lower neighbour, monitoring/collect.py `_decumulate`, so the bound is known).
  An SLO that is a bucket bound (50 ms with the gateway's buckets) is counted exactly; one
  between bounds (30 ms) counts the requests over the next bound up (50 ms). No
  interpolation: every request counted is over the SLO, so the share counted is at most the
  true one and the test keeps its alpha (the price is power when the slow requests fall
  between the SLO and that bound); a fractional count would void the likelihood ratios.
* Evidence against the SLO: an e-process on the candidate's share over the SLO against the
  ceiling `slo_exceedance_share` (1 %), a product over ticks mixed over alternatives of 1.5
  to 40 times the ceiling (`eprocess.ceiling_steps`); valid however often it is looked at.
* Evidence against the control (when one serves beside the candidate, i.e. not at a 100 %
  step): the error-rate test's conditional e-process with "over the SLO" as the event, tick
  by tick, so a slowdown of the whole pool (both arms slow) is not the candidate's fault.
* Sustained: the candidate was over the ceiling in at least `guardrail_failure_limit`
  disjoint windows (scrape ticks), so one burst in one tick cannot fail it alone.

Fail needs all of these (each at `guardrail_alpha`) and `min_guardrail_requests`: under
either null ("at most 1 % over the SLO" or "no worse than the control") the chance of ever
failing is at most alpha (an intersection of tests, each valid on its own). Pass needs the
minimum sample and an observed share within the ceiling; otherwise the check waits
(inconclusive: the observed p99 is over the SLO, the evidence is not there yet).
"""

from __future__ import annotations

import math

import numpy as np

from deployments.rollout_machine import Verdict
from monitoring import eprocess
from monitoring.evidence import ArmWindow, JudgeConfig, make_check, progress
from monitoring.statistics import histogram_quantile

PASS, FAIL, INCONCLUSIVE = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE


def over_slo(buckets: dict[float, float], slo_s: float) -> tuple[float, float, float | None]:
    """(requests, requests over the SLO, the lowest bucket lower bound counted) of one
    histogram {le: count}: the buckets whose lower bound is at or over `slo_s`."""
    total, over, counted_from, lower = 0.0, 0.0, None, 0.0
    for le in sorted(buckets):
        count = buckets[le]
        total += count
        if count and lower >= slo_s * (1 - 1e-9):
            over += count
            counted_from = lower if counted_from is None else counted_from
        if not math.isinf(le):
            lower = le
    return total, over, counted_from


def exceedance_ticks(arm: ArmWindow, slo_s: float) -> np.ndarray:
    """(ticks, 2): per tick (requests, requests over the SLO) from its latency buckets; the
    window's totals as one tick when only those are known."""
    histograms = arm.latency_ticks or ([arm.latency_buckets] if arm.latency_buckets else [])
    return np.asarray([over_slo(h, slo_s)[:2] for h in histograms], dtype=float).reshape(-1, 2)


def windows_over(ticks: np.ndarray, ceiling: float) -> np.ndarray:
    """Per tick: 1 where the candidate's share over the SLO was over the ceiling."""
    return (ticks[:, 1] > ceiling * ticks[:, 0]).astype(int)


def fail_path(candidate: np.ndarray, control: np.ndarray | None, compared, config: JudgeConfig) -> np.ndarray:
    """Whether the guardrail fails at each tick, vectorised (what check_p99_slo decides
    after each tick; for simulations). `candidate`, `control`: (ticks, 2) of (requests,
    over the SLO); `compared`: per tick, whether a control served beside the candidate."""
    threshold = 1.0 / config.guardrail_alpha
    ceiling = config.slo_exceedance_share
    e_slo = eprocess.e_path(eprocess.ceiling_steps(candidate, ceiling, config.slo_exceedance_ratios))
    against_control = (
        eprocess.e_path(eprocess.conditional_steps(control, candidate, config.odds_ratios)) >= threshold
        if control is not None
        else np.zeros(len(candidate), dtype=bool)
    )
    return (
        (np.cumsum(candidate[:, 0]) >= config.min_guardrail_requests)
        & (e_slo >= threshold)
        & (np.cumsum(windows_over(candidate, ceiling)) >= config.guardrail_failure_limit)
        & (~np.asarray(compared, dtype=bool) | against_control)
    )


def check_p99_slo(
    control: ArmWindow, candidate: ArmWindow, config: JudgeConfig, *, compare: bool = True, seconds=None
) -> dict:
    """The guardrail's check. `control`: the arm serving beside the candidate (the baseline
    copy when the rollout has one); `compare=False`: none does (the candidate takes every
    request), the SLO alone holds it."""
    slo_s = config.slo_p99_ms / 1000.0
    ceiling, threshold = config.slo_exceedance_share, 1.0 / config.guardrail_alpha
    cand = exceedance_ticks(candidate, slo_s)
    n, over = float(cand[:, 0].sum()), float(cand[:, 1].sum())
    p99 = histogram_quantile(0.99, candidate.latency_buckets)
    e_slo = eprocess.e_value(eprocess.ceiling_steps(cand, ceiling, config.slo_exceedance_ratios))
    sustained = int(windows_over(cand, ceiling).sum())
    e_control, control_share = None, None
    if compare:
        ctrl = exceedance_ticks(control, slo_s)
        pair = (ctrl, cand) if len(ctrl) == len(cand) else (ctrl.sum(0, keepdims=True), cand.sum(0, keepdims=True))
        e_control = eprocess.e_value(eprocess.conditional_steps(*pair, config.odds_ratios))
        control_share = float(ctrl[:, 1].sum() / ctrl[:, 0].sum()) if ctrl[:, 0].sum() else None
    share = over / n if n else None
    counted_from = over_slo(candidate.latency_buckets, slo_s)[2]
    evidence = (
        e_slo >= threshold
        and (e_control is None or e_control >= threshold)
        and sustained >= config.guardrail_failure_limit
    )
    if n < config.min_guardrail_requests:
        outcome = INCONCLUSIVE
    elif evidence:
        outcome = FAIL
    else:
        outcome = PASS if share <= ceiling else INCONCLUSIVE
    return make_check(
        "p99_slo",
        "guardrail",
        outcome,
        test="e-process on the share over the SLO vs its 1 % ceiling and vs the control, in disjoint windows",
        samples={"candidate": n},
        statistic=None if p99 is None else p99 * 1000,
        threshold=config.slo_p99_ms,
        over={"candidate": over},
        share_over={"candidate": share, "control": control_share},
        allowed_share=ceiling,
        counted_over_ms=None if counted_from is None else counted_from * 1000,
        e_value=e_slo,
        e_value_control=e_control,
        e_threshold=threshold,
        windows_over=sustained,
        windows=len(cand),
        failure_limit=config.guardrail_failure_limit,
        min_samples=config.min_guardrail_requests,
        **progress(n, config.min_guardrail_requests, "requests", seconds),
    )
