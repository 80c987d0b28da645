"""The judge's guardrails: hard limits on the candidate (p99 and error rate against the
endpoint's SLOs) and on its prediction drift against the control (PSI).

Each needs a minimum sample first. p99_slo (monitoring/judge/p99_guardrail.py) is an
always-valid test on the share of requests over the SLO, against its 1 % ceiling and the
control, needing its breach in several disjoint windows. psi fails only on a SUSTAINED
breach (as Argo Rollouts' `failureLimit` and Flagger's `threshold`): the breach must be
seen at `guardrail_failure_limit` successive looks spanning at least
`guardrail_sustain_s`; the count lives in the check's own evidence (`breaches`,
`breach_since`), carried from the rollout's previous verdict, so the judge stays a pure
function. error_slo needs no such count: its one-sided binomial test at
`guardrail_alpha` already keeps a handful of early errors from tripping it.

A generative recommender's candidate adds gr_illegal_items and gr_cache_hit_rate
(monitoring/judge/gr_guardrails.py).
"""

from __future__ import annotations

from scipy import stats

from deployments.rollout_machine import Verdict
from monitoring.judge import eprocess
from monitoring.judge.evidence import SKIPPED, ArmWindow, JudgeConfig, make_check, progress, sustained
from monitoring.judge.gr_guardrails import check_gr_guardrails
from monitoring.judge.p99_guardrail import check_p99_slo
from monitoring.judge.statistics import psi

PASS, FAIL, INCONCLUSIVE = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE
# what a comparison that needs a control says at a 100 % step with no control history
NO_CONTROL = "no control at 100 %: nothing serves beside the candidate; the SLO guardrails judge it"


def check_guardrails(
    stable: ArmWindow,
    candidate: ArmWindow,
    config: JudgeConfig,
    *,
    previous: dict | None = None,
    now_s: float | None = None,
    seconds: float | None = None,
    latency_control: ArmWindow | None = None,
    compare: bool = True,
) -> list[dict]:
    """`stable`: the control (stable and baseline pooled when the rollout has a baseline);
    `latency_control`: the arm the p99 guardrail compares with (the baseline copy; default
    `stable`), `compare=False` when none serves beside the candidate; `previous`: the
    rollout's last checks by name (PSI's breach count); `seconds`: how long the window ran
    (for ETAs)."""
    checks = []
    n_c = candidate.requests
    enough = n_c >= config.min_guardrail_requests
    if config.slo_p99_ms is not None:
        checks.append(check_p99_slo(latency_control or stable, candidate, config, compare=compare, seconds=seconds))
    if config.slo_error_rate is not None:
        errors = int(round(candidate.errors))
        rate = candidate.errors / n_c if n_c else None
        p_value = (
            float(stats.binomtest(errors, int(round(n_c)), config.slo_error_rate, alternative="greater").pvalue)
            if n_c >= 1
            else None
        )
        # beside a control, the candidate must also err more often than it (always-valid, per
        # tick): an error SLO the whole pool breaches is not the candidate's breach
        e_control, control_rate = None, (stable.errors / stable.requests if stable.requests else None)
        if compare and len(stable.ticks) == len(candidate.ticks) and stable.requests > 0:
            e_control = eprocess.e_value(eprocess.conditional_steps(stable.ticks, candidate.ticks, config.odds_ratios))
        if not enough:
            outcome = INCONCLUSIVE
        elif (
            p_value is not None
            and p_value < config.guardrail_alpha
            and (e_control is None or e_control >= 1.0 / config.guardrail_alpha)
        ):
            outcome = FAIL
        elif rate is not None and rate > config.slo_error_rate and not (e_control is not None and rate <= control_rate):
            outcome = INCONCLUSIVE  # over the SLO (and its control's rate), not shown yet: the step holds
        else:
            outcome = PASS
        checks.append(
            make_check(
                "error_slo",
                "guardrail",
                outcome,
                samples={"candidate": n_c},
                statistic=rate,
                p_value=p_value,
                e_value_control=e_control,
                threshold=config.slo_error_rate,
                alpha=config.guardrail_alpha,
                min_samples=config.min_guardrail_requests,
                **progress(n_c, config.min_guardrail_requests, "requests", seconds),
            )
        )
    n_sc = sum(stable.score_bins or [])
    if candidate.score_bins and not compare and n_sc < config.min_score_samples:
        checks.append(make_check("psi", "guardrail", SKIPPED, window="none", why=NO_CONTROL))
    elif candidate.score_bins and stable.score_bins:
        n_cc = sum(candidate.score_bins)
        value = psi(stable.score_bins, candidate.score_bins) if n_sc > 0 and n_cc > 0 else None
        if min(n_sc, n_cc) < config.min_score_samples or value is None:
            outcome, memory = INCONCLUSIVE, {"breaches": 0, "breach_since": None}
        else:
            fail, memory = sustained("psi", value > config.psi_threshold, config, previous, now_s)
            outcome = FAIL if fail else (INCONCLUSIVE if memory["breaches"] else PASS)
        checks.append(
            make_check(
                "psi",
                "guardrail",
                outcome,
                samples={"stable": n_sc, "candidate": n_cc},
                statistic=value,
                threshold=config.psi_threshold,
                min_samples=config.min_score_samples,
                **memory,
                **progress(min(n_sc, n_cc), config.min_score_samples, "scores", seconds),
            )
        )
    checks += check_gr_guardrails(
        stable,
        candidate,
        config,
        cache_control=latency_control,
        compare=compare,
        previous=previous,
        now_s=now_s,
        seconds=seconds,
    )
    return checks
