"""The p99 SLO guardrail: "p99 <= SLO" judged as what it says about requests, "at most 1 %
of them over the SLO", with the judge's always-valid tests (monitoring/judge/eprocess.py).

Why not the p99 of the window against the SLO: a p99 from 141 requests is the 2nd slowest
of them, so two slow requests put it over the SLO (a healthy candidate was rolled back so),
and counting that breach at several looks of a cumulative window adds no evidence. Here:

* Counting. A request is counted over the SLO when its histogram bucket lies wholly above
  the SLO: the bucket's lower bound is at or over it (the collector keeps each non-empty
  bucket's lower neighbour, monitoring/collection/collect.py `_decumulate`, so the bound is known).
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
  than twice the control's" (`control_votes`), so a slowdown of the whole pool (both arms
  slow) is not the candidate's fault, and neither is a process whose tail is a little
  heavier in some windows.
* Sustained: the candidate was over the ceiling in at least `guardrail_failure_limit`
  disjoint windows (scrape ticks), so one burst in one tick cannot fail it alone; and at
  100 %, where no control serves at the same moments to tell the host's load spikes from
  the candidate, over it in most windows of 1 / ceiling requests (`majority_votes`).

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
from monitoring.judge import eprocess, paired
from monitoring.judge.evidence import ArmWindow, JudgeConfig, make_check, progress
from monitoring.judge.statistics import histogram_quantile

PASS, FAIL, INCONCLUSIVE = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE
# alternatives of the pass-side e-process, as multiples of its null share (2 x the ceiling)
PASS_RATIOS = (0.5, 0.25, 0.1, 0.02)
# the candidate's share over the SLO must exceed the control's by this factor in a window to
# count against it (two processes of one model on a busy host: 92 vs 154 ms p99)
CONTROL_FACTOR = 2.0
# a candidate passes beside a control over the SLO itself (the host's tail) when its share is
# at most this many times the control's; at 100 % the pool's level is this times the
# control's share over the rollout (two processes of one model on a busy host: 2.1 vs 3.0 %
# over 50 ms; a candidate adding 2 % of +100 ms requests beside them: ~4.5 %)
POOL_FACTOR = 1.25


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


def control_votes(
    control: np.ndarray, candidate: np.ndarray, min_samples: int, factor: float = CONTROL_FACTOR, within: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(the tick each vote closed at, the votes) of "the candidate's share over the SLO is
    more than `CONTROL_FACTOR` x the control's", window by window: `control`, `candidate`
    (ticks, 2) of (requests, over the SLO), ticks joined until both arms have `min_samples`
    requests (monitoring/judge/paired.py's windows); a window where neither arm had a request over
    the SLO carries no vote. Unaligned arms are one window of their totals. `within=True`:
    the mirror votes, "at most `factor` x the control's" (the host's tail, for a pass).

    Why windows: a per-request comparison (the conditional e-process) found the difference
    between two processes of one model on a busy host within seconds at 2,000 req/s; a
    window is one vote, so only a candidate heavier-tailed window after window fails."""
    if len(control) != len(candidate):
        control, candidate = control.sum(0, keepdims=True), candidate.sum(0, keepdims=True)
    at, votes = [], []
    acc = np.zeros(4)
    for t, ((n_k, o_k), (n_c, o_c)) in enumerate(zip(control, candidate)):
        acc += (n_k, o_k, n_c, o_c)
        if acc[0] >= min_samples and acc[2] >= min_samples:
            if acc[1] or acc[3]:
                at.append(t)
                worse = acc[3] * acc[0] > factor * acc[1] * acc[2]
                votes.append(1.0 if worse != within else 0.0)
            acc[:] = 0.0
    return np.asarray(at, dtype=int), np.asarray(votes)


def majority_votes(ticks: np.ndarray, ceiling: float) -> tuple[np.ndarray, np.ndarray]:
    """At 100 % (no control at the same moments): (closing ticks, votes) of "this window's
    share over the SLO is over the ceiling", ticks joined to at least 1 / ceiling requests
    (100 at 1 %: at the ceiling a window is over it less than half the time, the binomial's
    median being at most its mean rounded up). A load spike of the host puts a few windows
    over; a candidate over its SLO puts most of them over, window after window."""
    need, at, votes, n, x = math.ceil(1 / ceiling), [], [], 0.0, 0.0
    for t, (requests, over) in enumerate(ticks):
        n, x = n + requests, x + over
        if n >= need:
            at.append(t)
            votes.append(1.0 if x > ceiling * n else 0.0)
            n, x = 0.0, 0.0
    return np.asarray(at, dtype=int), np.asarray(votes)


def sign_e_path(at: np.ndarray, votes: np.ndarray, ticks: int) -> np.ndarray:
    """The sign e-process (monitoring/judge/paired.py) after each tick: 1 before the first vote."""
    out = np.ones(ticks)
    if len(votes):
        path = eprocess.e_path(eprocess.ceiling_steps(np.c_[np.ones(len(votes)), votes], 0.5, paired.SIGN_RATIOS))
        index = np.searchsorted(at, np.arange(ticks), side="right") - 1
        out = np.where(index >= 0, path[np.maximum(index, 0)], 1.0)
    return out


def ceiling_for(ceiling: float, control: np.ndarray, compare: bool, config: JudgeConfig) -> float:
    """The ceiling the candidate's share is held to: the SLO's (1 %), or at 100 % (nothing
    beside the candidate) the share over the SLO its control had during the rollout times
    `POOL_FACTOR` when that is higher: the pool's own level."""
    n = control[:, 0].sum() if len(control) else 0.0
    if compare or n < config.min_guardrail_requests:
        return ceiling
    return _pool_level(ceiling, POOL_FACTOR * float(control[:, 1].sum() / n))


def _pool_level(ceiling, share):
    """max(ceiling, share), rounded up to 0.1 % (a ceiling of few values), at most 50 %."""
    return np.minimum(np.maximum(ceiling, np.ceil(np.asarray(share) * 1000 - 1e-9) / 1000), 0.5)


def fail_path(candidate: np.ndarray, control: np.ndarray, compared, config: JudgeConfig) -> np.ndarray:
    """Whether the guardrail fails at each tick (what check_p99_slo decides after each tick,
    for simulations): `candidate`, `control` (ticks, 2) of (requests, over the SLO) aligned;
    `compared`: per tick, whether a control served beside the candidate."""
    compared = np.asarray(compared, dtype=bool)
    ticks, threshold = len(candidate), 1.0 / config.guardrail_alpha
    enough = np.cumsum(candidate[:, 0]) >= config.min_guardrail_requests
    out = np.zeros(ticks, dtype=bool)
    e_control = sign_e_path(*control_votes(control, candidate, config.min_window_samples), ticks)
    # the control's history up to each tick decides the ceiling at 100 %: one path per ceiling
    seen, over = np.cumsum(control[:, 0]), np.cumsum(control[:, 1])
    pool_level = _pool_level(config.slo_exceedance_share, POOL_FACTOR * over / np.maximum(seen, 1))
    ceilings = np.where(
        compared | (seen < config.min_guardrail_requests), config.slo_exceedance_share, pool_level
    )  # ceiling_for, after each tick
    for ceiling in np.unique(ceilings):
        use = ceilings == ceiling
        e_slo = eprocess.e_path(eprocess.ceiling_steps(candidate, ceiling, config.slo_exceedance_ratios))
        sustained = np.cumsum(windows_over(candidate, ceiling)) >= config.guardrail_failure_limit
        majority = sign_e_path(*majority_votes(candidate, ceiling), ticks) >= threshold
        side = np.where(compared, e_control >= threshold, majority)
        out |= use & enough & (e_slo >= threshold) & sustained & side
    return out


def pass_null(ceiling: float, config: JudgeConfig) -> float:
    """The share the pass-side e-process must show the candidate under: twice the SLO's
    ceiling, or at 100 % the pool's level when that is higher (not twice it: on a busy host
    2-3 % over the SLO, a candidate adding 2 % of +100 ms requests sat at 1.25x the pool)."""
    return min(max(2 * config.slo_exceedance_share, ceiling), 0.5)


def pass_requests(config: JudgeConfig) -> int:
    """The fewest candidate requests with which the guardrail can pass (none of them over the
    SLO): where its pass-side e-process reaches 1/alpha (the forecast's need)."""
    null = pass_null(config.slo_exceedance_share, config)
    per_request = np.log([(1 - min(r * null, 0.999)) / (1 - null) for r in PASS_RATIOS])
    n = config.min_guardrail_requests
    while np.mean(np.exp(n * per_request)) < 1.0 / config.alpha and n < 1_000_000:
        n += 10
    return n


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
    ceiling = float(ceiling_for(ceiling, ctrl, compare, config))
    e_slo = eprocess.e_value(eprocess.ceiling_steps(cand, ceiling, config.slo_exceedance_ratios))
    # pass: evidence of a share under twice the SLO's ceiling, or under the pool's level at 100 %
    e_within = eprocess.e_value(eprocess.ceiling_steps(cand, pass_null(ceiling, config), PASS_RATIOS))
    sustained = int(windows_over(cand, ceiling).sum())
    e_control, control_windows = None, None
    if compare:
        at, votes = control_votes(ctrl, cand, config.min_window_samples)
        e_control, control_windows = float(sign_e_path(at, votes, max(len(cand), 1))[-1]), len(votes)
    share = over / n if n else None
    # beside a control over the SLO itself: its tail is the host's when the candidate's share
    # is at most POOL_FACTOR x the control's window after window (the mirror sign e-process)
    host_tail = False
    if compare and control_share is not None and control_share > ceiling:
        # windows with ~5 requests over the SLO expected on the control: a share, not a count of one
        size = max(config.min_window_samples, math.ceil(5 / control_share))
        at, votes = control_votes(ctrl, cand, size, POOL_FACTOR, within=True)
        host_tail = bool(sign_e_path(at, votes, max(len(cand), 1))[-1] >= 1.0 / config.alpha)
    counted_from = over_slo(candidate.latency_buckets, slo_s)[2]
    e_majority = None if compare else float(sign_e_path(*majority_votes(cand, ceiling), max(len(cand), 1))[-1])
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
