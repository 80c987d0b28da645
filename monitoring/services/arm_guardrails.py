"""Machine guardrails per arm of an online experiment: every candidate arm against the
control arm with the canary judge's own checks (monitoring/judge/verdict.py: the p99 and
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
from monitoring.judge.checks import FAIL, INCONCLUSIVE, PASS
from monitoring.judge.evidence import SKIPPED, ArmWindow, GuardrailStatus, JudgeConfig, make_check
from monitoring.judge.outage import NOT_JUDGED
from monitoring.judge.statistics import psi as psi_index
from monitoring.judge.verdict import judge
from monitoring.models import Severity
from monitoring.selectors.judge_config import judge_config_for
from monitoring.services.alerts import alert_raise, shared_outage_alert
from monitoring.sources import MetricSource, metric_source

STATUS = {PASS: GuardrailStatus.PASS, FAIL: GuardrailStatus.FAIL, INCONCLUSIVE: GuardrailStatus.PENDING}


class PrefetchedArms:
    """The store's arm windows of many endpoints read at once (the analysis tick over every
    running experiment: two statements per few hundred experiments, not two per experiment);
    answers judge_arms as a metric source does for the windows it read."""

    def __init__(self, windows: dict[str, dict[str, ArmWindow]], fallback: MetricSource, keys: dict):
        self.windows, self.fallback, self.keys = windows, fallback, keys

    def judge_arms(self, *, endpoint, variants, since, until=None):
        if self.keys.get(endpoint) == (tuple(dict.fromkeys(variants)), since, until):
            return self.windows[endpoint]
        return self.fallback.judge_arms(endpoint=endpoint, variants=variants, since=since, until=until)


def arm_windows_prefetch(*, windows: list[tuple[str, list[str], datetime]], until: datetime) -> MetricSource:
    """A source answering judge_arms for `windows` [(endpoint, variants, since)] up to `until`
    from one read of the metric store; with Prometheus (PROMETHEUS_URL), Prometheus itself."""
    from monitoring.sources.store import judge_arms_many

    source = metric_source()
    if getattr(source, "name", "") != "store" or not windows:
        return source
    keys = {endpoint: (tuple(dict.fromkeys(variants)), since, until) for endpoint, variants, since in windows}
    return PrefetchedArms(judge_arms_many(windows=windows, until=until), source, keys)


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
    config = config or judge_config_for(endpoint)
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
