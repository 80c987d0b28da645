"""Reads of training experiments and runs from the MLflow tracking store.

Who sees a run follows the one rule registration follows (kernel.mlflow.run_team): the
run's own `modelplane.team` tag, else its experiment's. A user sees the runs of their
teams (staff: all), and an experiment when it is one of their teams' or holds a run of
theirs (a run tagged for the team in an untagged experiment); another team's run, an
untagged one and a missing one are one 404 that says what to tag.
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


def _visible(run, exp, teams: set[str] | None) -> bool:
    return teams is None or mlflow_config.run_team(run, exp.tags) in teams


def _experiment_rows(user, max_results: int = 200) -> list[tuple[ExperimentRow, list]]:
    """(row, the runs of it the user may see) for every experiment the user may see."""
    from mlflow.entities import ViewType

    client = mlflow_config.client()
    teams = _visible_team_names(user)
    rows = []
    for exp in client.search_experiments(view_type=ViewType.ACTIVE_ONLY, max_results=max_results):
        team = exp.tags.get(TEAM_TAG, "")
        runs = [run for run in client.search_runs([exp.experiment_id], max_results=1000) if _visible(run, exp, teams)]
        if teams is not None and team not in teams and not runs:
            continue
        rows.append((ExperimentRow(exp.experiment_id, exp.name, team, len(runs), exp.artifact_location), runs))
    return sorted(rows, key=lambda r: r[0].name)


def experiment_list(*, user, max_results: int = 200) -> list[ExperimentRow]:
    return [row for row, _ in _experiment_rows(user, max_results)]


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
    """Runs of one experiment the user may see (kernel.mlflow.run_team), newest first, with
    params, metrics and tags."""
    experiment_get(user=user, experiment_id=experiment_id)
    client = mlflow_config.client()
    tags = client.get_experiment(str(experiment_id)).tags
    teams = _visible_team_names(user)
    runs = client.search_runs([str(experiment_id)], max_results=max_results, order_by=["attributes.start_time DESC"])
    return [_run_row(run) for run in runs if teams is None or mlflow_config.run_team(run, tags) in teams]


RUN_ID = re.compile(r"^[0-9a-f]{32}$")
MAX_ARTIFACTS = 200


def run_get(*, user, run_id: str, experiment_id: str | None = None) -> dict:
    """One run the user may see, by the rule registration uses (kernel.mlflow.run_team: the
    run's team tag, else its experiment's), else NotFound — the same for another team's
    run, an untagged one and a missing one, saying what to tag."""
    from mlflow.exceptions import MlflowException

    missing = NotFound(
        f"No training run with id {str(run_id)[:64]!r} in your teams. {mlflow_config.NOT_YOURS_HINT}",
        code="run_not_found",
    )
    if not RUN_ID.match(str(run_id)):
        raise missing
    client = mlflow_config.client()
    try:
        run = client.get_run(run_id)
        experiment = client.get_experiment(run.info.experiment_id)
    except MlflowException:
        raise missing from None
    if experiment_id is not None and run.info.experiment_id != str(experiment_id):
        raise missing
    teams = _visible_team_names(user)
    team = mlflow_config.run_team(run, experiment.tags)
    if teams is not None and team not in teams:
        raise missing
    row = ExperimentRow(
        experiment.experiment_id,
        experiment.name,
        experiment.tags.get(TEAM_TAG, ""),
        0,  # not counted here: the page links to the experiment, which counts what the user sees
        experiment.artifact_location,
    )
    return {**_run_row(run), "team": team, "experiment": row}


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
