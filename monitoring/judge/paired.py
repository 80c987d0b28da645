"""The judge's latency comparisons: candidate against its control WINDOW BY WINDOW, as
always-valid sign tests (e-processes), so noise the two arms share cancels and the
comparison stays valid however often it is looked at.

Why per window. Both arms serve at the same moments, so what the host does to both (a load
spike, a busy core, a garbage collection of the gateway) moves both arms' quantiles in the
same window; the comparison is made inside each window and only its sign is kept. Two
processes of one model on busy cores run up to ±40 % apart at p50 for tens of seconds, the
slower one changing from window to window (bench/data/judge/: the recorded busy trace): a
test on pooled samples (a rank test over all requests of the step) reads that process
difference as a real one the more surely the more traffic there is. Here a window is one
vote whatever its size: the spread between windows is the noise, and a candidate fails only
when it is slower than its control x (1 + margin) in most windows, window after window.

Windows. Consecutive scrape ticks are joined until both arms have `min_window_samples`
requests (a window's boundaries depend on request counts only, never on latencies); an
unfinished last window waits. Per window, the p50 ("latency") and the p90 ("latency_tail")
of each arm from its histogram (Prometheus' interpolation).

The test. Per window, Z = 1 when the candidate's quantile is over the control's x (1 +
margin) (+ an absolute floor for LLM token gaps). Under the null "the candidate is no
slower than the control x (1 + margin)", with both arms' per-window noise exchangeable, P(Z
= 1) <= 1/2 in every window whatever happened before; the Bernoulli likelihood ratios of P(Z
= 1) = p1 against 1/2, mixed over p1 in 0.6 .. 0.97, form a test supermartingale
(monitoring/judge/eprocess.py `ceiling_steps`): P(ever >= 1/alpha) <= alpha under continuous
looking (Ville). Fail at e >= 1/`latency_alpha` (100); pass when the mirror e-process (W = 1
when the candidate is under the bound; null: the candidate IS that much slower) reaches
1/`alpha` (20: passing a candidate that is that much slower is the lesser error) after
`min_latency_windows` windows. A window's p90 from 20 requests is too noisy for that mirror
test to conclude at low traffic (an A/A pair at 2 req/s was over the bound in 38 % of its
windows), so the tail also passes after twice the minimum windows when its evidence leans
the other way (e-value < 1): the p99 SLO guardrail, which needs evidence to pass, holds
the far tail. What it cannot tell apart: a candidate process that is slower for its host
for the whole step (one replica on a busy core, the control on a quiet one) from a slower
model; the margin is the allowance for that (docs/rollouts.md, "Latency margin").
"""

from __future__ import annotations

import numpy as np

from deployments.rollout_machine import Verdict
from monitoring.judge import eprocess
from monitoring.judge.evidence import ArmWindow, JudgeConfig, make_check, progress
from monitoring.judge.statistics import histogram_quantile

PASS, FAIL, INCONCLUSIVE = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE
# alternatives of the sign e-process: P(candidate's window over the bound) = 0.5 x these
SIGN_RATIOS = (1.2, 1.4, 1.6, 1.8, 1.94)
QUANTILES = {"latency": 0.5, "latency_tail": 0.9}


def _histograms(arm: ArmWindow) -> list[dict[float, float]]:
    return arm.latency_ticks or ([arm.latency_buckets] if arm.latency_buckets else [])


def _added(total: dict, part: dict) -> None:
    for le, n in part.items():
        total[le] = total.get(le, 0.0) + n


def windows(control: ArmWindow, candidate: ArmWindow, min_samples: int) -> list[tuple[dict, dict]]:
    """(control histogram, candidate histogram) per finished window: consecutive ticks joined
    until both arms have `min_samples` requests. Ticks are aligned; when only one side has
    per-tick histograms (or the counts differ) the two windows' totals are one window."""
    ctrl, cand = _histograms(control), _histograms(candidate)
    if len(ctrl) != len(cand):
        ctrl, cand = [control.latency_buckets], [candidate.latency_buckets]
    out, acc_k, acc_c = [], {}, {}
    for k, c in zip(ctrl, cand):
        _added(acc_k, k)
        _added(acc_c, c)
        if sum(acc_k.values()) >= min_samples and sum(acc_c.values()) >= min_samples:
            out.append((acc_k, acc_c))
            acc_k, acc_c = {}, {}
    return out


def margin_for(config: JudgeConfig, control: ArmWindow) -> float:
    """The practical-significance margin: the endpoint's when set, else derived from the SLO's
    headroom over the control's own p99: half the headroom (a candidate 3x inside its SLO may
    be slower by more than one just inside it), within [20 %, 30 %]: never below what two
    processes of one model on a busy host differ by over a step, never so wide that a +50 %
    p50 passes; 20 % without an SLO or a control p99 yet."""
    if config.latency_margin is not None:
        return float(config.latency_margin)
    p99 = histogram_quantile(0.99, control.latency_buckets)
    if not config.slo_p99_ms or not p99:
        return config.default_latency_margin
    headroom = config.slo_p99_ms / (p99 * 1000) - 1
    return min(config.max_latency_margin, max(config.min_latency_margin, headroom / 2))


def _quantiles_ms(buckets: dict[float, float]) -> dict:
    return {
        name: (None if (v := histogram_quantile(q, buckets)) is None else v * 1000)
        for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
    }


def sign_e_values(pairs: list[tuple[dict, dict]], q: float, margin: float, floor_s: float) -> tuple[float, float, int]:
    """(e-value against "no slower than control x (1+margin) + floor", e-value against "that
    much slower", windows over the bound) over the windows `pairs`."""
    over, under = [], []
    for k, c in pairs:
        qk, qc = histogram_quantile(q, k), histogram_quantile(q, c)
        if qk is None or qc is None:
            continue
        bound = qk * (1 + margin) + floor_s
        over.append(1.0 if qc > bound else 0.0)
        under.append(1.0 if qc < bound else 0.0)
    e_slower = eprocess.e_value(eprocess.ceiling_steps(np.c_[np.ones(len(over)), over], 0.5, SIGN_RATIOS))
    e_within = eprocess.e_value(eprocess.ceiling_steps(np.c_[np.ones(len(under)), under], 0.5, SIGN_RATIOS))
    return e_slower, e_within, int(sum(over))


def check_latency(
    stable: ArmWindow, candidate: ArmWindow, config: JudgeConfig, seconds: float | None = None, *, floor_s: float = 0.0
) -> list[dict]:
    """The median and the tail comparisons ("latency", "latency_tail") of the candidate
    against its control (`stable`), window by window (the module's docstring). `floor_s`: an
    absolute margin added to the relative one (the LLM checks' floor of practical
    significance, monitoring/judge/llm_checks.py); 0 for request latency."""
    margin = margin_for(config, stable)
    pairs = windows(stable, candidate, config.min_window_samples)
    n_k, n_c = sum(stable.latency_buckets.values()), sum(candidate.latency_buckets.values())
    threshold = 1.0 / config.latency_alpha
    pace = progress(len(pairs), config.min_latency_windows, "windows", seconds)
    quantiles = {"stable": _quantiles_ms(stable.latency_buckets), "candidate": _quantiles_ms(candidate.latency_buckets)}
    checks = []
    for name, q in QUANTILES.items():
        e_slower, e_within, over = sign_e_values(pairs, q, margin, floor_s)
        if e_slower >= threshold:
            outcome = FAIL
        elif len(pairs) >= config.min_latency_windows and (
            e_within >= 1.0 / config.alpha
            or (name == "latency_tail" and len(pairs) >= 2 * config.min_latency_windows and e_slower < 1.0)
        ):
            outcome = PASS
        else:
            outcome = INCONCLUSIVE
        control_q = histogram_quantile(q, stable.latency_buckets)
        checks.append(
            make_check(
                name,
                "test",
                outcome,
                test=f"sign e-process on per-window p{q * 100:g} vs control x (1+margin)",
                samples={"stable": n_k, "candidate": n_c},
                quantiles_ms=quantiles,
                quantile=q,
                windows=len(pairs),
                windows_over=over,
                statistic=over / len(pairs) if pairs else None,
                e_value=e_slower,
                e_value_within=e_within,
                threshold=threshold,
                margin=margin,
                floor_ms=floor_s * 1000,
                limit_ms=None if control_q is None else (control_q * (1 + margin) + floor_s) * 1000,
                min_window_samples=config.min_window_samples,
                min_windows=config.min_latency_windows,
                **pace,
            )
        )
    return checks


def describe(check: dict, control: str, label: str = "candidate") -> str:
    """A failed comparison in a sentence."""
    q = check["quantiles_ms"]
    which = "p50" if check.get("quantile") == 0.5 else "p95"
    floor = f" +{check['floor_ms']:g} ms" if check.get("floor_ms") else ""
    cand, ctrl = q["candidate"].get(which), q["stable"].get(which)
    figures = f"{which} {cand:.2f} ms vs {ctrl:.2f} ms" if cand is not None and ctrl is not None else ""
    return (
        f"{label} slower than {control} +{check['margin']:.0%}{floor} at p{check['quantile'] * 100:g} in "
        f"{check['windows_over']} of {check['windows']} windows ({figures}; e-value {check['e_value']:.3g} >= "
        f"{check['threshold']:.3g})"
    )
