"""Machine guardrails per arm of an online experiment: every candidate arm against the
control arm with the canary judge's own checks (monitoring/judge.py: the p99 and
error-rate SLO guardrails, prediction-score PSI, the always-valid error-rate e-process and
the per-window latency comparisons; a shared outage of the pool holds them, "not judged"), over the metric store's per-variant samples of the endpoint
(the gateway labels each request with the arm that answered, route role `arm`).

This module is the one seam experiments uses into monitoring (pyproject's import
contracts name it): it knows arms only as variant names, never experiments' tables.

Why the whole experiment is one window: the arms serve side by side at a constant split
from the start, so unlike a rollout's steps every moment of the window is a fair
comparison, latency included (docs/experiments.md).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from django.utils import timezone

from monitoring import conf
from monitoring.evidence import ArmWindow, GuardrailStatus, make_check
from monitoring.judge import FAIL, INCONCLUSIVE, PASS, SKIPPED, JudgeConfig, judge
from monitoring.models import Severity
from monitoring.outage import NOT_JUDGED
from monitoring.services.alerts import alert_raise, shared_outage_alert
from monitoring.sources import MetricSource, metric_source
from monitoring.statistics import psi as psi_index

STATUS = {PASS: GuardrailStatus.PASS, FAIL: GuardrailStatus.FAIL, INCONCLUSIVE: GuardrailStatus.PENDING}


def arm_config(endpoint) -> JudgeConfig:
    """The endpoint's SLOs, PSI threshold and latency margin, as its rollouts' judge uses
    (an LLM endpoint's arms are judged on TTFT/ITL: monitoring/llm_checks.py)."""
    return JudgeConfig(
        alpha=conf.get("MONITORING_JUDGE_ALPHA"),
        kind=endpoint.kind,
        ttft_slo_ms=endpoint.ttft_slo_ms,
        itl_slo_ms=endpoint.itl_slo_ms,
        slo_p99_ms=endpoint.slo_p99_ms,
        slo_error_rate=endpoint.slo_error_rate,
        psi_threshold=endpoint.psi_threshold,
        latency_margin=endpoint.latency_margin,
    )


def arm_guardrails_judge(
    *,
    endpoint,
    control: str,
    candidates: list[str],
    since: datetime,
    until: datetime | None = None,
    previous: dict[str, dict] | None = None,
    config: JudgeConfig | None = None,
    psi: bool = True,
    source: MetricSource | None = None,
) -> dict[str, dict]:
    """Judge each candidate arm against `control` (variant names) over [since, until].

    Returns {arm: {"status": "pass" | "fail" | "pending", "reason", "checks", "judged_at"}}:
    "pending" while any check lacks the data to conclude (or its evidence is not yet
    there), "fail" when a check fails, "pass" when every check passed. `previous`:
    the last result per arm (what this returned at the previous tick): the PSI
    guardrail's breach count lives in its checks. `psi=False`: the PSI is computed and
    shown (outcome `skipped`) but is no guardrail."""
    until = until or timezone.now()
    config = config or arm_config(endpoint)
    source = source or metric_source()  # the store, or Prometheus with PROMETHEUS_URL (monitoring/sources/)
    arms = source.judge_arms(endpoint=endpoint.name, variants=[control, *candidates], since=since, until=until)
    seconds = max((until - since).total_seconds(), 0.0)
    out = {}
    control_arm = arms[control]
    if not psi:  # without the control's scores the judge has no PSI to fail on
        control_arm = replace(control_arm, score_bins=[])
    for name in candidates:
        before = ((previous or {}).get(name) or {}).get("checks") or []
        decision = judge(
            control_arm,
            arms[name],
            config,
            previous={c["name"]: c for c in before},
            now_s=until.timestamp(),
            seconds=seconds,
            control="control",
        )
        for check in decision.checks:
            if check.get("window") == "rollout":
                check["window"] = "experiment"  # the latency tests' window: the whole experiment
        if not psi:
            decision.checks.append(_psi_shown(arms[control], arms[name], config))
        if decision.reason.startswith(NOT_JUDGED):
            shared_outage_alert(endpoint=endpoint, reason=f"arm {name}: {decision.reason}")
        out[name] = {
            "status": str(STATUS[decision.outcome]),  # stored in the experiment's evidence (JSON)
            "reason": decision.reason,
            "checks": decision.checks,
            "judged_at": until.isoformat(),
        }
    return out


def _psi_shown(control: ArmWindow, candidate: ArmWindow, config: JudgeConfig) -> dict:
    have = min(sum(control.score_bins), sum(candidate.score_bins)) if control.score_bins and candidate.score_bins else 0
    value = psi_index(control.score_bins, candidate.score_bins) if have > 0 else None
    return make_check(
        "psi",
        "guardrail",
        SKIPPED,
        statistic=value,
        threshold=config.psi_threshold,
        samples={"stable": sum(control.score_bins), "candidate": sum(candidate.score_bins)},
        why="PSI is not a guardrail of this experiment (guardrail_psi off): shown, never failed",
    )


def arm_guardrail_alert(*, endpoint, reason: str, evidence: dict, paths: dict[str, str] | None = None) -> bool:
    """A critical alert (webhook with a Slack-style text, email, dashboard banner) as a
    rollout's rollback raises one; deduplicated per endpoint while open. `paths`: links
    (name -> path on this site) made absolute. Returns whether it was notified."""
    base = conf.public_url()
    _, notified = alert_raise(
        kind="experiment_guardrail_failed",
        severity=Severity.CRITICAL,
        reason=reason,
        endpoint=endpoint.name,
        team=endpoint.team,
        evidence=evidence,
        links={name: f"{base}{path}" for name, path in (paths or {}).items()},
    )
    return notified
