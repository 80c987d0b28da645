"""What an analysis tick does to an experiment: a pure function, state in, decision out.

`decide_experiment` reads the experiment's state, each candidate arm's reading (the
statistical decision of experiments.analysis.decide and its lift) and the arms whose
machine guardrails failed, and says whether the experiment moves and why. The service
(experiments/services/online.py) loads the numbers, calls it and saves what it says, as
deployments/rollout_machine.py does for rollouts; tests/experiments/test_decision.py
tables every case.

The order is the rule stated up front (docs/experiments.md): a failing guardrail
on any arm stops for harm first, whatever the lift says; then a candidate whose lift ships
(the best lift among several); then every candidate harming the primary metric stops; else
the experiment keeps running. Only a running experiment moves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from experiments.analysis import ArmDecision
from experiments.models import ExperimentState


@dataclass(frozen=True)
class ExperimentDecision:
    to_state: str | None  # None: the experiment stays where it is (the tick only saves the evidence)
    decision: str = ""  # ship | stop
    winner: str | None = None  # the arm that won (the control on a stop)
    reason: str = ""
    harm: bool = False  # stopped by a failing guardrail: the service raises the alert
    data: dict = field(default_factory=dict)  # what the audit event carries


STAY = ExperimentDecision(None)


def harm_reason(failed: dict[str, dict]) -> str:
    """`stopped for harm: guardrail failed on v2-onnx-fp32 (error_rate: candidate error rate …)`."""
    parts = [f"{name} ({', '.join(c['name'] for c in f['checks'])}: {f['reason']})" for name, f in failed.items()]
    return "stopped for harm: guardrail failed on " + "; ".join(parts)


def decide_experiment(
    *,
    state: str,
    control: str,
    candidates: dict[str, dict],
    failed_guardrails: dict[str, dict],
    srm: dict | None = None,
) -> ExperimentDecision:
    """`candidates`: {arm: {"decision": ship|stop|continue|blocked, "lift": float|None, …}};
    `failed_guardrails`: {arm: {"reason", "checks": [failing checks]}} (empty when none fail)."""
    if state != ExperimentState.RUNNING:
        return STAY
    srm = srm or {}
    if failed_guardrails:
        return ExperimentDecision(
            ExperimentState.DECIDED,
            ArmDecision.STOP,
            control,
            harm_reason(failed_guardrails)[:4000],
            harm=True,
            data={"guardrails": failed_guardrails, "candidates": candidates, "srm": srm},
        )
    shipping = [name for name, c in candidates.items() if c.get("decision") == ArmDecision.SHIP]
    if shipping:
        best = max(shipping, key=lambda name: candidates[name].get("lift") or 0.0)
        return ExperimentDecision(
            ExperimentState.DECIDED,
            ArmDecision.SHIP,
            best,
            f"{best}: lower bound of the lift above 0",
            data={"candidate": candidates[best], "srm": srm},
        )
    decisions = {c.get("decision") for c in candidates.values()}
    if decisions and decisions <= {ArmDecision.STOP}:
        return ExperimentDecision(
            ExperimentState.DECIDED,
            ArmDecision.STOP,
            control,
            "every candidate harms the primary metric",
            data={"candidates": candidates, "srm": srm},
        )
    return STAY
