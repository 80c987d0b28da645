"""The canary judge's checks on an LLM endpoint (Endpoint.kind "llm"): pure, table-tested
(tests/monitoring/test_llm_checks.py), the judge's own statistics applied to what an LLM
user waits for.

A streamed reply has two latencies a user feels: the time to its first token (TTFT:
queueing, prefill) and the gap between tokens (ITL: decode speed). The whole request's
duration is not one of them (it grows with the reply's length, which the model chooses),
so the tensor latency tests and the p99 SLO on `request_duration` are not applied here,
nor PSI (an LLM reply has no prediction score). Instead, from the gateway's
`gateway_llm_*` families (monitoring/collection/collect.py derive_llm, the windows' `llm_ticks`,
`ttft_*` and `itl_*`):

guardrails (each needs `min_guardrail_requests` first)
  * ttft_slo   "TTFT p99 <= ttft_slo_ms" as "at most 1 % of first tokens later than the
               SLO": the p99 guardrail (monitoring/judge/p99_guardrail.py) on the TTFT
               histogram: an always-valid e-process against the 1 % ceiling AND against
               the control, over the ceiling in >= `guardrail_failure_limit` disjoint ticks.
  * itl_slo    the same on the inter-token gaps against `itl_slo_ms` (its unit is a gap,
               not a request: a reply of 100 tokens is 99 gaps).
  * error_slo  the candidate's LLM error rate (5xx, or a stream the gateway marks as the
               backend's fault) over the endpoint's error SLO, binomial test at
               `guardrail_alpha` (monitoring/judge/guardrails.py).

statistical comparisons (candidate vs control, as a ranker's)
  * error_rate the always-valid conditional e-process on the LLM requests' errors.
  * ttft       the per-window comparison of the TTFT p50 (monitoring/judge/paired.py: a sign
               e-process, both arms in the same windows) against the control x (1 +
               latency_margin) + `ttft_floor_ms` (50 ms), within the current step;
  * ttft_tail  the same on each window's p90;
  * itl, itl_tail  the same on inter-token gaps, with `itl_floor_ms` (5 ms).
The floors are the practical significance a relative margin alone lacks at these scales:
through the real gateway on this CPU a healthy candidate's token gaps were 1.5 ms against
the stable's 0.4 ms (scheduling noise, +275 %), which a 20 % margin called a regression.
At a step where the candidate takes every request there is no control: the comparisons
are skipped and the SLO guardrails hold the candidate alone, as for rankers.

The checks keep the tensor checks' evidence (samples, quantiles, e-values, progress)
under their own names, so a verdict says "ttft" failed and its reason names the numbers:
"TTFT slower than baseline +20% +50 ms at p50 in 12 of 12 windows (p50 640.00 ms vs 41.00 ms;
e-value 571 >= 100)".
"""

from __future__ import annotations

from dataclasses import replace

from monitoring.judge import paired
from monitoring.judge.checks import check_error_rate
from monitoring.judge.evidence import SKIPPED, ArmWindow, JudgeConfig, make_check
from monitoring.judge.guardrails import check_guardrails
from monitoring.judge.p99_guardrail import check_p99_slo
from monitoring.judge.paired import check_latency

LLM_HISTOGRAMS = {"ttft": "TTFT", "itl": "ITL"}  # histogram -> how reasons name it
LLM_CHECKS = frozenset({"ttft", "ttft_tail", "itl", "itl_tail", "ttft_slo", "itl_slo"})


def _renamed(check: dict, name: str, histogram: str) -> dict:
    check["name"], check["metric"] = name, histogram
    return check


def llm_slo_checks(
    control: ArmWindow, candidate: ArmWindow, config: JudgeConfig, *, compare: bool = True, seconds=None
) -> list[dict]:
    """ttft_slo / itl_slo (those whose SLO the endpoint sets): the p99 guardrail on each
    histogram. `control`: the arm beside the candidate (the baseline when the rollout has
    one); `compare=False` when none is."""
    checks = []
    for histogram, slo in (("ttft", config.ttft_slo_ms), ("itl", config.itl_slo_ms)):
        if slo is None:
            continue
        check = check_p99_slo(
            control.as_llm(histogram),
            candidate.as_llm(histogram),
            replace(config, slo_p99_ms=slo),
            compare=compare,
            seconds=seconds,
        )
        check["test"] = check["test"].replace("the share over", f"the share of {LLM_HISTOGRAMS[histogram]} over")
        checks.append(_renamed(check, f"{histogram}_slo", histogram))
    return checks


def llm_checks(
    stable: ArmWindow,
    candidate: ArmWindow,
    config: JudgeConfig,
    *,
    latency: tuple[ArmWindow, ArmWindow] | None = None,
    compare_latency: bool = True,
    error_control: ArmWindow | None = None,
    seconds: float | None = None,
    step_seconds: float | None = None,
) -> list[dict]:
    """Every check of an LLM candidate, with judge()'s arguments (monitoring/judge/verdict.py):
    `stable` the control (the baseline when the rollout has one), `error_control` the
    pooled control of the anchored error checks, `latency` (control, candidate) over the
    current step for the rank tests, `compare_latency=False` when nothing serves beside
    the candidate."""

    anchored = (error_control or stable).as_llm()
    checks = [
        *llm_slo_checks(stable, candidate, config, compare=compare_latency, seconds=seconds),
        # error_slo (and nothing else: no p99 on request duration, no score bins on an LLM arm)
        *check_guardrails(anchored, candidate.as_llm(), replace(config, slo_p99_ms=None), seconds=seconds),
        check_error_rate(anchored, candidate.as_llm(), config, seconds),
    ]
    control, cand = latency or (stable, candidate)
    for histogram in LLM_HISTOGRAMS:
        if not compare_latency:
            checks += [
                make_check(
                    name,
                    "test",
                    SKIPPED,
                    metric=histogram,
                    window="none",
                    why=f"no stable traffic beside the candidate to compare with; the {histogram}_slo guardrail applies",
                )
                for name in (histogram, f"{histogram}_tail")
            ]
            continue
        shift, tail = check_latency(
            control.as_llm(histogram),
            cand.as_llm(histogram),
            replace(config, slo_p99_ms=getattr(config, f"{histogram}_slo_ms")),  # the margin's headroom: this SLO
            step_seconds if latency else seconds,
            floor_s=getattr(config, f"{histogram}_floor_ms") / 1000,
        )
        for check, name in ((shift, histogram), (tail, f"{histogram}_tail")):
            check["window"] = "step" if latency else "rollout"
            check["test"] = check["test"].replace("stable", "control")
            checks.append(_renamed(check, name, histogram))
    return checks


def describe_llm(check: dict, control: str, p99_evidence) -> str | None:
    """A failed LLM check in a sentence (the verdict's reason, the rollback alert's), or
    None when `check` is not one of them. `p99_evidence`: judge's wording of the SLO
    guardrail's evidence."""
    name = check["name"]
    if name not in LLM_CHECKS:
        return None
    label = LLM_HISTOGRAMS[check["metric"]]
    if name in LLM_HISTOGRAMS or name.endswith("_tail"):
        return paired.describe(check, control, label)
    p99 = check.get("statistic")
    return (
        f"candidate {label} p99 {'?' if p99 is None else f'{p99:.1f}'} ms over the SLO {check['threshold']:g} ms: "
        + p99_evidence(check).replace("requests", "first tokens" if check["metric"] == "ttft" else "gaps")
    )
