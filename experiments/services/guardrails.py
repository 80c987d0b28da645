"""Machine guardrails of a running experiment, judged per arm at every analysis tick.

The statistics are the canary judge's (monitoring/judge/verdict.py), reached through the one
monitoring service experiments may import (monitoring/services/arm_guardrails.py; the
import contracts in pyproject.toml name this seam): each candidate arm against the
control arm over the experiment's window, from the per-variant samples the collector
gathers from the gateway. This module only maps arms to variant names, keeps the
sustained guardrails' memory (the previous tick's checks, in the experiment's evidence)
and words the harm for the audit trail and the alert.
"""

from __future__ import annotations

from django.urls import reverse

from deployments.rollout_machine import Verdict
from experiments.analysis import GuardrailStatus
from monitoring.services.arm_guardrails import arm_guardrail_alert, arm_guardrails_judge, arm_windows_prefetch

PENDING = {
    "status": str(GuardrailStatus.PENDING),
    "reason": "not judged yet: the experiment has not run an analysis tick",
    "checks": [],
}


def experiment_guardrails(*, experiment, arms, now, source=None) -> dict[str, dict]:
    """{candidate arm name: {status, reason, checks, judged_at}} at `now`; every candidate
    pending when the experiment has not started. `source`: guardrails_source's prefetch."""
    control = next(a for a in arms if a.is_control)
    candidates = [a.name for a in arms if not a.is_control]
    if experiment.started_at is None:
        return {name: dict(PENDING) for name in candidates}
    previous = (experiment.evidence or {}).get("guardrails") or {}
    return arm_guardrails_judge(
        endpoint=experiment.endpoint,
        control=control.name,
        candidates=candidates,
        since=experiment.started_at,
        until=now,
        previous=previous,
        psi=experiment.guardrail_psi,
        source=source,
    )


def guardrails_source(experiments, now):
    """One read of the arm windows of every started experiment of `experiments` (their arms
    prefetched), for experiment_guardrails(source=...) at `now`."""
    windows = []
    for experiment in experiments:
        if experiment.started_at is None:
            continue
        arms = list(experiment.arms.all())
        control = [a.name for a in arms if a.is_control]
        windows.append(
            (experiment.endpoint.name, control + [a.name for a in arms if not a.is_control], experiment.started_at)
        )
    return arm_windows_prefetch(windows=windows, until=now)


def stored_guardrails(experiment) -> dict[str, dict]:
    """The last tick's per-arm guardrails (what the page and the results API show)."""
    stored = (experiment.evidence or {}).get("guardrails") or {}
    return {a.name: stored.get(a.name) or dict(PENDING) for a in experiment.arms.all() if not a.is_control}


def failing(guardrails: dict[str, dict]) -> dict[str, dict]:
    """The arms whose guardrails fail, with the failing checks only."""
    return {
        name: {"reason": g["reason"], "checks": [c for c in g["checks"] if c.get("outcome") == Verdict.FAIL]}
        for name, g in guardrails.items()
        if g["status"] == GuardrailStatus.FAIL
    }


def raise_harm_alert(*, experiment, failed: dict[str, dict], reason: str) -> bool:
    return arm_guardrail_alert(
        endpoint=experiment.endpoint,
        reason=f"{experiment.endpoint.name}: experiment {experiment.public_id} {reason}"[:4000],
        evidence={"experiment": experiment.public_id, "failed": failed},
        paths={
            "experiment": reverse("experiments:online-detail", args=[experiment.pk]),
            "api": f"/api/v1/experiments/{experiment.public_id}/results/",
        },
    )
