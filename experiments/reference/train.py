"""Train the reference model on synthetic clicks; log it to MLflow."""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from experiments.reference.data import ClickLog, generate
from experiments.reference.model import ReferenceConfig, ReferenceCTR
from registry.quality import auc, logloss


@dataclass
class TrainResult:
    model: ReferenceCTR
    metrics: dict
    params: dict
    validation: ClickLog


def predict(model: ReferenceCTR, log: ClickLog, batch: int = 4096) -> np.ndarray:
    model.eval()
    device = next(model.parameters()).device
    out = []
    with torch.inference_mode():
        for start in range(0, len(log), batch):
            dense = torch.from_numpy(log.dense[start : start + batch]).to(device)
            sparse = torch.from_numpy(log.sparse[start : start + batch]).to(device)
            out.append(model(dense, sparse).cpu().numpy())
    return np.concatenate(out).reshape(-1)


def train(
    config: ReferenceConfig | None = None,
    *,
    rows: int = 200_000,
    valid_rows: int = 20_000,
    epochs: int = 2,
    batch_size: int = 1024,
    lr: float = 3e-3,
    seed: int = 0,
    signal_seed: int = 1234,
    threads: int = 2,
    device: str = "cpu",
    data: ClickLog | None = None,
    valid: ClickLog | None = None,
) -> TrainResult:
    """Train on `device` ("cuda" where a GPU is); the returned model stays there. `data` and
    `valid`: a dataset's splits (experiments/services/datasets.py) instead of synthetic clicks."""
    config = config or ReferenceConfig()
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    started = time.monotonic()
    data = data if data is not None else generate(rows, seed=seed, signal_seed=signal_seed)
    valid = valid if valid is not None else generate(valid_rows, seed=seed + 10_000, signal_seed=signal_seed)
    rows, valid_rows = len(data), len(valid)
    model = ReferenceCTR(config).to(device)
    optimizers = [torch.optim.Adam(model.dense_parameters(), lr=lr)]
    table_params = list(model.tables.parameters())
    optimizers.append(
        torch.optim.SparseAdam(table_params, lr=lr * 3)
        if config.sparse_grad
        else torch.optim.Adam(table_params, lr=lr * 3)
    )
    loss_fn = torch.nn.BCELoss()
    dense, sparse, label = (torch.from_numpy(a).to(device) for a in (data.dense, data.sparse, data.label))
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        model.train()
        order = torch.from_numpy(rng.permutation(rows)).to(device)
        for start in range(0, rows, batch_size):
            idx = order[start : start + batch_size]
            for opt in optimizers:
                opt.zero_grad()
            loss = loss_fn(model(dense[idx], sparse[idx]).reshape(-1), label[idx])
            loss.backward()
            for opt in optimizers:
                opt.step()
    model.eval()
    scores = predict(model, valid)
    metrics = {
        "auc": auc(valid.label, scores),
        "logloss": logloss(valid.label, scores),
        "train_seconds": time.monotonic() - started,
    }
    params = {
        **config.as_dict(),
        "rows": rows,
        "valid_rows": valid_rows,
        "epochs": epochs,
        "batch_size": batch_size,
        "lr": lr,
        "seed": seed,
        "signal_seed": signal_seed,
    }
    return TrainResult(model=model, metrics=metrics, params=params, validation=valid)


def signature():
    from mlflow.models import ModelSignature
    from mlflow.types import Schema, TensorSpec

    from experiments.reference.data import N_DENSE, N_SPARSE

    return ModelSignature(
        inputs=Schema(
            [
                TensorSpec(np.dtype(np.float32), (-1, N_DENSE), "dense"),
                TensorSpec(np.dtype(np.int64), (-1, N_SPARSE), "sparse"),
            ]
        ),
        outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, 1), "ctr")]),
    )


@contextmanager
def _quiet(logger: str):
    """`logger` at ERROR for the block: its warnings about a choice made on purpose are not news."""
    log = logging.getLogger(logger)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def log_to_mlflow(
    result: TrainResult,
    *,
    experiment: str = "reference-ctr",
    run_name: str = "",
    tags: dict | None = None,
    team: str = "",
    dataset=None,
) -> str:
    """Log params, metrics and the model (pytorch flavor, tensor signature); returns the model URI.
    With `team`, the experiment and the run carry the team tag (kernel.mlflow.TEAM_TAG)."""
    import mlflow
    import mlflow.pytorch

    from kernel import mlflow as mlflow_config

    mlflow_config.configure()
    run_tags = {**(tags or {}), **({mlflow_config.TEAM_TAG: team} if team else {})}
    experiment_id = mlflow_config.experiment_id(experiment, team=team or None)
    with mlflow.start_run(experiment_id=experiment_id, run_name=run_name or None, tags=run_tags):
        mlflow.log_params({k: (",".join(map(str, v)) if isinstance(v, list) else v) for k, v in result.params.items()})
        mlflow.log_metrics({k: float(v) for k, v in result.metrics.items()})
        if dataset is not None:  # the version's lineage: the dataset it learned from, as MLflow tracks datasets
            from experiments.services.dataset_mlflow import training_input

            mlflow.log_input(training_input(dataset), context="training")
        # "pickle": the module is re-created with its class from experiments.reference (a trusted,
        # in-tree model); the build worker loads it with mlflow.pytorch.load_model.
        # MLflow warns about pickle at every save: the choice is made, in-tree and said above
        with _quiet("mlflow.pytorch"):
            info = mlflow.pytorch.log_model(
                result.model,
                name="model",
                signature=signature(),
                pip_requirements=["torch"],
                serialization_format="pickle",
            )
    return info.model_uri
