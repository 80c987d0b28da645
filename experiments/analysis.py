"""Online-experiment statistics: pure numpy/scipy, no Django, vectorised over experiments.

What is computed, per arm, from per-unit sufficient statistics (so a store can aggregate
them with one GROUP BY and the same code runs on 1 or 10 000 simulated experiments):

- units, exposures, clicks, conversions, value; per-unit CTR as a *ratio metric*
  (sum clicks / sum exposures over units) with its delta-method variance — exposures of
  one user are correlated, so the per-exposure binomial variance would be wrong;
- the relative lift of every candidate over the control on log(CTR) with an
  **always-valid confidence sequence**: the normal-mixture mSPRT of Johari, Pekelis &
  Walsh (2017) / Robbins, for an asymptotically normal estimate theta_hat with variance V,
  mixing variance tau^2:  theta in theta_hat +/- sqrt(V (V+tau^2)/tau^2 *
  (2 log(1/alpha) + log((V+tau^2)/V))).  Peeking after every request keeps the
  false-ship rate <= alpha (tests/experiments/test_online_analysis.py simulates it);
- a sequential **sample-ratio-mismatch** e-value: the Dirichlet-multinomial Bayes factor
  of Lindon & Malek (2020) against the configured allocation; e >= 1/alpha_srm flags the
  split as broken and blocks any decision (Ville's inequality keeps it anytime-valid);
- optional CUPED on the linearised ratio metric with a pre-period covariate per unit;
- sample-size planning from baseline CTR, MDE, alpha and power for *this* sequential test
  (it needs more units than a fixed-horizon z-test: both are returned), and the decision
  rule stated up front (`decide`).

Library choice: `savvi`, `confseq` and `spotify-confidence` were compared. spotify-confidence
works on pandas frames one experiment at a time and its sequential mode is group-sequential
(alpha spending with a planned number of looks), not a confidence sequence that allows
looking every minute; confseq's uniform boundaries are what the mixture formula below is,
but it ships C++ extensions for per-sample bounded streams rather than a ratio-metric
lift; savvi (0.x) has a multinomial test and linear-model sequences, but its API processes
one stream in Python objects, so a 200-experiment simulation would loop in Python. The
closed forms below are ten lines each, vectorise over a leading axis, and are checked by
simulation in `make test`; they were therefore written here rather than adding a dependency.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from scipy import optimize, special, stats

from monitoring.judge.evidence import GuardrailStatus

SUMS = ("units", "n", "c", "nn", "cc", "nc")  # per-unit sufficient statistics of (exposures n, clicks c)


def sums_from_units(exposures, clicks) -> dict[str, np.ndarray]:
    """Sufficient statistics over the last axis of per-unit arrays (units x ... -> ...)."""
    n = np.asarray(exposures, dtype=float)
    c = np.asarray(clicks, dtype=float)
    return {
        "units": np.asarray((n > 0).sum(axis=-1), dtype=float),
        "n": n.sum(axis=-1),
        "c": c.sum(axis=-1),
        "nn": (n * n).sum(axis=-1),
        "cc": (c * c).sum(axis=-1),
        "nc": (n * c).sum(axis=-1),
    }


def ratio_stats(s: dict):
    """(ctr, var(ctr), var(log ctr)) of the ratio metric sum c / sum n, by the delta method.

    Var(R_hat) ~= (S_cc - 2 R S_nc + R^2 S_nn) / S_n^2 (the sample moments of c - R n)."""
    units = np.asarray(s["units"], dtype=float)
    n = np.asarray(s["n"], dtype=float)
    c = np.asarray(s["c"], dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(n > 0, c / n, np.nan)
        resid = np.asarray(s["cc"]) - 2 * ratio * np.asarray(s["nc"]) + ratio**2 * np.asarray(s["nn"])
        # Small-sample correction units/(units-1); clipped at 0 against rounding.
        var = np.where(units > 1, np.maximum(resid, 0) / n**2 * units / np.maximum(units - 1, 1), np.nan)
        log_var = var / ratio**2
    return ratio, var, log_var


def msprt_halfwidth(var, tau2, alpha):
    """Half-width of the normal-mixture mSPRT confidence sequence for a N(theta, var) estimate."""
    var = np.asarray(var, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt(var * (var + tau2) / tau2 * (2 * np.log(1 / alpha) + np.log((var + tau2) / var)))


def mixing_variance(mde: float) -> float:
    """tau^2 of the mixture: centred on the effect size the experiment was planned for."""
    return float(np.log1p(abs(mde)) ** 2)


def lift(control: dict, candidate: dict, *, alpha: float, mde: float):
    """Relative lift of candidate over control on CTR with its always-valid interval.

    Returns dict of arrays: lift, lower, upper (relative, e.g. 0.05 = +5 %), theta (log
    ratio), var (of theta), z, and the fixed-horizon 1-alpha interval for comparison."""
    rc, _, vc = ratio_stats(control)
    rt, _, vt = ratio_stats(candidate)
    with np.errstate(divide="ignore", invalid="ignore"):
        theta = np.log(rt) - np.log(rc)
        var = vc + vt
        half = msprt_halfwidth(var, mixing_variance(mde), alpha)
        z_half = stats.norm.ppf(1 - alpha / 2) * np.sqrt(var)
        return {
            "lift": np.expm1(theta),
            "lower": np.expm1(theta - half),
            "upper": np.expm1(theta + half),
            "fixed_lower": np.expm1(theta - z_half),
            "fixed_upper": np.expm1(theta + z_half),
            "theta": theta,
            "var": var,
        }


def srm_evalue(counts, allocation, *, concentration: float = 100.0):
    """Sequential SRM e-value: Dirichlet(k*p)-multinomial marginal over the multinomial(p) null.

    counts: [..., arms]; allocation: [arms] summing to 1. Anytime-valid: flag at 1/alpha."""
    x = np.asarray(counts, dtype=float)
    p = np.asarray(allocation, dtype=float)
    p = p / p.sum()
    a = concentration * p
    log_marginal = (
        special.gammaln(a.sum())
        - special.gammaln(a.sum() + x.sum(axis=-1))
        + (special.gammaln(a + x) - special.gammaln(a)).sum(axis=-1)
    )
    log_null = (x * np.log(p)).sum(axis=-1)
    return np.exp(np.clip(log_marginal - log_null, -700, 700))


def cuped(y, x):
    """CUPED: y - theta (x - mean x), theta = cov(x, y) / var(x); returns (adjusted, theta)."""
    y = np.asarray(y, dtype=float)
    x = np.asarray(x, dtype=float)
    vx = x.var()
    theta = 0.0 if vx == 0 else float(np.cov(x, y, ddof=0)[0, 1] / vx)
    return y - theta * (x - x.mean()), theta


def cuped_ratio_sums(exposures, clicks, pre_ctr) -> dict:
    """Sufficient statistics of an arm after CUPED on the linearised ratio metric.

    The unit's linearised contribution c - R n is adjusted by a pre-period covariate (e.g.
    the unit's CTR before the experiment, times n); clicks are shifted so the ratio is
    unchanged and only the variance falls. Pool theta over arms before calling for an
    unbiased comparison (`pooled_theta`)."""
    n = np.asarray(exposures, dtype=float)
    c = np.asarray(clicks, dtype=float)
    x = np.asarray(pre_ctr, dtype=float) * n
    ratio = c.sum() / n.sum()
    adj, _ = cuped(c - ratio * n, x)
    c_adj = adj + ratio * n
    return sums_from_units(n, c_adj)


@dataclass(frozen=True)
class Plan:
    units_per_arm: int  # for the sequential test (mSPRT), at the requested power
    fixed_units_per_arm: int  # for a fixed-horizon two-sided z-test at the same alpha/power
    exposures_per_unit: float
    baseline: float
    mde: float
    alpha: float
    power: float


def unit_log_variance(baseline: float, exposures_per_unit: float) -> float:
    """Var of log CTR contributed by one unit (Bernoulli clicks): (1-p) / (p m)."""
    return (1 - baseline) / (baseline * exposures_per_unit)


def plan_sample(
    *,
    baseline: float,
    mde: float,
    alpha: float = 0.05,
    power: float = 0.8,
    exposures_per_unit: float = 1.0,
    allocation: tuple[float, float] = (0.5, 0.5),
) -> Plan:
    """Units per arm (at the smaller arm's share) so that a true relative lift `mde` is
    detected with `power`: for the sequential test, the n where theta_hat clears the
    confidence-sequence half-width with probability `power` at the last look (early
    stops only add power, so this is conservative)."""
    if not 0 < baseline < 1 or mde == 0 or not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError("baseline and alpha/power must lie in (0, 1) and mde must be non-zero")
    delta = abs(np.log1p(mde))
    s2 = unit_log_variance(baseline, exposures_per_unit)
    w = np.asarray(allocation, dtype=float) / sum(allocation)
    scale = s2 * (1 / w[0] + 1 / w[1]) * min(w)  # var(theta) = scale / units_in_smaller_arm
    z_b = stats.norm.ppf(power)
    fixed = scale * (stats.norm.ppf(1 - alpha / 2) + z_b) ** 2 / delta**2
    tau2 = mixing_variance(mde)

    def gap(n):
        var = scale / n
        return delta - msprt_halfwidth(var, tau2, alpha) - z_b * np.sqrt(var)

    seq = optimize.brentq(gap, fixed * 0.5, fixed * 100)
    return Plan(int(np.ceil(seq)), int(np.ceil(fixed)), exposures_per_unit, baseline, mde, alpha, power)


class ArmDecision(StrEnum):
    """What the rule says of a candidate arm at a tick (the results API's `decision`)."""

    SHIP = "ship"
    STOP = "stop"
    CONTINUE = "continue"
    BLOCKED = "blocked"  # a flagged sample-ratio mismatch: the lift is not a test


def decide(*, lower, upper, mde: float, srm_flagged, guardrails_ok=True):
    """The rule, stated before the experiment starts (vectorised):

    - stop for harm when a machine guardrail fails on the arm (errors, latency, p99 SLO,
      prediction PSI: monitoring's judge, per arm) — whatever the lift says, and even
      with a flagged SRM: the error e-process conditions on each tick's split and the
      SLO checks are absolute, so a broken split does not make the harm less real;
    - a flagged SRM blocks every other decision (the split is broken, the lift is not a test);
    - ship when the primary metric's always-valid lower bound is above 0 on the MDE's side
      (upper bound below 0 for a metric planned to fall) and no guardrail fails;
    - stop for harm when the bound clears 0 on the other side;
    - otherwise continue. A guardrail still pending (too little data) fails nothing."""
    lower = np.asarray(lower, dtype=float)
    upper = np.asarray(upper, dtype=float)
    with np.errstate(invalid="ignore"):
        good = lower > 0 if mde > 0 else upper < 0
        harm = upper < 0 if mde > 0 else lower > 0
    guard = np.asarray(guardrails_ok, dtype=bool)
    out = np.where(good & guard, ArmDecision.SHIP, ArmDecision.CONTINUE)
    out = np.where(harm, ArmDecision.STOP, out)
    out = np.where(np.asarray(srm_flagged, dtype=bool), ArmDecision.BLOCKED, out)
    return np.where(~guard, ArmDecision.STOP, out)


def summarize_arm(s: dict, conversions: float = 0.0, value: float | None = 0.0) -> dict:
    """One arm's figures as JSON can hold them (no NaN or infinity: None where not finite)."""
    ctr, var, _ = ratio_stats(s)
    return {
        "units": int(s["units"]),
        "exposures": int(s["n"]),
        "clicks": int(round(float(s["c"]))),
        "ctr": None if not np.isfinite(ctr) else float(ctr),
        "ctr_se": None if not np.isfinite(var) else float(np.sqrt(var)),
        "conversions": int(conversions),
        "value": float(value) if value is not None and np.isfinite(value) else None,
    }


def analyze(
    arms: dict[str, dict],
    *,
    control: str,
    allocation: dict[str, float],
    alpha: float,
    mde: float,
    srm_alpha: float = 0.001,
    guardrails: dict[str, str] | None = None,
    extras: dict[str, dict] | None = None,
) -> dict:
    """One experiment's results: per-arm summary, per-candidate lift/interval/decision, SRM.

    `guardrails`: each candidate's machine-guardrail status (a GuardrailStatus; missing =
    pending): a failing arm's decision is `stop` even before its lift has data."""
    names = list(arms)
    counts = np.array([float(arms[a]["units"]) for a in names])
    e = float(srm_evalue(counts, [allocation[a] for a in names])) if counts.sum() else 1.0
    e = e if np.isfinite(e) else float(np.finfo(float).max)
    srm_flag = e >= 1 / srm_alpha
    extras = extras or {}
    guardrails = guardrails or {}
    out = {
        "arms": {a: summarize_arm(arms[a], **extras.get(a, {})) for a in names},
        "srm": {"e_value": e, "threshold": 1 / srm_alpha, "flagged": bool(srm_flag)},
        "candidates": {},
    }
    for a in names:
        if a == control:
            continue
        lf = lift(arms[control], arms[a], alpha=alpha, mde=mde)
        vals = {k: (float(v) if np.isfinite(v) else None) for k, v in lf.items() if k != "theta"}
        status = guardrails.get(a, GuardrailStatus.PENDING)
        guard_ok = status != GuardrailStatus.FAIL
        bounds = (
            (vals["lower"], vals["upper"])
            if vals["lower"] is not None and vals["upper"] is not None
            else (np.nan, np.nan)
        )
        decision = str(decide(lower=bounds[0], upper=bounds[1], mde=mde, srm_flagged=srm_flag, guardrails_ok=guard_ok))
        out["candidates"][a] = {**vals, "decision": decision, "guardrails": str(status)}
    return out
