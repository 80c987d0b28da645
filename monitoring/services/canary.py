"""The closed loop: at every tick, judge each rollout whose candidate gets traffic (one
stored Verdict per rollout and tick, `judge_tick`), ask deployments (through its services)
to advance, promote or roll back, and raise an alert saying why when a rollout is rolled
back, paused or fails.

Runs as the Celery task `monitoring.canary_tick` (beat, every ~1 s). Depends on
deployments, never the other way round (../shared/DESIGN.md).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.urls import reverse
from django.utils import timezone

from deployments.rollout_machine import State, VariantRole
from deployments.selectors import rollouts as rollout_selectors
from deployments.services.rollouts import rollout_apply_verdict
from kernel.errors import InvalidInput
from monitoring import conf
from monitoring.judge.evidence import ArmWindow, JudgeConfig
from monitoring.judge.outage import NOT_JUDGED
from monitoring.judge.verdict import Decision, judge
from monitoring.models import Alert, Severity, Verdict
from monitoring.selectors.judge_config import judge_config_for
from monitoring.services.alerts import alert_dedupe_key, alert_raise, shared_outage_alert
from monitoring.sources import MetricSource, metric_source
from registry.names import baseline_variant_name, variant_name

log = logging.getLogger(__name__)


def judge_tick(
    *,
    rollout_id: int,
    endpoint: str,
    stable_variant: str,
    candidate_variant: str,
    since: datetime,
    until: datetime | None = None,
    step: int | None = None,
    config: JudgeConfig | None = None,
    team=None,
    latency_window: tuple[ArmWindow, ArmWindow] | None = None,
    compare_latency: bool = True,
    error_control_variants: list[str] | None = None,
    previous: dict | None = None,
    step_seconds: float | None = None,
    source: MetricSource | None = None,
) -> Verdict:
    """Judge candidate vs control (`stable_variant`: the stable, or the rollout's baseline
    copy) over the anchored window [since, until] from the store and store the verdict with
    its evidence. `since` must stay fixed for a rollout (the moment the candidate first got
    traffic): the error-rate e-process runs from there. `latency_window` (control,
    candidate over the current step, while the split is constant) is what the latency
    comparisons use instead; `compare_latency=False` skips them (nothing beside the
    candidate). `error_control_variants`: the variants pooled as the error-rate control
    (stable and baseline); `previous`: the last verdict's checks by name (guardrail breach
    counts); see monitoring/judge/verdict.py. `source`: where the series come from (default: the
    store, or Prometheus when PROMETHEUS_URL is set; monitoring/sources/)."""
    if stable_variant == candidate_variant:
        raise InvalidInput("stable and candidate must be different variants.", field="candidate_variant")
    until = until or timezone.now()
    config = config or JudgeConfig(
        alpha=conf.get("MONITORING_JUDGE_ALPHA"), psi_threshold=conf.get("MONITORING_PSI_THRESHOLD")
    )
    pooled = [v for v in (error_control_variants or []) if v != candidate_variant]
    if pooled == [stable_variant]:
        pooled = []  # the control itself
    arms = (source or metric_source()).judge_arms(
        endpoint=endpoint, variants=[stable_variant, candidate_variant, *pooled], since=since, until=until
    )
    stable, candidate = arms[stable_variant], arms[candidate_variant]
    error_control = None
    if pooled:
        error_control = arms[pooled[0]]
        for variant in pooled[1:]:
            error_control = error_control.plus(arms[variant])
    decision: Decision = judge(
        stable,
        candidate,
        config,
        latency=latency_window,
        compare_latency=compare_latency,
        error_control=error_control,
        previous=previous,
        now_s=until.timestamp(),
        seconds=(until - since).total_seconds(),
        step_seconds=step_seconds,
        control=VariantRole.BASELINE if stable_variant.endswith("-baseline") else VariantRole.STABLE,
    )
    return Verdict.objects.create(
        rollout_id=rollout_id,
        endpoint=endpoint,
        step=step,
        stable_variant=stable_variant,
        candidate_variant=candidate_variant,
        outcome=decision.outcome,
        reason=decision.reason[:4000],
        checks=decision.checks,
        window_start=since,
        window_end=until,
        team=team,
    )


def control_variants(rollout) -> tuple[str, list[str]]:
    """(the variant the candidate is compared with, the variants pooled as the control of
    the anchored checks: error rate and PSI). With a fair baseline serving beside the
    candidate: the baseline; and stable + baseline pooled for the anchored checks, for the
    whole rollout (both serve the stable artifact; errors and scores do not depend on an
    arm's share the way latency does, a larger control makes each candidate error count
    more, and at a step where the baseline takes what the stable had, the stable's own
    history alone would run dry)."""
    stable = variant_name(rollout.baseline_artifact)
    if rollout.baseline_model:
        baseline = baseline_variant_name(rollout.baseline_artifact)
        return (baseline if rollout.split.baseline_bp > 0 else stable), [stable, baseline]
    return stable, [stable]


def _links(rollout) -> dict:
    base = conf.public_url()
    return {
        "rollout": f"{base}{reverse('deployments:endpoint-detail', args=[rollout.endpoint.name])}?rollout={rollout.pk}",
        "api": f"{base}/api/v1/rollouts/{rollout.pk}/",
    }


def judge_rollout(rollout, *, now=None, source: MetricSource | None = None) -> dict:
    """Judge one rollout now and apply the verdict; returns what happened."""
    now = now or timezone.now()
    source = source or metric_source()
    stable, pooled = control_variants(rollout)
    candidate = variant_name(rollout.candidate_artifact)
    step_window = None  # (control, candidate) since the current step began: its sample, and its latency
    if rollout.step_started_at:
        arms = source.judge_arms(
            endpoint=rollout.endpoint.name, variants=[stable, candidate], since=rollout.step_started_at, until=now
        )
        step_window = (arms[stable], arms[candidate])
    last = Verdict.objects.filter(rollout_id=rollout.pk).order_by("-created_at", "-pk").only("checks").first()
    split = rollout.split
    verdict = judge_tick(
        rollout_id=rollout.pk,
        endpoint=rollout.endpoint.name,
        stable_variant=stable,
        candidate_variant=candidate,
        since=rollout.traffic_started_at,
        until=now,
        step=rollout.step_index,
        config=judge_config_for(rollout.endpoint),
        team=rollout.endpoint.team,
        # latency within the step (a constant split), and only while a control serves beside the candidate
        latency_window=step_window,
        compare_latency=split.stable_bp > 0 or split.baseline_bp > 0,
        error_control_variants=pooled,
        previous={c["name"]: c for c in (last.checks if last else [])},
        step_seconds=(now - rollout.step_started_at).total_seconds() if rollout.step_started_at else None,
        source=source,
    )
    step_requests = 0
    if step_window:
        # an LLM endpoint's requests are its gateway_llm_requests (the window's llm ticks)
        arm = step_window[1].as_llm() if rollout.endpoint.kind == "llm" else step_window[1]
        step_requests = int(arm.requests)
    updated, decision = rollout_apply_verdict(
        rollout_id=rollout.pk,
        outcome=verdict.outcome,
        reason=verdict.reason,
        step_requests=step_requests,
        now=now,
        verdict_id=verdict.pk,
    )
    if verdict.reason.startswith(NOT_JUDGED):
        shared_outage_alert(
            endpoint=rollout.endpoint,
            reason=verdict.reason,
            rollout_id=rollout.pk,
            evidence={"verdict_id": verdict.pk, "candidate": candidate, "links": _links(rollout)},
        )
    if decision is not None and decision.to_state in (State.ROLLING_BACK, State.PAUSED):
        rolled_back = decision.to_state == State.ROLLING_BACK
        alert_raise(
            kind="rollout_rolled_back" if rolled_back else "rollout_paused",
            severity=Severity.CRITICAL if rolled_back else Severity.WARNING,
            reason=f"{rollout.endpoint.name}: {candidate} {'rolled back' if rolled_back else 'paused'} — {decision.reason}",
            endpoint=rollout.endpoint.name,
            rollout_id=rollout.pk,
            team=rollout.endpoint.team,
            evidence={
                "verdict_id": verdict.pk,
                "outcome": verdict.outcome,
                "checks": verdict.checks,
                "stable": stable,
                "candidate": candidate,
                "step_index": rollout.step_index,
            },
            links=_links(rollout),
        )
    return {"rollout": rollout.pk, "verdict": verdict.outcome, "to_state": getattr(decision, "to_state", None)}


def canary_tick(*, limit: int = 50, now=None) -> list[dict]:
    now = now or timezone.now()
    source = metric_source()
    results = []
    for rollout in rollout_selectors.rollouts_to_judge(limit=limit):
        try:
            results.append(judge_rollout(rollout, now=now, source=source))
        except ValueError:  # its plan does not hold (a row written around the API): reconcile rolls it back
            log.exception("canary tick: rollout #%s cannot be judged; the others are", rollout.pk)
    for rollout in rollout_selectors.rollouts_failed_since(since=now - timedelta(minutes=10)):
        key = alert_dedupe_key(kind="rollout_failed", rollout_id=rollout.pk, endpoint=rollout.endpoint.name)
        if not Alert.objects.filter(dedupe_key=key).exists():
            alert_raise(
                kind="rollout_failed",
                severity=Severity.CRITICAL,
                reason=f"{rollout.endpoint.name}: {rollout.reason}",
                endpoint=rollout.endpoint.name,
                rollout_id=rollout.pk,
                team=rollout.endpoint.team,
                links=_links(rollout),
            )
    return results
