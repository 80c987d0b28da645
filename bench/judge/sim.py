"""One simulated rollout: a replayed trace with a fault as its traffic, the judge every second
and the rollout machine stepping on its verdicts, to a final outcome (promoted, rolled back,
paused) and the time it took. Pure and deterministic per spec (seeded): the benchmark runs
thousands of these in worker processes (bench/judge/run.py); the tests run a handful.

The clock: t = 0 is the candidate's first request (the rollout's traffic_started_at). Each
second's traffic uses the split the machine was in at its start; the collector scrapes every
2 s (at a phase drawn per seed), then the judge looks (every 1 s, as the beat's canary tick),
then the machine acts. A rollout ends rolled back, paused (a step's deadline passed with no
conclusive verdict, the default plan's policy), promoted (its promotion held for the grace),
or, past every step's deadline, "unfinished".
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.judge import adapter
from bench.judge.adapter import CANDIDATE, GatewayCounters, Window
from bench.judge.faults import Fault
from bench.judge.replay import Traffic
from bench.judge.traces import ARMS, Trace
from deployments.rollout_machine import DEFAULT_PLAN, Plan, State, split_for
from monitoring.judge.evidence import JudgeConfig

OUTCOMES = {State.SUCCEEDED: "promoted", State.ROLLING_BACK: "rolled_back", State.PAUSED: "paused"}


@dataclass(frozen=True)
class Spec:
    trace: str
    rate: float
    steps_bp: tuple[int, ...]
    split: str  # the name of the steps: "default" or "suggested"
    fault: str
    seed: int


def plan_for(steps_bp) -> Plan:
    """The default plan with these steps and a fair baseline (rollout_start's defaults)."""
    return Plan(
        steps_bp=tuple(steps_bp),
        step_min_seconds=DEFAULT_PLAN.step_min_seconds,
        step_min_requests=DEFAULT_PLAN.step_min_requests,
        step_deadline_seconds=DEFAULT_PLAN.step_deadline_seconds,
        on_inconclusive=DEFAULT_PLAN.on_inconclusive,
        baseline=True,
    )


def _unchanged(last, fresh_rows: bool) -> bool:
    """Whether the last verdict stands without a new look: no new scrape, and no check
    counting its looks (a guardrail's breach count moves with every look)."""
    return last is not None and not fresh_rows and not any(c.get("breaches") for c in last.checks)


def simulate(spec: Spec, trace: Trace, fault: Fault, config: JudgeConfig, *, arm_of: dict | None = None) -> dict:
    """One rollout to its end; `arm_of`: which recorded arm plays each variant (default: drawn)."""
    plan = plan_for(spec.steps_bp)
    traffic = Traffic(trace, rate=spec.rate, fault=fault, seed=spec.seed, arm_of=arm_of)
    phase = int(traffic.rng.integers(0, 2))  # when in the 2 s the collector scrapes
    counters, snapshot = GatewayCounters(), {}
    anchored, step = Window(pooled=plan.baseline), Window()
    state, step_index, step_started, promoting_since = State.CANARY, 0, 0.0, None
    split = split_for(state, step_index, plan)
    previous, last, fresh = {}, None, False
    steps_seen = [0]
    limit = len(plan.steps_bp) * plan.step_deadline_seconds + adapter.PROMOTE_GRACE_S + 5
    t = 0
    while t < limit:
        traffic.second(t, split, counters)
        t += 1
        if t % 2 == phase:
            snapshot, rows = adapter.scrape(counters, snapshot, float(t))
            if rows:
                anchored.add(rows)
                step.add(rows)
                fresh = True
        if not _unchanged(last, fresh):
            last, step_requests = adapter.judge_rollout_tick(
                anchored, step, split, plan, config, previous, float(t), t - step_started
            )
            previous, fresh = {c["name"]: c for c in last.checks}, False
        decision = adapter.apply_verdict(
            state,
            step_index,
            plan,
            t - step_started,
            step_requests,
            last.outcome,
            last.reason,
            0.0 if promoting_since is None else t - promoting_since,
        )
        if decision.to_state is None:
            continue
        if decision.to_state in OUTCOMES:
            return _result(
                spec, fault, OUTCOMES[decision.to_state], t, decision.reason, last, steps_seen, anchored, traffic
            )
        if decision.to_state == State.PROMOTING:
            promoting_since = t
        elif decision.step_index != step_index or decision.to_state != state:
            step, step_started = Window(), float(t)
            steps_seen.append(decision.step_index)
        state, step_index = decision.to_state, decision.step_index
        split = split_for(state, step_index, plan)
        fresh = True  # a new split or step window: the judge looks again
    return _result(spec, fault, "unfinished", t, "past every step's deadline", last, steps_seen, anchored, traffic)


def _result(spec: Spec, fault: Fault, outcome: str, t: float, reason: str, last, steps_seen, anchored, traffic) -> dict:
    failed = [c["name"] for c in last.checks if c["outcome"] == "fail"] if last else []
    waiting = [c["name"] for c in last.checks if c["outcome"] == "inconclusive"] if last else []
    return {
        "trace": spec.trace,
        "rate": spec.rate,
        "split": spec.split,
        "steps_bp": list(spec.steps_bp),
        "fault": fault.name,
        "seed": spec.seed,
        "outcome": outcome,
        "seconds": t,
        "reason": reason[:300],
        "failed_checks": failed,
        "waiting_checks": waiting,  # what the last verdict still waited for (a paused rollout's why)
        "last_step": steps_seen[-1],
        "candidate_requests": int(anchored.arms[CANDIDATE].requests),
        # which recorded process played each variant (a paused A/A's other why: two processes
        # of one model whose tails differ)
        "arms": {variant: ARMS[index] for variant, index in traffic.arm_of.items()},
    }
