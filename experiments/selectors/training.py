"""Reads of training experiments and runs from the MLflow tracking store.

An experiment belongs to a team through its MLflow tag `modelplane.team` (set by the
training command); users see their teams' experiments, staff see all.
"""

import re
from dataclasses import dataclass

from kernel import mlflow as mlflow_config
from kernel.errors import NotFound
from registry.selectors.teams import team_list

TEAM_TAG = mlflow_config.TEAM_TAG


@dataclass(frozen=True)
class ExperimentRow:
    id: str
    name: str
    team: str
    run_count: int
    artifact_location: str


def _visible_team_names(user) -> set[str] | None:
    if user.is_staff or user.is_superuser:
        return None
    return set(team_list(user=user).values_list("name", flat=True))


def experiment_list(*, user, max_results: int = 200) -> list[ExperimentRow]:
    from mlflow.entities import ViewType

    client = mlflow_config.client()
    teams = _visible_team_names(user)
    rows = []
    for exp in client.search_experiments(view_type=ViewType.ACTIVE_ONLY, max_results=max_results):
        team = exp.tags.get(TEAM_TAG, "")
        if teams is not None and team not in teams:
            continue
        runs = client.search_runs([exp.experiment_id], max_results=1000)
        rows.append(ExperimentRow(exp.experiment_id, exp.name, team, len(runs), exp.artifact_location))
    return sorted(rows, key=lambda r: r.name)


def experiment_get(*, user, experiment_id: str) -> ExperimentRow:
    for row in experiment_list(user=user):
        if row.id == str(experiment_id):
            return row
    raise NotFound(f"No experiment with id {experiment_id}.", code="experiment_not_found")


def _run_row(run) -> dict:
    return {
        "run_id": run.info.run_id,
        "run_name": run.info.run_name,
        "experiment_id": run.info.experiment_id,
        "status": run.info.status,
        "start_time": run.info.start_time,
        "end_time": run.info.end_time,
        "params": dict(run.data.params),
        "metrics": dict(run.data.metrics),
        "tags": {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.")},
    }


def run_list(*, user, experiment_id: str, max_results: int = 100) -> list[dict]:
    """Runs of one experiment, newest first, with params, metrics and tags."""
    experiment_get(user=user, experiment_id=experiment_id)
    client = mlflow_config.client()
    runs = client.search_runs([str(experiment_id)], max_results=max_results, order_by=["attributes.start_time DESC"])
    return [_run_row(run) for run in runs]


RUN_ID = re.compile(r"^[0-9a-f]{32}$")
MAX_ARTIFACTS = 200


def run_get(*, user, run_id: str, experiment_id: str | None = None) -> dict:
    """One run the user may see (its experiment is one of their teams'), else NotFound."""
    from mlflow.exceptions import MlflowException

    missing = NotFound(f"No training run with id {run_id}.", code="run_not_found")
    if not RUN_ID.match(str(run_id)):
        raise missing
    try:
        run = mlflow_config.client().get_run(run_id)
    except MlflowException:
        raise missing from None
    if experiment_id is not None and run.info.experiment_id != str(experiment_id):
        raise missing
    try:
        experiment = experiment_get(user=user, experiment_id=run.info.experiment_id)
    except NotFound:
        raise missing from None
    return {**_run_row(run), "experiment": experiment}


def metric_history(run_id: str, keys) -> dict[str, list[dict]]:
    """{metric: [{"step", "timestamp" (ms), "value"}, …] in step order} for the run's metrics."""
    client = mlflow_config.client()
    out = {}
    for key in sorted(keys):
        points = client.get_metric_history(run_id, key)
        out[key] = [
            {"step": p.step, "timestamp": p.timestamp, "value": p.value}
            for p in sorted(points, key=lambda p: (p.step, p.timestamp))
        ]
    return out


def artifact_list(run_id: str, *, limit: int = MAX_ARTIFACTS) -> list[dict]:
    """The run's artifact files (path, size in bytes), walked breadth-first up to `limit`."""
    client = mlflow_config.client()
    files, folders = [], [None]
    while folders and len(files) < limit:
        folder = folders.pop(0)
        for info in client.list_artifacts(run_id, folder):
            if info.is_dir:
                folders.append(info.path)
            else:
                files.append({"path": info.path, "size": info.file_size})
    return sorted(files[:limit], key=lambda f: f["path"])
