"""The one seam between the judge's benchmark and the platform's judge code: from what the
gateway counts to the judge's verdict and the rollout machine's next state, through the
same pure functions the beat runs. When the judge's interfaces change, this module (and
only this one) is re-pointed.

The path of one rollout tick here and in the beat (monitoring/services/canary.py):

  gateway counters      the gateway's own series (gateway_requests_total by variant, status
                        and fault; gateway_request_duration_seconds buckets, the gateway's
                        BUCKETS; gateway_failovers_total by from_variant; prediction-score
                        buckets), kept cumulative as the gateway keeps them (`GatewayCounters`)
  scrape (every 2 s)    gateway_samples.gateway_snapshot_samples -> gateway_samples.gateway_deltas -> collect.derive:
                        the collector's code, so a failed-over canary attempt is one request
                        and one error of the canary, as the store has it
  windows               windows.arms_from_rows on each scrape's rows; a window since a time
                        is those ticks joined (`Window`; joining per-tick windows equals
                        arms_from_rows over all their rows: tests/bench/test_judge_sim.py)
  judge (every 1 s)     judge.judge with judge_rollout's arguments (`judge_rollout_tick`):
                        the baseline as the control while it serves, stable + baseline pooled
                        for the anchored checks, latency within the step, the last checks
  rollout machine       rollout_machine.on_tick as rollout_apply_verdict calls it, and the
                        promotion's grace (a fail while promoting rolls back)

An experiment's analysis tick (experiments/services/online.experiment_analyze) goes the same
way: the arm's guardrails by the judge (`arm_guardrails`), then analyze and decide_experiment
(`analysis_tick`).

What it leaves out: the database and the Celery hops (the beat's 1 s ticks are simulated
time here) and the route table's propagation (a new split applies from the next second).

Why this is one long module: it is the benchmark's only contact with the judge's and the
analysis' interfaces, kept in one place so that a change to them is re-pointed here alone.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from deployments.rollout_machine import FULL_BP, Decision, Plan, Split, State, on_tick
from gateway.telemetry.metrics import BUCKETS
from gateway.telemetry.scores import SCORE_BUCKETS
from monitoring.collection import collect, gateway_samples
from monitoring.judge.evidence import ArmWindow, JudgeConfig
from monitoring.judge.verdict import judge
from monitoring.judge.windows import arms_from_rows, wanted

ENDPOINT = "bench-judge"
STABLE, BASELINE, CANDIDATE = "stable", "stable-baseline", "candidate"  # the beat names a baseline "<stable>-baseline"
VARIANTS = (STABLE, BASELINE, CANDIDATE)
SCRAPE_S = 2.0  # config/celery.py: monitoring-collect every 2 s
PROMOTE_GRACE_S = 30.0  # deployments/services/rollouts.py rollout_start's default
NAMES = gateway_samples.GatewayNames()
LATENCY_EDGES = np.asarray(BUCKETS)  # bucket i holds bisect_left(BUCKETS, seconds) == i; the last is +Inf
SCORE_EDGES = np.asarray(SCORE_BUCKETS)


def _le(edge: float) -> str:
    return "+Inf" if math.isinf(edge) else repr(float(edge))


@dataclass
class GatewayCounters:
    """One endpoint's cumulative counters as the gateway exposes them (gateway/telemetry/metrics.py)."""

    requests: dict = field(default_factory=lambda: defaultdict(float))  # (variant, status, fault) -> n
    latency: dict = field(default_factory=lambda: {v: np.zeros(len(BUCKETS) + 1) for v in VARIANTS})
    latency_sum: dict = field(default_factory=lambda: defaultdict(float))
    scores: dict = field(default_factory=lambda: {v: np.zeros(len(SCORE_BUCKETS) + 1) for v in VARIANTS})
    failovers: dict = field(default_factory=lambda: defaultdict(float))  # (from_variant, reason) -> n
    failovers_failed: dict = field(default_factory=lambda: defaultdict(float))  # (from_variant, reason) -> n

    def answered(self, variant: str, latencies_s: np.ndarray, statuses: np.ndarray) -> None:
        """Requests the gateway answered under `variant` (the one that served, or the last one
        tried): counted by status (5xx: the backend's fault) and timed in its histogram."""
        if not len(latencies_s):
            return
        self.latency[variant] += np.bincount(
            np.searchsorted(LATENCY_EDGES, latencies_s, side="left"), minlength=len(BUCKETS) + 1
        )
        self.latency_sum[variant] += float(np.sum(latencies_s))
        if statuses[0] == 200 and (statuses == 200).all():  # the common case, without np.unique
            self.requests[(variant, "200", "none")] += len(statuses)
            return
        values, counts = np.unique(statuses, return_counts=True)
        for status, count in zip(values.tolist(), counts.tolist()):
            fault = "backend" if status >= 500 or status == 0 else "none"
            self.requests[(variant, str(status if status else 502), fault)] += count

    def failed_over(self, variant: str, count: int, reason: str = "5xx", retry_failed: int = 0) -> None:
        """`count` attempts of `variant` failed over for `reason` ("timeout" or "5xx"); of
        them `retry_failed` failed on the stable too (gateway_failovers_failed)."""
        if count:
            self.failovers[(variant, reason)] += count
        if retry_failed:
            self.failovers_failed[(variant, reason)] += retry_failed

    def scored(self, variant: str, scores: np.ndarray) -> None:
        scores = scores[~np.isnan(scores)]
        if len(scores):
            self.scores[variant] += np.bincount(
                np.searchsorted(SCORE_EDGES, scores, side="left"), minlength=len(SCORE_BUCKETS) + 1
            )

    def samples(self) -> list[tuple[str, dict, float]]:
        """The (name, labels, value) samples a scrape of the gateway reads."""
        out = []
        for (variant, status, fault), value in self.requests.items():
            labels = {"endpoint": ENDPOINT, "variant": variant, "status": status, "fault": fault}
            out.append((NAMES.name(NAMES.requests), labels, value))
        for family, table, edges in (
            (NAMES.name(NAMES.latency), self.latency, (*BUCKETS, math.inf)),
            (NAMES.name(NAMES.prediction_score), self.scores, (*SCORE_BUCKETS, math.inf)),
        ):
            for variant, counts in table.items():
                if not counts.any():
                    continue
                for edge, cumulative in zip(edges, np.cumsum(counts).tolist()):
                    out.append(
                        (f"{family}_bucket", {"endpoint": ENDPOINT, "variant": variant, "le": _le(edge)}, cumulative)
                    )
        for variant, total in self.latency_sum.items():
            out.append((f"{NAMES.name(NAMES.latency)}_sum", {"endpoint": ENDPOINT, "variant": variant}, total))
        for (variant, reason), value in self.failovers.items():
            labels = {"endpoint": ENDPOINT, "from_variant": variant, "to_variant": STABLE, "reason": reason}
            out.append((NAMES.name(NAMES.failovers), labels, value))
        for (variant, reason), value in self.failovers_failed.items():
            labels = {"endpoint": ENDPOINT, "from_variant": variant, "reason": reason}
            out.append((NAMES.name(NAMES.failovers_failed), labels, value))
        return out


def scrape(counters: GatewayCounters, previous: dict, time_s: float, seconds: float = SCRAPE_S):
    """(snapshot, rows): one scrape through the collector's code; rows are the store's
    (variant, metric, time, value) of what the judge reads."""
    snapshot = gateway_samples.gateway_snapshot_samples(counters.samples(), NAMES)
    rows = []
    if previous:
        for (endpoint, variant), totals in gateway_samples.gateway_deltas(
            previous, snapshot, seconds=seconds, names=NAMES
        ).items():
            if endpoint == ENDPOINT and variant in VARIANTS:
                rows.extend((variant, m, time_s, v) for m, v in collect.derive(totals).items() if wanted(m))
    return snapshot, rows


class Window:
    """The judge's window since a time: the per-scrape windows of arms_from_rows joined. With
    `pooled`, also the stable and the baseline as one arm (`self.pooled`: the error-rate
    control judge_rollout builds with ArmWindow.plus over the whole window), joined scrape by
    scrape from each scrape's plus, so no look re-adds the whole window (equal to plus over
    the joined windows: tests/bench/test_judge_sim.py)."""

    def __init__(self, variants=VARIANTS, pooled: bool = False):
        self.arms = {v: ArmWindow() for v in variants}
        self.pooled = ArmWindow() if pooled else None

    def add(self, rows: list) -> None:
        ticks = arms_from_rows(rows, list(self.arms))
        for variant, tick in ticks.items():
            _join(self.arms[variant], tick)
        if self.pooled is not None:
            _join(self.pooled, _filled(ticks[STABLE]).plus(_filled(ticks[BASELINE])))


def _filled(tick: ArmWindow) -> ArmWindow:
    """A scrape's window with its shared failures as Window keeps them (zeros when uncounted)."""
    tick.shared_failures = tick.shared_failures or [0.0] * len(tick.ticks)
    return tick


def _join(arm: ArmWindow, tick: ArmWindow) -> None:
    """One scrape's window appended to `arm`'s."""
    if tick.llm_ticks or tick.ttft_buckets or tick.itl_buckets:
        raise ValueError("LLM series: the benchmark replays tensor endpoints only")
    arm.ticks.extend(tick.ticks)
    arm.shared_failures.extend(tick.shared_failures or [0.0] * len(tick.ticks))
    arm.latency_ticks.extend(tick.latency_ticks)
    for le, n in tick.latency_buckets.items():
        arm.latency_buckets[le] = arm.latency_buckets.get(le, 0.0) + n
    if tick.score_bins:
        arm.score_bins = (
            [a + b for a, b in zip(arm.score_bins, tick.score_bins)] if arm.score_bins else list(tick.score_bins)
        )


def judge_config(endpoint_defaults: dict, alpha: float) -> JudgeConfig:
    """monitoring/selectors/judge_config.judge_config_for on an endpoint with these fields."""
    return JudgeConfig(alpha=alpha, **endpoint_defaults)


def _django() -> None:
    """Django set up (the defaults below are the models' and settings'); idempotent."""
    import os

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()


def endpoint_defaults() -> tuple[dict, float]:
    """(the judge's fields of a new Endpoint as the model declares them, MONITORING_JUDGE_ALPHA)."""
    _django()
    from django.apps import apps

    from monitoring import conf

    endpoint = apps.get_model("deployments", "Endpoint")
    names = ("slo_p99_ms", "slo_error_rate", "psi_threshold", "latency_margin")
    return {name: endpoint._meta.get_field(name).default for name in names}, float(conf.get("MONITORING_JUDGE_ALPHA"))


def judge_rollout_tick(
    anchored: Window,
    step: Window,
    split: Split,
    plan: Plan,
    config: JudgeConfig,
    previous: dict,
    now_s: float,
    step_s: float,
):
    """monitoring/services/canary.judge_rollout's call of the judge: (decision, step requests)."""
    control = BASELINE if plan.baseline and split.baseline_bp > 0 else STABLE
    pooled = [STABLE, BASELINE] if plan.baseline else []
    error_control = None
    if pooled:  # Window(pooled=True) keeps it joined; else ArmWindow.plus as judge_rollout does
        error_control = anchored.pooled or anchored.arms[STABLE].plus(anchored.arms[BASELINE])
    decision = judge(
        anchored.arms[control],
        anchored.arms[CANDIDATE],
        config,
        latency=(step.arms[control], step.arms[CANDIDATE]),
        compare_latency=split.stable_bp > 0 or split.baseline_bp > 0,
        error_control=error_control,
        previous=previous,
        now_s=now_s,
        seconds=now_s,
        step_seconds=step_s,
        control="baseline" if control == BASELINE else "stable",
    )
    return decision, int(step.arms[CANDIDATE].requests)


def apply_verdict(
    state: str,
    step_index: int,
    plan: Plan,
    step_s: float,
    step_requests: int,
    outcome: str,
    reason: str,
    promoting_s: float,
) -> Decision:
    """deployments/services/rollouts.rollout_apply_verdict's decision (no database), and the
    promotion's end after its grace (reconcile's): Decision(to_state=None) when it stays."""
    if state == State.PROMOTING:
        if outcome == "fail":
            return Decision(State.ROLLING_BACK, step_index, f"judge during promotion: {reason}")
        if promoting_s >= PROMOTE_GRACE_S:
            return Decision(State.SUCCEEDED, step_index, "promotion held for its grace")
        return Decision(None, step_index, "")
    return on_tick(
        state=state,
        step_index=step_index,
        plan=plan,
        step_elapsed_s=step_s,
        candidate_requests=step_requests,
        verdict=outcome,
        verdict_reason=reason,
    )


def shares(split: Split) -> dict[str, float]:
    """Each variant's share of the endpoint's traffic under a split."""
    return {
        STABLE: split.stable_bp / FULL_BP,
        BASELINE: split.baseline_bp / FULL_BP,
        CANDIDATE: split.candidate_bp / FULL_BP,
    }


# --- experiments: experiments/services/online.experiment_analyze's tick, without the database ---
def experiment_defaults() -> dict:
    """The planning and decision fields of a new Experiment as the model declares them."""
    _django()
    from django.apps import apps

    experiment = apps.get_model("experiments", "Experiment")
    names = ("baseline_rate", "exposures_per_unit", "mde", "power", "alpha", "srm_alpha")
    return {name: experiment._meta.get_field(name).default for name in names}


def arm_guardrails(window: Window, config: JudgeConfig, previous: dict, now_s: float):
    """(status, failing checks, the judge's decision): the candidate arm's machine guardrails
    as monitoring/services/arm_guardrails.arm_guardrails_judge judges them (the arm against
    the control over the whole experiment; here the stable variant is the control, the
    candidate variant the arm)."""
    from monitoring.services.arm_guardrails import STATUS

    decision = judge(
        window.arms[STABLE],
        window.arms[CANDIDATE],
        config,
        previous=previous,
        now_s=now_s,
        seconds=now_s,
        control="control",
    )
    failing = [c for c in decision.checks if c["outcome"] == "fail"]
    return str(STATUS[decision.outcome]), failing, decision


def analysis_tick(sums: dict, allocation: dict, settings: dict, status: str, failing: list, reason: str = ""):
    """(the experiment's decision, the analysis): experiments/services/online.experiment_analyze's
    pure part, experiments.analysis.analyze then experiments.decision.decide_experiment, for a
    control arm "control" and a candidate "arm" whose guardrails are `status`."""
    from experiments.analysis import analyze
    from experiments.decision import decide_experiment
    from experiments.models import ExperimentState

    result = analyze(
        sums,
        control="control",
        allocation=allocation,
        alpha=settings["alpha"],
        mde=settings["mde"],
        srm_alpha=settings["srm_alpha"],
        guardrails={"arm": status},
    )
    failed = {"arm": {"reason": reason, "checks": failing}} if status == "fail" else {}
    verdict = decide_experiment(
        state=ExperimentState.RUNNING,
        control="control",
        candidates=result["candidates"],
        failed_guardrails=failed,
        srm=result["srm"],
    )
    return verdict, result
