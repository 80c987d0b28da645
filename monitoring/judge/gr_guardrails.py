"""The guardrails of a generative recommender's canary, beside the judge's others
(monitoring/judge/guardrails.py lists them; they apply only to arms that report a generative
recommender's counts, `ArmWindow.counts`, collected from the model's own metrics:
monitoring/collection/collect.py GR_COUNTERS).

gr_illegal_items  beams whose semantic id no catalog item has. The catalog's trie constrains
                  every decode step, so the count is 0 (the build's gate held it at 0 over the
                  holdout); one in serving means the candidate serves another trie or catalog
                  than it was built with. It fails at the candidate's first illegal beam while
                  the control has none (one is proof, no sample needed), or, when the control
                  has some too, when the candidate's share is larger by Fisher's exact test at
                  `guardrail_alpha`.
gr_cache_hit_rate the share of the candidate's cache lookups that reused a cached prefix
                  ("hit" and "grown"), against the latency control's: the fair baseline, a copy
                  of the stable loaded with the candidate and as cold as it (a GR canary always
                  has one: deployments/services/rollouts.py), so a cold start is no drop. A drop
                  of more than GR_HIT_MARGIN means user-affinity routing broke (users scattered
                  over replicas) or the candidate's cache thrashes; tested as non-inferiority
                  (a one-sided Wald test of hit rate >= control's - margin at `guardrail_alpha`,
                  after `min_guardrail_requests` lookups on both), failing only on a breach
                  sustained like PSI's. Skipped when no control serves beside the candidate.

Pure: counts in, checks out (tests/monitoring/test_gr_guardrails.py).
"""

from __future__ import annotations

import math

from scipy import stats

from deployments.rollout_machine import Verdict
from monitoring.judge.evidence import SKIPPED, ArmWindow, JudgeConfig, make_check, progress, sustained

PASS, FAIL, INCONCLUSIVE = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE
GR_HIT_MARGIN = 0.10  # absolute: a hit rate 10 points under the control's is the practical limit


def is_generative(arm: ArmWindow) -> bool:
    return bool(arm.counts.get("gr_beams") or arm.counts.get("gr_cache_lookups"))


def check_gr_guardrails(
    control: ArmWindow,
    candidate: ArmWindow,
    config: JudgeConfig,
    *,
    cache_control: ArmWindow | None = None,
    compare: bool = True,
    previous: dict | None = None,
    now_s: float | None = None,
    seconds: float | None = None,
) -> list[dict]:
    """The GR checks of a candidate that reports GR counts (none otherwise). `control`: the
    anchored control (stable and baseline pooled); `cache_control`: the arm whose cache is
    as cold as the candidate's (the baseline; default `control`)."""
    if not is_generative(candidate):
        return []
    return [
        _illegal_items(control, candidate, config, seconds),
        _cache_hit_rate(cache_control or control, candidate, config, compare, previous, now_s, seconds),
    ]


def _illegal_items(control: ArmWindow, candidate: ArmWindow, config: JudgeConfig, seconds) -> dict:
    beams, illegal = candidate.counts.get("gr_beams", 0.0), candidate.counts.get("gr_illegal_beams", 0.0)
    control_beams, control_illegal = control.counts.get("gr_beams", 0.0), control.counts.get("gr_illegal_beams", 0.0)
    p_value = None
    if illegal > 0 and control_illegal == 0:
        outcome = FAIL
    elif illegal > 0:
        table = [[int(illegal), int(beams - illegal)], [int(control_illegal), int(control_beams - control_illegal)]]
        p_value = float(stats.fisher_exact(table, alternative="greater").pvalue)
        outcome = FAIL if p_value < config.guardrail_alpha else PASS
    else:
        outcome = PASS if beams >= config.min_guardrail_requests else INCONCLUSIVE
    rate = illegal / beams if beams else None
    control_rate = control_illegal / control_beams if control_beams else None
    reason = None
    if outcome == FAIL:
        reason = (
            f"candidate served {illegal:.0f} beams that are no catalog item ({rate:.2%} of {beams:.0f}) against the "
            f"control's {control_illegal:.0f}: its trie or catalog is not the one it was built with"
        )
    return make_check(
        "gr_illegal_items",
        "guardrail",
        outcome,
        samples={"candidate": beams, "control": control_beams},
        statistic=rate,
        rates={"candidate": rate, "control": control_rate},
        p_value=p_value,
        alpha=config.guardrail_alpha,
        reason=reason,
        **progress(beams, config.min_guardrail_requests, "beams", seconds),
    )


def _cache_hit_rate(control, candidate, config: JudgeConfig, compare: bool, previous, now_s, seconds) -> dict:
    n_c, hits_c = candidate.counts.get("gr_cache_lookups", 0.0), candidate.counts.get("gr_cache_hits", 0.0)
    n_k, hits_k = control.counts.get("gr_cache_lookups", 0.0), control.counts.get("gr_cache_hits", 0.0)
    rate_c = hits_c / n_c if n_c else None
    rate_k = hits_k / n_k if n_k else None
    common = {
        "samples": {"candidate": n_c, "control": n_k},
        "rates": {"candidate": rate_c, "control": rate_k},
        "margin": GR_HIT_MARGIN,
        "alpha": config.guardrail_alpha,
        "min_samples": config.min_guardrail_requests,
    }
    if not compare:
        return make_check(
            "gr_cache_hit_rate",
            "guardrail",
            SKIPPED,
            why="no control serves beside the candidate: no cache as cold as its to compare with",
            **common,
        )
    if min(n_c, n_k) < config.min_guardrail_requests or rate_c is None or rate_k is None:
        return make_check(
            "gr_cache_hit_rate",
            "guardrail",
            INCONCLUSIVE,
            **common,
            **progress(min(n_c, n_k), config.min_guardrail_requests, "lookups", seconds),
        )
    gap = rate_c - (rate_k - GR_HIT_MARGIN)  # > 0: within the margin of the control's
    variance = rate_c * (1 - rate_c) / n_c + rate_k * (1 - rate_k) / n_k
    if variance > 0:
        p_value = float(stats.norm.cdf(gap / math.sqrt(variance)))
    else:
        p_value = 0.0 if gap < 0 else 1.0
    fail, memory = sustained("gr_cache_hit_rate", p_value < config.guardrail_alpha, config, previous, now_s)
    outcome = FAIL if fail else (INCONCLUSIVE if memory["breaches"] else PASS)
    reason = None
    if outcome == FAIL:
        reason = (
            f"candidate cache hit rate {rate_c:.1%} vs the control's {rate_k:.1%} (more than "
            f"{GR_HIT_MARGIN:.0%} under it, p={p_value:.2g}): users no longer reach the replica holding their cache"
        )
    return make_check(
        "gr_cache_hit_rate",
        "guardrail",
        outcome,
        statistic=rate_c,
        p_value=p_value,
        reason=reason,
        **common,
        **memory,
        **progress(min(n_c, n_k), config.min_guardrail_requests, "lookups", seconds),
    )
