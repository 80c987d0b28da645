"""What every build stage shares: the BuildContext it works on, a variant's result, the error
that fails a build, and the inputs a stage runs a model on (the version's data, else synthetic
inputs derived from the graph). The six stages (stages.py) and the tune (tune/stage.py) import
it; it imports neither, so they do not import each other for it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from registry.factory import conf, graphs, input_bounds


class StageError(Exception):
    def __init__(self, message: str, code: str = "build_failed"):
        super().__init__(message)
        self.code = code


@dataclass
class VariantResult:
    name: str
    onnx_path: Path | None = None
    status: str = "pending"  # pending -> servable | rejected | skipped
    reason: str = ""
    validation: dict = field(default_factory=dict)
    benchmark: dict = field(default_factory=dict)
    package_dir: Path | None = None
    size_bytes: int | None = None
    graphs: dict | None = None  # a generative recommender's variant: its graph files by role


@dataclass
class BuildContext:
    work_dir: Path
    model_name: str
    version: int
    task: str
    source: str  # upload | mlflow
    framework: str  # onnx | pytorch
    source_path: Path | None
    source_uri: str
    expected_signature: dict
    targets: list[str]
    version_id: int | None = None
    validation_set: Path | None = None  # NPZ: one array per input name (+ "label")
    input_example: Path | None = None  # NPZ: one array per input name
    log: Callable[[str], None] = print
    # filled by the stages
    canonical: Path | None = None
    fused: Path | None = None
    optimized: Path | None = None
    signature: dict = field(default_factory=dict)
    torch_model: object | None = None
    variants: dict[str, VariantResult] = field(default_factory=dict)
    eager_benchmark: dict = field(default_factory=dict)
    mlflow_dataset: Path | None = None  # a validation dataset file logged to the MLflow run
    input_plans: dict | None = None  # synthetic-input plans, derived once from the canonical graph
    tune: dict | None = None  # the build's tune request (Build.tune), None when it asked for none
    progress: Callable[[float], None] = lambda share: None  # how far the running stage is (0-1)
    # A generative recommender's build: {"catalog_dir", "catalog", "catalog_version"} (runner.py),
    # and what its stages find (manifest, holdout, items, trie, reference beams).
    gr: dict | None = None


ATTACH_DATA = (
    "attach an input example or a labelled validation set to the version "
    "(POST /api/v1/versions/{id}/data/) and build again"
)


def synthetic_inputs(ctx: BuildContext, rows: int, *, seed: int = 20240611) -> dict:
    """Inputs the model can take, derived from the canonical graph (registry/factory/input_bounds.py)."""
    if ctx.input_plans is None:
        try:
            ctx.input_plans = input_bounds.plan_inputs(
                onnx.load(str(ctx.canonical)), int_high=int(conf.get("BUILD_INT_INPUT_HIGH"))
            )
        except input_bounds.InputsUnbounded as exc:
            raise StageError(
                f"no data is attached and safe synthetic inputs cannot be derived from the graph: {exc}; "
                + ATTACH_DATA.format(id=ctx.version_id or "…"),
                "inputs_unbounded",
            ) from exc
        ctx.log(
            "no data attached: synthetic inputs derived from the graph: "
            + "; ".join(p.describe() for p in ctx.input_plans.values())
        )
    return input_bounds.synthesize(
        ctx.input_plans, rows, seed=seed, dynamic_size=int(conf.get("BUILD_DYNAMIC_DIM_SIZE"))
    )


def load_npz(path: Path | None) -> dict | None:
    if not path or not path.exists():
        return None
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def tile(arrays: dict, rows: int) -> dict:
    """`rows` rows from the data, repeated when it has fewer."""
    have = len(next(iter(arrays.values())))
    reps = -(-rows // have)
    return {
        k: np.ascontiguousarray(np.concatenate([v] * reps)[:rows]) if reps > 1 else np.ascontiguousarray(v[:rows])
        for k, v in arrays.items()
    }


def data_or_synthetic(ctx: BuildContext, rows: int, *, seed: int = 20240611) -> tuple[dict, np.ndarray | None, str]:
    """(feeds, labels or None, what they are): the validation set, else the input example,
    else synthetic inputs. Data rows are repeated up to `rows` for benchmarks."""
    names = [s["name"] for s in ctx.signature["inputs"]]
    for path, what in ((ctx.validation_set, "validation set"), (ctx.input_example, "input example")):
        data = load_npz(path)
        if data is None:
            continue
        if not all(n in data for n in names):
            ctx.log(f"the version's {what} does not have every input ({', '.join(names)}); not using it")
            continue
        labels = data["label"].astype(np.float64).reshape(-1) if "label" in data else None
        dtypes = {s["name"]: graphs.numpy_dtype(s["dtype"]) for s in ctx.signature["inputs"]}
        feeds = {n: np.asarray(data[n]).astype(dtypes[n], copy=False) for n in names}
        if labels is not None:
            feeds["__label__"] = labels
        feeds = tile(feeds, rows)
        labels = feeds.pop("__label__", None)
        return feeds, labels, what
    return synthetic_inputs(ctx, rows, seed=seed), None, "synthetic"
