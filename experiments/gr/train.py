"""The reference generative recommender, end to end: the world's items get semantic ids by
residual k-means over their content vectors (collisions resolved), users' sequences are
written in those ids, the HSTU-style model learns to generate the next item's id, and its
graphs, codebook and a holdout of users make the bundle a version holds (registry/gr/bundle.py).
The catalog (item ids and their semantic ids) is returned beside it: it is registered as a
catalog version of its own. No Django; `manage.py train_gr_model` logs and registers.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from experiments.gr.model import GenerativeRecommender, GRConfig, loss
from experiments.gr.world import World, WorldConfig, expected_hit_rate, oracle_hit_rate
from registry.gr import runtime
from registry.gr.bundle import CODEBOOK, FORMAT, HOLDOUT, MANIFEST
from registry.gr.semantic_ids import fit_codebook, semantic_ids
from registry.gr.trie import compile_trie

TINY = {  # the tests' model: seconds on one core
    "world": WorldConfig(items=160, topics=8, max_length=16, min_length=6),
    "model": GRConfig(codes_per_level=8, d_model=32, heads=2, layers=2, max_history=24, dropout=0.0),
    "users": 300,
    "epochs": 4,
    "holdout_users": 48,
}


@dataclass
class GRTrainResult:
    model: GenerativeRecommender
    world: World
    codebook: np.ndarray  # [levels, codes, dim]
    semantic_ids: np.ndarray  # [items, levels], row i is world item row i
    holdout: dict  # world.holdout(): rows, lengths, next row, next-item distribution
    metrics: dict
    params: dict

    @property
    def item_ids(self) -> np.ndarray:
        return self.world.item_ids


def _batches(sequences: list[np.ndarray], ids: np.ndarray, window: int, rng: np.random.Generator):
    """(codes int64 [U, T, levels], lengths [U]) of every user, a random window of at most
    `window` + 1 items each (the model's positions are 0..window-1)."""
    longest = min(max(len(s) for s in sequences), window + 1)
    codes = np.zeros((len(sequences), longest, ids.shape[1]), dtype=np.int64)
    lengths = np.zeros(len(sequences), dtype=np.int64)
    for u, rows in enumerate(sequences):
        if len(rows) > window + 1:
            start = int(rng.integers(0, len(rows) - window))
            rows = rows[start : start + window + 1]
        codes[u, : len(rows)] = ids[rows]
        lengths[u] = len(rows)
    return torch.from_numpy(codes), torch.from_numpy(lengths)


def train(
    world_config: WorldConfig | None = None,
    model_config: GRConfig | None = None,
    *,
    users: int = 3000,
    epochs: int = 8,
    batch_size: int = 64,
    lr: float = 4e-3,
    holdout_users: int = 300,
    seed: int = 0,
    threads: int = 1,
) -> GRTrainResult:
    started = time.monotonic()
    world = World(world_config or WorldConfig())
    config = model_config or GRConfig()
    torch.manual_seed(seed)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        codebook = fit_codebook(
            world.item_vectors, levels=config.levels, codes_per_level=config.codes_per_level, seed=seed
        )
        ids = semantic_ids(world.item_vectors, codebook)
        sequences, _ = world.sequences(users, seed=seed + 1)
        rng = np.random.default_rng(seed)
        model = GenerativeRecommender(config)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
        steps = epochs * -(-users // batch_size)
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps, pct_start=0.15)
        last = float("nan")
        for _ in range(epochs):
            model.train()
            codes, lengths = _batches(sequences, ids, config.max_history, rng)
            order = torch.from_numpy(rng.permutation(users))
            for start in range(0, users, batch_size):
                picked = order[start : start + batch_size]
                value = loss(model, codes[picked], lengths[picked])
                optimizer.zero_grad()
                value.backward()
                optimizer.step()
                schedule.step()
                last = float(value.detach())
        model.eval()
    finally:
        torch.set_num_threads(previous_threads)
    holdout = world.holdout(holdout_users, seed=seed + 2)
    result = GRTrainResult(
        model=model,
        world=world,
        codebook=codebook,
        semantic_ids=ids,
        holdout=holdout,
        metrics={"train_loss": last, "train_seconds": time.monotonic() - started},
        params={
            **{f"world_{k}": v for k, v in asdict(world.config).items()},
            **config.as_dict(),
            "users": users,
            "epochs": epochs,
            "batch_size": batch_size,
            "lr": lr,
            "seed": seed,
        },
    )
    return result


def recommend_rows(result: GRTrainResult, graphs: runtime.Graphs, *, width: int = 32, top_k: int = 10, trie=True):
    """The item rows the graphs recommend to each holdout user (and the illegal beams seen)."""
    config = result.model.config
    items = runtime.ItemMap(np.arange(len(result.semantic_ids)), result.semantic_ids)  # ids are rows here
    compiled = compile_trie(result.semantic_ids, codes_per_level=config.codes_per_level) if trie else None
    rows, illegal = [], 0
    holdout = result.holdout
    for u in range(len(holdout["length"])):
        history = holdout["history"][u, : holdout["length"][u]][-config.max_history :]
        past_k, past_v = graphs.encode(None, None, result.semantic_ids[history])
        found, _, bad, _, _ = runtime.recommend(
            graphs,
            past_k,
            past_v,
            width=width,
            top_k=top_k,
            levels=config.levels,
            codes_per_level=config.codes_per_level,
            trie=compiled,
            items=items,
        )
        rows.append(found)
        illegal += bad
    return rows, illegal


def evaluate(result: GRTrainResult, bundle_dir: Path, *, width: int = 32) -> dict:
    """HR@10 of the exported graphs and of the oracle on the holdout (expected, exact)."""
    graphs = runtime.Graphs({role: Path(bundle_dir) / name for role, name in runtime.GRAPH_FILES.items()})
    rows, illegal = recommend_rows(result, graphs, width=width)
    return {
        "hr_at_10": expected_hit_rate(result.holdout["next_probs"], rows),
        "oracle_hr_at_10": oracle_hit_rate(result.holdout["next_probs"]),
        "illegal_ids": float(illegal),
    }


def write_bundle(result: GRTrainResult, directory: Path) -> Path:
    """The version's bundle (registry/gr/bundle.py's layout) in `directory` (created)."""
    from experiments.gr.export import export_graphs

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = result.model.config
    export_graphs(result.model, directory)
    np.savez(directory / CODEBOOK, centroids=result.codebook.astype(np.float32))
    holdout = result.holdout
    item_history = np.where(holdout["history"] >= 0, result.item_ids[holdout["history"].clip(0)], -1)
    np.savez(
        directory / HOLDOUT,
        history=item_history,
        length=holdout["length"],
        next_item=result.item_ids[holdout["next_row"]],
    )
    manifest = {
        "format": FORMAT,
        "levels": config.levels,
        "codes_per_level": config.codes_per_level,
        "layers": config.layers,
        "d_model": config.d_model,
        "max_history": config.max_history,
    }
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2))
    return directory


def catalog_arrays(result: GRTrainResult) -> dict[str, np.ndarray]:
    """The catalog version's arrays: item ids, their semantic ids and content vectors."""
    return {
        "item_id": result.item_ids,
        "semantic_id": result.semantic_ids,
        "embedding": result.world.item_vectors.astype(np.float32),
    }


def log_to_mlflow(
    result: GRTrainResult, bundle_dir: Path, *, experiment: str, run_name: str = "", team: str = ""
) -> str:
    """Params, metrics and the bundle (as the run's `bundle/` artifacts); returns the run id."""
    import mlflow

    from kernel import mlflow as mlflow_config

    mlflow_config.configure()
    tags = {mlflow_config.TEAM_TAG: team} if team else {}
    experiment_id = mlflow_config.experiment_id(experiment, team=team or None)
    with mlflow.start_run(experiment_id=experiment_id, run_name=run_name or None, tags=tags) as run:
        mlflow.log_params(result.params)
        mlflow.log_metrics({k: float(v) for k, v in result.metrics.items()})
        mlflow.log_artifacts(str(bundle_dir), artifact_path="bundle")
    return run.info.run_id
