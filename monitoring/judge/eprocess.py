"""The judge's always-valid sequential tests (e-processes): pure numpy, one family, two uses.

An e-process here is a running product, over disjoint ticks, of likelihood ratios each of
which has expectation <= 1 under the null, mixed with equal weights over a grid of
alternatives: a test supermartingale, so by Ville's inequality P(it EVER reaches 1/alpha)
<= alpha under the null, however often it is looked at. Each function returns the per-tick
log likelihood ratios, one row per alternative; `e_value` mixes their sums, `e_path` their
running sums (what a judge looking at every tick sees).

* `conditional_steps`: two arms (the candidate and its control), per tick (requests, events).
  Given the K events both arms had in a tick, under H0 (the same event probability) the
  candidate's number is hypergeometric; the binomial likelihood ratio for "the candidate's
  odds are psi times the control's" (q1 = psi*q / (psi*q + 1 - q), q = the candidate's
  share of the tick's requests) has expectation <= 1 under that law (convex order,
  Hoeffding 1963), whatever the base rate or split does from tick to tick. The error-rate
  test (events: errors) and the p99 guardrail's comparison with its control (events:
  requests over the SLO) both use it.
* `ceiling_steps`: one arm against a fixed ceiling p0 on its event probability (the p99
  guardrail: at most 1 % of requests over the SLO). The binomial likelihood ratio of p1 >
  p0 against p0 has expectation p*p1/p0 + (1-p)*(1-p1)/(1-p0) <= 1 for every p <= p0, so
  the composite null "p <= p0" is covered, and a drifting p under it only lowers it.
"""

from __future__ import annotations

import math

import numpy as np

_MAX_LOG = 700.0  # exp overflows past ~709


def _ticks(ticks) -> tuple[np.ndarray, np.ndarray]:
    array = np.asarray(ticks, dtype=float).reshape(-1, 2)
    return array[:, 0], array[:, 1]


def conditional_steps(control_ticks, candidate_ticks, odds_ratios) -> np.ndarray:
    """(len(odds_ratios), ticks) log likelihood ratios; ticks aligned (tick i of both covers
    the same interval). A tick with no event, or with no request on either arm, adds 0."""
    n_s, e_s = _ticks(control_ticks)
    n_c, e_c = _ticks(candidate_ticks)
    if len(n_s) != len(n_c):
        raise ValueError("control and candidate ticks must be aligned")
    k = e_s + e_c
    use = (k > 0) & (n_s > 0) & (n_c > 0)
    q = np.where(use, n_c / np.where(use, n_s + n_c, 1), 0.5)
    rows = []
    for psi in odds_ratios:
        q1 = psi * q / (psi * q + 1 - q)
        rows.append(np.where(use, e_c * np.log(q1 / q) + (k - e_c) * np.log((1 - q1) / (1 - q)), 0.0))
    return np.asarray(rows).reshape(len(odds_ratios), len(n_s))


def ceiling_steps(ticks, ceiling: float, ratios) -> np.ndarray:
    """(len(ratios), ticks) log likelihood ratios of "the event probability is r x ceiling"
    (capped below 1) against "it is the ceiling", per tick (requests, events)."""
    if not 0 < ceiling < 1:
        raise ValueError("the ceiling is a probability in (0, 1)")
    n, x = _ticks(ticks)
    rows = []
    for ratio in ratios:
        p1 = min(ratio * ceiling, 0.999)
        rows.append(x * math.log(p1 / ceiling) + (n - x) * math.log((1 - p1) / (1 - ceiling)))
    return np.asarray(rows).reshape(len(ratios), len(n))


def _mix(log_sums: np.ndarray) -> np.ndarray:
    """Equal-weight mixture of exp(log_sums) over axis 0, without overflow."""
    top = log_sums.max(axis=0)
    safe = np.minimum(top, _MAX_LOG)
    mixed = np.exp(safe) * np.mean(np.exp(log_sums - top), axis=0)
    return np.where(top < _MAX_LOG, mixed, math.inf)


def e_value(steps: np.ndarray) -> float:
    """The mixture e-value after all the ticks (1.0 before any)."""
    if steps.shape[1] == 0:
        return 1.0
    return float(_mix(steps.sum(axis=1)))


def e_path(steps: np.ndarray) -> np.ndarray:
    """The mixture e-value after each tick."""
    if steps.shape[1] == 0:
        return np.empty(0)
    return _mix(np.cumsum(steps, axis=1))
