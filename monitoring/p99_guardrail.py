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
  step): window by window, a sign e-process on "the candidate's share over the SLO is more
  than twice the control's" (`control_e_value`), so a slowdown of the whole pool (both arms
  slow) is not the candidate's fault, and neither is a process whose tail is a little
  heavier in some windows.
* Sustained: the candidate was over the ceiling in at least `guardrail_failure_limit`
  disjoint windows (scrape ticks), so one burst in one tick cannot fail it alone; and at
  100 %, where no control serves at the same moments to tell the host's load spikes from
  the candidate, over it in most windows of 3 / ceiling requests (`majority_e_value`).

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
from monitoring import eprocess, paired
from monitoring.evidence import ArmWindow, JudgeConfig, make_check, progress
from monitoring.statistics import histogram_quantile

PASS, FAIL, INCONCLUSIVE = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE
# alternatives of the pass-side e-process, as multiples of its null share (2 x the ceiling)
PASS_RATIOS = (0.5, 0.25, 0.1, 0.02)
# the candidate's share over the SLO must exceed the control's by this factor in a window to
# count against it (two processes of one model on a busy host: 92 vs 154 ms p99)
CONTROL_FACTOR = 2.0


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


def control_e_value(control: ArmWindow, candidate: ArmWindow, slo_s: float, config: JudgeConfig) -> tuple[float, int]:
    """(e-value, windows compared) of "the candidate's share over the SLO is more than
    `CONTROL_FACTOR` x the control's", window by window (monitoring/paired.py's windows and
    sign e-process): per window Z = 1 when it is; windows where neither arm had a request over
    the SLO carry no vote. A per-request comparison (the conditional e-process) found the
    difference between two processes of one model on a busy host within seconds at 2,000
    req/s; a window is one vote, so only a candidate heavier-tailed window after window fails."""
    votes = []
    for k, c in paired.windows(control, candidate, config.min_window_samples):
        n_k, o_k, _ = over_slo(k, slo_s)
        n_c, o_c, _ = over_slo(c, slo_s)
        if o_k == 0 and o_c == 0:
            continue
        votes.append(1.0 if o_c * n_k > CONTROL_FACTOR * o_k * n_c else 0.0)
    steps = eprocess.ceiling_steps(np.c_[np.ones(len(votes)), votes], 0.5, paired.SIGN_RATIOS)
    return eprocess.e_value(steps), len(votes)


def majority_e_value(ticks: np.ndarray, ceiling: float) -> float:
    """At 100 % (no control at the same moments): a sign e-process on "this window's share over
    the SLO is over the ceiling", over consecutive ticks joined to at least 3 / ceiling
    requests (300 at 1 %: three expected over the SLO, so a window's share is an estimate). A
    load spike of the host puts a few windows over; a candidate over its SLO puts most of
    them over, window after window."""
    need, votes, n, x = math.ceil(3 / ceiling), [], 0.0, 0.0
    for requests, over in ticks:
        n, x = n + requests, x + over
        if n >= need:
            votes.append(1.0 if x > ceiling * n else 0.0)
            n, x = 0.0, 0.0
    steps = eprocess.ceiling_steps(np.c_[np.ones(len(votes)), votes], 0.5, paired.SIGN_RATIOS)
    return eprocess.e_value(steps)


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
    ctrl = exceedance_ticks(control, slo_s)
    control_share = float(ctrl[:, 1].sum() / ctrl[:, 0].sum()) if len(ctrl) and ctrl[:, 0].sum() else None
    if not compare and control_share is not None and ctrl[:, 0].sum() >= config.min_guardrail_requests:
        ceiling = min(max(ceiling, CONTROL_FACTOR * control_share), 0.5)  # the pool's own level at 100 %
    e_slo = eprocess.e_value(eprocess.ceiling_steps(cand, ceiling, config.slo_exceedance_ratios))
    e_within = eprocess.e_value(eprocess.ceiling_steps(cand, min(2 * ceiling, 0.5), PASS_RATIOS))
    sustained = int(windows_over(cand, ceiling).sum())
    e_control, control_windows = None, None
    if compare:
        e_control, control_windows = control_e_value(control, candidate, slo_s, config)
    share = over / n if n else None
    host_tail = (
        compare
        and control_share is not None
        and control_share > ceiling
        and share is not None
        and share <= 1.5 * control_share
    )
    counted_from = over_slo(candidate.latency_buckets, slo_s)[2]
    e_majority = None if compare else majority_e_value(cand, ceiling)
    evidence = (
        e_slo >= threshold
        and (e_control is None or e_control >= threshold)
        and (e_majority is None or e_majority >= threshold)
        and sustained >= config.guardrail_failure_limit
    )
    if n < config.min_guardrail_requests:
        outcome = INCONCLUSIVE
    elif evidence:
        outcome = FAIL
    else:
        outcome = PASS if (e_within >= 1.0 / config.alpha or host_tail) else INCONCLUSIVE
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
        e_value_within=e_within,
        host_tail=bool(host_tail),
        counted_over_ms=None if counted_from is None else counted_from * 1000,
        e_value=e_slo,
        e_value_control=e_control,
        control_windows=control_windows,
        e_threshold=threshold,
        windows_over=sustained,
        e_value_majority=e_majority,
        windows=len(cand),
        failure_limit=config.guardrail_failure_limit,
        min_samples=config.min_guardrail_requests,
        **progress(n, config.min_guardrail_requests, "requests", seconds),
    )
