"""How long a rollout's steps will take to reach a verdict at the endpoint's traffic, said
before it starts, and step shares that fit the traffic.

Pure: `forecast(rate_rps, plan…, config)` walks the plan step by step with the judge's
sample minimums. What each check needs, and where it counts from:
  error_rate   `min_requests` candidate requests, anchored (from the first step on)
  guardrails   `min_guardrail_requests` candidate requests (error SLO), anchored; the p99
               guardrail's pass needs evidence, ~180 requests with none over the SLO
               (monitoring/judge/p99_guardrail.py `pass_requests`)
  psi          `min_score_samples` scores from each arm, anchored (the candidate and the
               baseline are sampled at 1.0, the stable at the candidate's weight / its own)
  latency      `min_latency_samples` from each arm within the step (a constant split; the
               comparison's windows of `min_window_samples`, monitoring/judge/paired.py);
               skipped at a step with nothing beside the candidate
  step floor   the plan's `step_min_seconds` and `step_min_requests`
The expected time of a step is the longest of these; a step that cannot conclude before
its deadline is a warning. `suggest_steps` picks the first share so that (a) the
candidate gets at least `DETECT_RPS` requests/s, enough for the error and latency tests
to act within ~10 s (docs/rollouts.md, "Detection time"), and (b) the step concludes within half its
deadline; low-traffic endpoints get larger first steps rather than verdicts that never come.
"""

from __future__ import annotations

from deployments.rollout_machine import DEFAULT_PLAN, FULL_BP, baseline_share
from monitoring.judge.evidence import JudgeConfig
from monitoring.judge.p99_guardrail import pass_requests

LADDER = (500, 1000, 2500, 5000)
# A 2.5 %-failing candidate at 20 req/s errs every 2 s: two errors (what the e-process
# needs with an idle control) in ~4 s median and under 12 s in 98 % of runs.
DETECT_RPS = 20.0


def _time(need: float, have: float, rate: float) -> float | None:
    if have >= need:
        return 0.0
    return None if rate <= 0 else (need - have) / rate


def forecast(
    rate_rps: float | None,
    steps_bp,
    config: JudgeConfig,
    *,
    step_min_seconds: float = DEFAULT_PLAN.step_min_seconds,
    step_min_requests: int = DEFAULT_PLAN.step_min_requests,
    step_deadline_seconds: float = DEFAULT_PLAN.step_deadline_seconds,
    baseline: bool = True,
    stable_score_rate: float = 0.05,
) -> dict:
    """Per step: shares, the candidate's requests/s, each check's need and expected
    seconds, the step's ETA and whether it fits its deadline; plus the total and warnings."""
    if not rate_rps or rate_rps <= 0:
        return {
            "rate_rps": rate_rps,
            "steps": [],
            "total_seconds": None,
            "warnings": ["no traffic observed on this endpoint: no check can conclude until requests arrive"],
        }
    steps, warnings, elapsed = [], [], 0.0
    guardrail_need = max(config.min_guardrail_requests, pass_requests(config) if config.slo_p99_ms else 0)
    have = {"requests": 0.0, "scores_candidate": 0.0, "scores_control": 0.0}
    for index, weight in enumerate(steps_bp):
        base_bp = baseline_share(weight) if baseline else 0
        stable_bp = FULL_BP - weight - base_bp
        c_rps = rate_rps * weight / FULL_BP
        control_rps = rate_rps * (base_bp if base_bp else stable_bp) / FULL_BP
        control_score_rps = (
            control_rps if base_bp else control_rps * max(stable_score_rate, min(1.0, weight / max(stable_bp, 1)))
        )
        checks = {
            "error_rate": (config.min_requests, _time(config.min_requests, have["requests"], c_rps), "requests"),
            "guardrails": (
                guardrail_need,
                _time(guardrail_need, have["requests"], c_rps),
                "requests",
            ),
            "psi": (
                config.min_score_samples,
                max(
                    _time(config.min_score_samples, have["scores_candidate"], c_rps) or 0.0,
                    _time(config.min_score_samples, have["scores_control"], control_score_rps) or 0.0,
                )
                if control_score_rps > 0
                else None,
                "scores",
            ),
            "step_minimum": (
                step_min_requests,
                max(step_min_seconds, _time(step_min_requests, 0, c_rps) or 0.0),
                "requests",
            ),
        }
        if control_rps > 0:
            checks["latency"] = (
                config.min_latency_samples,
                _time(config.min_latency_samples, 0, min(c_rps, control_rps)),
                "requests",
            )
        required = [t for name, (_, t, _) in checks.items() if name != "psi"]  # psi waits only where scores flow
        eta = None if any(t is None for t in required) else max([*required, checks["psi"][1] or 0.0])
        fits = eta is not None and eta <= step_deadline_seconds
        steps.append(
            {
                "step": index + 1,
                "candidate_bp": weight,
                "baseline_bp": base_bp,
                "stable_bp": stable_bp,
                "candidate_rps": round(c_rps, 3),
                "checks": {
                    name: {"need": need, "unit": unit, "eta_seconds": None if t is None else round(t, 1)}
                    for name, (need, t, unit) in checks.items()
                },
                "eta_seconds": None if eta is None else round(eta, 1),
                "fits_deadline": fits,
            }
        )
        if not fits:
            slowest = max(
                ((n, t) for n, (_, t, _) in checks.items() if t is not None), key=lambda x: x[1], default=("", 0)
            )
            warnings.append(
                f"step {index + 1} ({weight / 100:g} %): the candidate gets {c_rps:.2g} req/s, so "
                f"{slowest[0]} needs ~{slowest[1]:.0f} s, beyond the {step_deadline_seconds:g} s deadline"
            )
        step_s = min(eta if eta is not None else step_deadline_seconds, step_deadline_seconds)
        elapsed += step_s
        have["requests"] += c_rps * step_s
        have["scores_candidate"] += c_rps * step_s
        have["scores_control"] += control_score_rps * step_s
    total = round(elapsed, 1) if all(s["fits_deadline"] for s in steps) else None
    return {"rate_rps": round(rate_rps, 3), "steps": steps, "total_seconds": total, "warnings": warnings}


def suggest_steps(
    rate_rps: float | None,
    config: JudgeConfig,
    *,
    step_deadline_seconds: float = DEFAULT_PLAN.step_deadline_seconds,
    step_min_seconds: float = DEFAULT_PLAN.step_min_seconds,
    step_min_requests: int = DEFAULT_PLAN.step_min_requests,
    baseline: bool = True,
) -> list[int]:
    """The plan for this traffic: the smallest first share from LADDER at which the
    candidate gets DETECT_RPS and the step concludes within half its deadline, then the
    larger ladder shares and 100 %."""
    if not rate_rps or rate_rps <= 0:
        return [*LADDER[2:], FULL_BP]
    first = LADDER[-1]
    for share in LADDER:
        plan = forecast(
            rate_rps,
            [share],
            config,
            step_min_seconds=step_min_seconds,
            step_min_requests=step_min_requests,
            step_deadline_seconds=step_deadline_seconds,
            baseline=baseline,
        )
        eta = plan["steps"][0]["eta_seconds"]
        if rate_rps * share / FULL_BP >= DETECT_RPS and eta is not None and eta <= step_deadline_seconds / 2:
            first = share
            break
    return [share for share in LADDER if share >= first] + [FULL_BP]
