"""A dataset version registered with MLflow's dataset tracking (mlflow.data).

Each version is the input of one run in the team's `datasets/<team>` experiment: the
dataset (its Parquet folder as the source, its digest and schema) logged with mlflow.log_input,
its statistics as metrics and its lineage (endpoint, experiment, time range, serving versions)
as tags. A version trained on it logs the same dataset as its input (experiments/reference/train.py).
"""

from __future__ import annotations

from deployments.selectors.gateway_routes import team_label


def mlflow_dataset(dataset, frame):
    import mlflow.data

    return mlflow.data.from_pandas(
        frame.drop(
            columns=[c for c in frame.columns if frame[c].dtype == object and c not in ("request_id", "variant")]
        ),
        source=dataset.path,
        name=f"{dataset.name}-v{dataset.version}",
        targets="label",
    )


def register(dataset, train_frame) -> str:
    import mlflow

    from kernel import mlflow as mlflow_config

    mlflow_config.configure()
    team = dataset.team.name  # as train_reference_model tags its runs (kernel.mlflow.TEAM_TAG)
    experiment_id = mlflow_config.experiment_id(f"datasets/{team_label(dataset.team)}", team=team)
    tags = {
        "modelplane.dataset": dataset.public_id,
        **{f"modelplane.lineage.{k}": str(v) for k, v in dataset.lineage.items()},
    }
    with mlflow.start_run(experiment_id=experiment_id, run_name=f"{dataset.name}-v{dataset.version}", tags=tags) as run:
        mlflow.log_input(mlflow_dataset(dataset, train_frame), context="training")
        stats = dataset.statistics
        mlflow.log_metrics({k: float(stats[k]) for k in ("rows", "train_rows", "valid_rows", "label_rate")})
    return run.info.run_id


def training_input(dataset):
    """The dataset's training split as an MLflow dataset (a run that trains on it logs it)."""
    import pandas as pd

    return mlflow_dataset(dataset, pd.read_parquet(f"{dataset.path}/train.parquet"))
