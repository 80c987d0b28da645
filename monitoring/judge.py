"""The canary judge: candidate vs its control on the same window, one verdict per tick.

Pure functions (numpy + scipy.stats), no Django: `judge(stable, candidate, config)`.
"stable" below is the control: with a fair baseline (a fresh copy of the stable with the
candidate's share, docs/rollouts.md) it is the baseline for the
latency tests, and stable + baseline pooled for the anchored error-rate test and PSI.
The window must be ANCHORED (it starts when the candidate first got traffic and only
grows), because the error-rate e-process is a running product over ticks. Latency is
compared within the current STEP while the stable still gets traffic (not at all when the
candidate takes every request: no control): a step's split is constant, so both arms'
samples come from the same moments; pooled over a drifting rollout they would not (docs/rollouts.md).

Checks (each reports samples, statistic, p-value or e-value and threshold):

guardrails (monitoring/guardrails.py; each needs `min_guardrail_requests` first)
  * p99_slo      "p99 <= SLO" as "at most 1 % of requests over the SLO" (counted from
                 histogram buckets): an always-valid e-process on that share against
                 its ceiling AND against the control (when one serves beside the
                 candidate), over in >= 3 disjoint windows (monitoring/p99_guardrail.py).
  * error_slo    candidate error rate over the SLO, confirmed by a one-sided binomial
                 test at `guardrail_alpha` so a handful of early errors do not trip it.
  * psi          PSI of the candidate's prediction-score bins vs the control's over
                 `psi_threshold` (needs `min_score_samples` on each side), sustained.

Every check's evidence has `progress` {have, need, unit} and `eta_seconds`
(monitoring/evidence.py), so a waiting verdict says what it waits for.

statistical comparisons
  * error_rate   always-valid one-sided test that the candidate errs more often. Per tick,
                 given the K errors both arms made, under H0 (equal error probability)
                 the number that came from the candidate is hypergeometric; the binomial
                 likelihood ratio of "candidate's error odds are psi times stable's"
                 (q1 = psi*q / (psi*q + 1 - q), q = candidate's share of the tick's
                 requests) has expectation <= 1 under that hypergeometric (convex order,
                 Hoeffding 1963). The product over ticks, mixed over a grid of psi, is a
                 test supermartingale, so by Ville's inequality P(ever >= 1/alpha) <= alpha
                 under continuous monitoring, whatever the base rate or traffic split
                 does from tick to tick. Fail when the e-value >= 1/alpha; pass needs
                 `min_requests` candidate requests, no alarm and an observed difference
                 within `error_margin`.
  * latency      Mann-Whitney U (rank based, so heavy tails do not dominate) on samples
                 reconstructed from histogram bucket counts (spread evenly inside each
                 bucket), against the stable arm scaled by (1 + latency_margin): fail when
                 the candidate is significantly slower than stable+margin, pass when it is
                 significantly faster than stable+margin (non-inferiority), each at
                 `latency_alpha`, pass only with `min_latency_samples`, fail only with
                 `min_latency_fail_samples` (a few slow requests are not a regression).
                 The margin is what keeps repeated looks at an A/A pair from flagging:
                 under A/A the truth is 10 % away from the null boundary.
  * latency_tail a quantile test: the share of candidate requests above stable's
                 p95 x (1 + margin) against 5 % (one-sided binomial test).

LLM endpoints (`config.kind == "llm"`): the same tests on time to first token and
inter-token latency (rank tests, SLO guardrails) and on the LLM requests' error rate,
instead of the request-duration and score checks: monitoring/llm_checks.py.

Why this is one long module: the judge's checks, their configuration and how each verdict is described are one piece of statistics read together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from deployments.rollout_machine import VariantRole, Verdict
from monitoring import eprocess
from monitoring.evidence import ArmWindow, JudgeConfig, progress
from monitoring.evidence import make_check as _check
from monitoring.guardrails import check_guardrails
from monitoring.llm_checks import describe_llm, llm_checks
from monitoring.statistics import histogram_quantile

__all__ = ["ArmWindow", "Decision", "JudgeConfig", "check_error_rate", "check_guardrails", "check_latency", "judge"]

PASS, FAIL, INCONCLUSIVE = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE
SKIPPED = "skipped"  # a comparison with no control to compare against: neither holds nor fails a verdict


@dataclass
class Decision:
    outcome: str
    reason: str
    checks: list[dict]


# --- error rate: always-valid e-process --------------------------------------------------------
def error_e_value(stable_ticks, candidate_ticks, odds_ratios=JudgeConfig.odds_ratios) -> float:
    """The mixture e-value (equal weights over `odds_ratios`) after all the ticks given.

    Ticks are aligned: tick i of both lists covers the same interval (monitoring/eprocess.py)."""
    return eprocess.e_value(eprocess.conditional_steps(stable_ticks, candidate_ticks, odds_ratios))


def error_e_path(stable_ticks, candidate_ticks, odds_ratios=JudgeConfig.odds_ratios) -> np.ndarray:
    """The e-value after each tick (what continuous monitoring sees), vectorised."""
    return eprocess.e_path(eprocess.conditional_steps(stable_ticks, candidate_ticks, odds_ratios))


def check_error_rate(
    stable: ArmWindow, candidate: ArmWindow, config: JudgeConfig, seconds: float | None = None
) -> dict:
    e_value = error_e_value(stable.ticks, candidate.ticks, config.odds_ratios)
    threshold = 1.0 / config.alpha
    n_s, n_c = stable.requests, candidate.requests
    rate_s = stable.errors / n_s if n_s else None
    rate_c = candidate.errors / n_c if n_c else None
    difference = (rate_c - rate_s) if rate_s is not None and rate_c is not None else None
    if e_value >= threshold:
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
        margin=config.error_margin,
        **progress(n_c, config.min_requests, "requests", seconds),
    )


# --- latency ---------------------------------------------------------------------------------
def reconstruct(buckets: dict[float, float], max_points: int | None = None) -> np.ndarray:
    """Samples spread evenly inside each histogram bucket (the +Inf bucket sits at the
    largest finite bound), thinned proportionally to at most `max_points`."""
    total = sum(buckets.values())
    if total <= 0:
        return np.empty(0)
    scale = min(1.0, max_points / total) if max_points else 1.0
    parts, lower = [], 0.0
    for le in sorted(buckets):
        count = int(round(buckets[le] * scale))
        if count > 0:
            if math.isinf(le):
                parts.append(np.full(count, lower))
            else:
                parts.append(lower + (le - lower) * (np.arange(count) + 0.5) / count)
        if not math.isinf(le):
            lower = le
    return np.concatenate(parts) if parts else np.empty(0)


def _quantiles_ms(buckets: dict[float, float]) -> dict:
    return {
        name: (None if (v := histogram_quantile(q, buckets)) is None else v * 1000)
        for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
    }


def check_latency(
    stable: ArmWindow, candidate: ArmWindow, config: JudgeConfig, seconds: float | None = None, *, floor_s: float = 0.0
) -> list[dict]:
    """The rank test and the tail test (see the module's docstring). `floor_s`: an absolute
    margin added to the relative one (stable x (1 + margin) + floor): the LLM checks' floor
    of practical significance (monitoring/llm_checks.py); 0 for request latency."""
    s = reconstruct(stable.latency_buckets, config.max_latency_points)
    c = reconstruct(candidate.latency_buckets, config.max_latency_points)
    n_s_true, n_c_true = sum(stable.latency_buckets.values()), sum(candidate.latency_buckets.values())
    samples = {"stable": n_s_true, "candidate": n_c_true}
    quantiles = {"stable": _quantiles_ms(stable.latency_buckets), "candidate": _quantiles_ms(candidate.latency_buckets)}
    # the slower-filling arm sets the pace (with a baseline both arms fill alike)
    have = min(n_s_true, n_c_true)
    pace = progress(have, config.min_latency_samples, "requests", seconds)
    if len(s) < 2 or len(c) < 2:
        return [
            _check(
                "latency",
                "test",
                INCONCLUSIVE,
                test="Mann-Whitney U vs stable x (1+margin)",
                samples=samples,
                quantiles_ms=quantiles,
                statistic=None,
                p_value=None,
                threshold=config.latency_alpha,
                **pace,
            ),
            _check(
                "latency_tail",
                "test",
                INCONCLUSIVE,
                test="binomial test on share above stable p95 x (1+margin)",
                samples=samples,
                statistic=None,
                p_value=None,
                threshold=config.latency_alpha,
                **pace,
            ),
        ]
    bound = s * (1 + config.latency_margin) + floor_s
    slower = stats.mannwhitneyu(c, bound, alternative="greater")
    faster = stats.mannwhitneyu(c, bound, alternative="less")
    # Common-language effect size: P(candidate > stable x (1+margin)).
    effect = float(slower.statistic) / (len(c) * len(bound))
    may_fail = n_c_true >= config.min_latency_fail_samples
    if slower.pvalue < config.latency_alpha:
        outcome = FAIL if may_fail else INCONCLUSIVE
    elif faster.pvalue < config.latency_alpha and have >= config.min_latency_samples:
        outcome = PASS
    else:
        outcome = INCONCLUSIVE
    shift = _check(
        "latency",
        "test",
        outcome,
        test="Mann-Whitney U vs stable x (1+margin)",
        samples=samples,
        quantiles_ms=quantiles,
        statistic=float(slower.statistic),
        effect=effect,
        p_value=float(slower.pvalue),
        p_value_noninferior=float(faster.pvalue),
        threshold=config.latency_alpha,
        margin=config.latency_margin,
        floor_ms=floor_s * 1000,
        min_samples=config.min_latency_samples,
        min_fail_samples=config.min_latency_fail_samples,
        **pace,
    )

    stable_p95 = histogram_quantile(0.95, stable.latency_buckets)
    limit = stable_p95 * (1 + config.latency_margin) + floor_s
    above = int(np.sum(c > limit))
    tail = stats.binomtest(above, len(c), 0.05, alternative="greater")
    tail_outcome = (
        (FAIL if may_fail else INCONCLUSIVE)
        if tail.pvalue < config.latency_alpha
        else (PASS if have >= config.min_latency_samples else INCONCLUSIVE)
    )
    tail_check = _check(
        "latency_tail",
        "test",
        tail_outcome,
        test="binomial test on share above stable p95 x (1+margin)",
        samples=samples,
        statistic=above / len(c),
        limit_ms=limit * 1000,
        p_value=float(tail.pvalue),
        threshold=config.latency_alpha,
        expected_share=0.05,
        **pace,
    )
    return [shift, tail_check]


# --- the verdict ---------------------------------------------------------------------------------
def judge(
    stable: ArmWindow,
    candidate: ArmWindow,
    config: JudgeConfig | None = None,
    *,
    latency: tuple[ArmWindow, ArmWindow] | None = None,
    compare_latency: bool = True,
    error_control: ArmWindow | None = None,
    previous: dict | None = None,
    now_s: float | None = None,
    seconds: float | None = None,
    step_seconds: float | None = None,
    control: str = VariantRole.STABLE,
) -> Decision:
    """Fail if any check fails; pass if every check passes (or is skipped); otherwise
    inconclusive.

    `stable` is the control: the rollout's baseline copy when it has one (same share,
    same conditions), else the stable. `error_control`: the control of the anchored
    checks (error rate, PSI) when it differs: stable and baseline pooled (both serve the
    stable artifact, and the more control requests, the more each candidate error weighs). `latency`:
    (control, candidate) over the current step only, for the latency comparisons;
    without it they use the anchored window. `compare_latency=False` (nothing serves
    beside the candidate) skips them: the p99 SLO guardrail still holds the candidate's
    latency. `previous` (the rollout's last checks by name) and `now_s` (epoch seconds)
    carry the guardrails' breach counts; `seconds` / `step_seconds`: how long the
    window / the step has run, for each check's ETA. `control`: what the reasons call
    the control ("baseline" when the rollout has one)."""
    config = config or JudgeConfig()
    if config.kind == "llm":
        checks = llm_checks(
            stable,
            candidate,
            config,
            latency=latency,
            compare_latency=compare_latency,
            error_control=error_control,
            seconds=seconds,
            step_seconds=step_seconds,
        )
        return _decision(checks, control, pooled=error_control is not None)
    if compare_latency:
        latency_checks = check_latency(*(latency or (stable, candidate)), config, step_seconds if latency else seconds)
        for check in latency_checks:
            check["window"] = "step" if latency else "rollout"
    else:
        latency_checks = [
            _check(
                name,
                "test",
                SKIPPED,
                window="none",
                why="no stable traffic beside the candidate to compare with; the p99 SLO guardrail applies",
            )
            for name in ("latency", "latency_tail")
        ]
    checks = [
        *check_guardrails(
            error_control or stable,
            candidate,
            config,
            previous=previous,
            now_s=now_s,
            seconds=seconds,
            latency_control=stable,
            compare=compare_latency,
        ),
        check_error_rate(error_control or stable, candidate, config, seconds),
        *latency_checks,
    ]
    return _decision(checks, control, pooled=error_control is not None)


def _decision(checks: list[dict], control: str, pooled: bool) -> Decision:
    """Fail if any check fails (the reason says each), pass if all pass or are skipped,
    else inconclusive (the reason says what each waits for)."""
    failed = [c for c in checks if c["outcome"] == FAIL]
    if failed:
        return Decision(FAIL, "; ".join(_describe(c, control, pooled=pooled) for c in failed), checks)
    waiting = [c for c in checks if c["outcome"] == INCONCLUSIVE]
    if waiting:
        return Decision(INCONCLUSIVE, "waiting for evidence: " + ", ".join(_waiting(c) for c in waiting), checks)
    return Decision(PASS, "every guardrail and comparison passed", checks)


def _waiting(check: dict) -> str:
    """`latency (312 of 500 requests, ~40 s)`: what a check still needs."""
    pace = check.get("progress")
    complete = bool(pace) and pace.get("need") is not None and pace["have"] >= pace["need"]
    if check["name"] in ("p99_slo", "ttft_slo", "itl_slo") and complete:
        return f"{check['name']} ({_p99_evidence(check)})"
    if check.get("breaches"):
        if check["breaches"] < check.get("failure_limit", 0):
            return f"{check['name']} (breach {check['breaches']} of {check['failure_limit']} looks needed to fail)"
        held, need = check.get("breach_held_s") or 0, check.get("sustain_s") or 0
        return f"{check['name']} (breaching for {held:.0f} s of {need:g} s needed to fail)"
    if not pace or pace.get("need") is None:
        return check["name"]
    if pace["have"] >= pace["need"]:
        return f"{check['name']} (sample complete, not yet significant)"
    eta = check.get("eta_seconds")
    return f"{check['name']} ({pace['have']} of {pace['need']} {pace['unit']}{f', ~{eta:.0f} s' if eta is not None else ''})"


def _describe(check: dict, control: str = VariantRole.STABLE, pooled: bool = False) -> str:
    name = check["name"]
    llm = describe_llm(check, control, _p99_evidence)
    if llm is not None:
        return llm
    if name == "error_rate":
        rates = check["rates"]
        return (
            f"candidate error rate {rates['candidate']:.2%} vs {'stable+baseline' if pooled else control} "
            f"{rates['stable']:.2%} "
            f"(e-value {check['e_value']:.3g} >= {check['threshold']:.3g})"
        )
    if name == "latency":
        q = check["quantiles_ms"]
        return (
            f"candidate slower than {control} +{check['margin']:.0%}: p50 {q['candidate']['p50']:.2f} ms vs "
            f"{q['stable']['p50']:.2f} ms (Mann-Whitney p={check['p_value']:.2g} < {check['threshold']})"
        )
    if name == "latency_tail":
        return (
            f"{check['statistic']:.1%} of candidate requests above {check['limit_ms']:.2f} ms "
            f"(p={check['p_value']:.2g} < {check['threshold']})"
        )
    if name == "p99_slo":
        return f"candidate p99 over the SLO {check['threshold']:g} ms: {_p99_evidence(check)}"
    if name == "error_slo":
        return f"candidate error rate {check['statistic']:.2%} over the SLO {check['threshold']:.2%}"
    if name == "psi":
        return f"prediction drift PSI {check['statistic']:.3f} over {check['threshold']}"
    return check.get("reason") or name  # a check that says its own reason (gr_guardrails.py)


def _p99_evidence(check: dict) -> str:
    """ "3 of 141 requests over 50 ms (2.1 %, 1 % allowed); e-value 1.3 vs the SLO, 0.8 vs
    the control (100 needed); over the ceiling in 2 disjoint windows (3 needed)": where the
    p99 guardrail stands."""
    n, over = check["samples"]["candidate"], check["over"]["candidate"]
    share = check["share_over"]["candidate"] or 0.0
    text = (
        f"{over:.0f} of {n:.0f} requests over {check['threshold']:g} ms "
        f"({share:.1%}, {check['allowed_share']:.0%} allowed); e-value {check['e_value']:.3g} vs the SLO"
    )
    if check.get("e_value_control") is not None:
        control = check["share_over"].get("control")
        text += f", {check['e_value_control']:.3g} vs the control" + (
            f" ({control:.1%} over)" if control is not None else ""
        )
    text += f" ({check['e_threshold']:.3g} needed)"
    return text + f"; over the ceiling in {check['windows_over']} disjoint windows ({check['failure_limit']} needed)"
