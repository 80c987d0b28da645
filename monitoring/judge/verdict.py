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

guardrails (monitoring/judge/guardrails.py; each needs `min_guardrail_requests` first)
  * p99_slo      "p99 <= SLO" as "at most 1 % of requests over the SLO" (counted from
                 histogram buckets): an always-valid e-process on that share against
                 its ceiling AND against the control (when one serves beside the
                 candidate), over in >= 3 disjoint windows (monitoring/judge/p99_guardrail.py).
  * error_slo    candidate error rate over the SLO, confirmed by a one-sided binomial
                 test at `guardrail_alpha` so a handful of early errors do not trip it.
  * psi          PSI of the candidate's prediction-score bins vs the control's over
                 `psi_threshold` (needs `min_score_samples` on each side), sustained.

Every check's evidence has `progress` {have, need, unit} and `eta_seconds`
(monitoring/judge/evidence.py), so a waiting verdict says what it waits for.

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
  * latency      candidate vs control window by window (both arms in the same scrape
                 windows, so what the host does to both cancels): the sign of "candidate
                 p50 over control p50 x (1 + margin)" per window, as an always-valid
                 e-process (monitoring/judge/paired.py); the margin is the endpoint's or derived
                 from the SLO's headroom. Pass by the mirror e-process after
                 `min_latency_windows` windows.
  * latency_tail the same on each window's p90.

Shared outages (monitoring/judge/outage.py): ticks in which the pool serving both arms failed are
set aside from every check, and so are the ticks of its recovery in which the candidate's
errors were mostly attempts that never reached its model (still loading, or still ejected by
the gateway's breaker, while the stable serves again); while the latest tick is one the verdict
is "shared outage: not judged" (inconclusive: the step holds). At a 100 % step (nothing serves beside the
candidate) the comparisons that need a control say "no control at 100 %" (skipped) when the
rollout has no control history (an undo, a Ship); the SLO guardrails judge it.

LLM endpoints (`config.kind == "llm"`): the same tests on time to first token and
inter-token latency (rank tests, SLO guardrails) and on the LLM requests' error rate,
instead of the request-duration and score checks: monitoring/judge/llm_checks.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from deployments.rollout_machine import WAITING_FOR_TRAFFIC, VariantRole
from monitoring.judge import outage as outages
from monitoring.judge.checks import FAIL, INCONCLUSIVE, PASS, check_error_rate
from monitoring.judge.evidence import SKIPPED, ArmWindow, JudgeConfig, progress
from monitoring.judge.evidence import make_check as _check
from monitoring.judge.guardrails import NO_CONTROL, check_guardrails
from monitoring.judge.llm_checks import describe_llm, llm_checks
from monitoring.judge.paired import check_latency
from monitoring.judge.paired import describe as describe_latency


@dataclass
class Decision:
    outcome: str
    reason: str
    checks: list[dict]


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
    mask = outages.outage_ticks(error_control or stable, candidate, config)
    shared = _check(
        "shared_outage",
        "guardrail",
        INCONCLUSIVE if outages.latest(mask) else PASS,
        **outages.summary(error_control or stable, candidate, mask, config),
        **progress(candidate.requests, None, "requests", None),
    )
    if mask.any():
        stable, candidate = outages.without(stable, mask), outages.without(candidate, mask)
        error_control = outages.without(error_control, mask) if error_control is not None else None
    if latency is not None:
        step_mask = outages.outage_ticks(*latency, config)
        latency = (outages.without(latency[0], step_mask), outages.without(latency[1], step_mask))
    if compare_latency:
        latency_checks = check_latency(*(latency or (stable, candidate)), config, step_seconds if latency else seconds)
        for check in latency_checks:
            check["window"] = "step" if latency else "rollout"
    else:
        latency_checks = [
            _check(name, "test", SKIPPED, window="none", why=NO_CONTROL) for name in ("latency", "latency_tail")
        ]
    checks = [
        shared,
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
        check_error_rate(error_control or stable, candidate, config, seconds, compare=compare_latency),
        *latency_checks,
    ]
    decision = _decision(checks, control, pooled=error_control is not None)
    if (
        decision.outcome == INCONCLUSIVE
        and candidate.requests == 0
        and not decision.reason.startswith(outages.NOT_JUDGED)
    ):
        decision.reason = (
            f"{WAITING_FOR_TRAFFIC}: no request has reached the candidate yet; every check needs live "
            f"traffic to the endpoint ({decision.reason})"
        )
    return decision


def _decision(checks: list[dict], control: str, pooled: bool) -> Decision:
    """Fail if any check fails (the reason says each), pass if all pass or are skipped,
    else inconclusive (the reason says what each waits for)."""
    shared = next((c for c in checks if c["name"] == "shared_outage"), None)
    if shared is not None and shared["outcome"] == INCONCLUSIVE:
        return Decision(INCONCLUSIVE, f"{outages.NOT_JUDGED} ({_outage_evidence(shared)})", checks)
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
    if name in ("latency", "latency_tail"):
        return describe_latency(check, control)
    if name == "p99_slo":
        return f"candidate p99 over the SLO {check['threshold']:g} ms: {_p99_evidence(check)}"
    if name == "error_slo":
        return f"candidate error rate {check['statistic']:.2%} over the SLO {check['threshold']:.2%}" + (
            f" and above {control}'s (e-value {check['e_value_control']:.3g})"
            if check.get("e_value_control") is not None
            else ""
        )
    if name == "psi":
        return f"prediction drift PSI {check['statistic']:.3f} over {check['threshold']}"
    return check.get("reason") or name  # a check that says its own reason (gr_guardrails.py)


def _outage_evidence(check: dict) -> str:
    """ "the pool failed both arms in 3 of 41 ticks: 128 candidate attempts failed on the
    stable too, the control had 127 errors"."""
    recovery = check.get("recovery_ticks") or 0
    text = f"the pool failed both arms in {check['ticks_set_aside'] - recovery} of {check['ticks']} ticks"
    if recovery:
        text += f" and {recovery} ticks of its recovery"
    if check.get("shared_failures"):
        text += f": {check['shared_failures']:.0f} candidate attempts failed on the stable too"
    if check.get("control_errors"):
        text += f", {check['control_errors']:.0f} control errors in them"
    if check.get("unreached_errors"):
        text += f", {check['unreached_errors']:.0f} candidate attempts never reached its model"
    return text + "; those ticks are no evidence against the candidate"


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
