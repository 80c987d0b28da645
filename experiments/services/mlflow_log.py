"""The result of an online experiment as an MLflow run, linked to both model versions.

One MLflow experiment per team ("online-experiments/<team>", tagged modelplane.team so the
training-runs pages scope it), one run per decided experiment: params (endpoint, arms,
allocation, MDE, alpha, power), metrics (per-arm units/exposures/clicks/CTR, the lift and
its always-valid bounds), and tags naming the control and candidate model versions and
the outcome (`modelplane.outcome.<arm>` = won | lost | no_decision), so the registry can
show which experiment a version won or lost.
"""

from __future__ import annotations

import logging

from experiments.selectors.training import TEAM_TAG
from kernel import mlflow as mlflow_config

log = logging.getLogger(__name__)


def log_result(experiment, result: dict) -> str | None:
    """Returns the run id; MLflow being down is logged, never fatal to the decision."""
    try:
        client = mlflow_config.client()
        team = experiment.endpoint.team.name
        exp_id = mlflow_config.experiment_id(f"online-experiments/{team}")
        client.set_experiment_tag(exp_id, TEAM_TAG, team)
        arms = list(experiment.arms.select_related("artifact__version__model"))
        tags = {
            TEAM_TAG: team,
            "modelplane.experiment": experiment.public_id,
            "modelplane.endpoint": experiment.endpoint.name,
            "modelplane.decision": experiment.decision or "none",
        }
        for arm in arms:
            version = arm.artifact.version
            role = "control" if arm.is_control else "candidate"
            tags[f"modelplane.{role}.{arm.name}"] = f"{version.model.name}/{version.version}"
            won = experiment.winner_id == arm.pk
            tags[f"modelplane.outcome.{arm.name}"] = (
                "won" if won else ("lost" if experiment.decision else "no_decision")
            )
        run = client.create_run(exp_id, run_name=f"{experiment.name} ({experiment.public_id})", tags=tags)
        rid = run.info.run_id
        client.log_param(rid, "endpoint", experiment.endpoint.name)
        for key in ("mde", "alpha", "power", "attribution_window_s"):
            client.log_param(rid, key, getattr(experiment, key))
        for arm in arms:
            client.log_param(rid, f"allocation_bp.{arm.name}", arm.allocation_bp)
            stats = result["arms"].get(arm.name, {})
            for key in ("units", "exposures", "clicks", "ctr", "conversions", "value"):
                if stats.get(key) is not None:
                    client.log_metric(rid, f"{arm.name}.{key}", float(stats[key]))
        for name, cand in result["candidates"].items():
            for key in ("lift", "lower", "upper"):
                if cand.get(key) is not None:
                    client.log_metric(rid, f"{name}.{key}", float(cand[key]))
        client.set_terminated(rid)
        return rid
    except Exception:  # noqa: BLE001 - the tracking server is an observer of the decision
        log.exception("could not log experiment %s to MLflow", experiment.public_id)
        return None
