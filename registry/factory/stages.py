"""The six build stages. Each takes the BuildContext, does its work in ctx.work_dir,
appends log lines with ctx.log(...) and raises StageError to fail the build.

Nothing here touches the database: registry/factory/runner.py records progress and
publishes the result; so a stage can be re-run from scratch on a retried attempt.

Why this is one long module: the six stages are one pipeline over one BuildContext, read
top to bottom in the order they run; what they lean on already lives apart (graph surgery
in graphs.py, Triton configs in registry/triton_config.py, AUC/logloss in registry/quality.py).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx

from registry import names, triton_config
from registry.sizes import human_size
from registry.factory import CPU_VARIANTS, GPU_VARIANTS, conf, graphs, numerics, recipes
from registry.factory.gpu import checks as gpu_checks
from registry.factory.gpu import measure as gpu_measure
from registry.factory.gpu import serving as gpu_serving
from registry.factory.gpu.providers import ProviderMissing
from registry.factory.timing import measure

ADAPTER = Path(__file__).resolve().parents[2] / "platform" / "triton" / "onnxruntime_adapter" / "model.py"


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
    validation_set: Path | None = None
    log: Callable[[str], None] = print
    # filled by the stages
    canonical: Path | None = None
    fused: Path | None = None
    optimized: Path | None = None
    signature: dict = field(default_factory=dict)
    torch_model: object | None = None
    variants: dict[str, VariantResult] = field(default_factory=dict)
    eager_benchmark: dict = field(default_factory=dict)


# --- 1. canonicalize ---------------------------------------------------------------------------
def _source_from_mlflow(ctx: BuildContext) -> onnx.ModelProto:
    from config import mlflow as mlflow_config

    mlflow_config.configure()
    import mlflow
    from mlflow.exceptions import MlflowException

    try:
        info = mlflow.models.get_model_info(ctx.source_uri)
    except (MlflowException, OSError, ValueError) as exc:
        raise StageError(f"MLflow model URI {ctx.source_uri!r} does not resolve: {str(exc).splitlines()[0][:300]}", "source_unresolvable") from exc
    flavors = set(info.flavors)
    ctx.log(f"MLflow model {ctx.source_uri} (run {info.run_id}) flavors: {', '.join(sorted(flavors))}")
    if "onnx" in flavors:
        local = Path(mlflow.artifacts.download_artifacts(ctx.source_uri, dst_path=str(ctx.work_dir / "mlflow")))
        candidates = sorted(local.rglob("*.onnx"))
        if not candidates:
            raise StageError("the MLflow onnx model has no .onnx file", "source_unresolvable")
        return graphs.load(candidates[0])
    if "pytorch" in flavors:
        return _export_pytorch(ctx, info)
    raise StageError(f"MLflow model flavors {sorted(flavors)}: only onnx and pytorch are built", "unsupported_flavor")


def _export_pytorch(ctx: BuildContext, info) -> onnx.ModelProto:
    """Export a trusted MLflow-logged PyTorch model with the legacy TorchScript exporter."""
    import mlflow.pytorch
    import torch

    signature = ctx.expected_signature if ctx.expected_signature.get("inputs") else {}
    if not signature and info.signature is not None:
        signature = {
            "inputs": [{"name": s.name, "dtype": str(s.type), "shape": list(s.shape)} for s in info.signature.inputs.inputs],
            "outputs": [{"name": s.name, "dtype": str(s.type), "shape": list(s.shape)} for s in info.signature.outputs.inputs],
        }
    if not signature.get("inputs") or not signature.get("outputs"):
        raise StageError("the PyTorch model has no tensor signature in MLflow; log it with one so it can be exported", "signature_missing")
    module = mlflow.pytorch.load_model(ctx.source_uri, map_location="cpu").eval()
    ctx.torch_model = module
    example = graphs.seeded_inputs(signature, 4, int_high=conf.get("BUILD_INT_INPUT_HIGH"))
    names_in = [s["name"] for s in signature["inputs"]]
    names_out = [s["name"] for s in signature["outputs"]]
    args = tuple(torch.from_numpy(example[n]) for n in names_in)
    out_path = ctx.work_dir / "exported.onnx"
    started = time.monotonic()
    try:
        torch.onnx.export(
            module, args, str(out_path), input_names=names_in, output_names=names_out,
            dynamic_axes={n: {0: "batch"} for n in names_in + names_out}, opset_version=conf.get("BUILD_OPSET"),
            dynamo=False,
        )
    except Exception as exc:  # exporter errors come in many types
        raise StageError(f"torch.onnx.export failed: {str(exc).splitlines()[0][:300]}", "export_failed") from exc
    ctx.log(f"exported PyTorch -> ONNX opset {conf.get('BUILD_OPSET')} in {time.monotonic() - started:.1f}s")
    return graphs.load(out_path)


def canonicalize(ctx: BuildContext) -> None:
    if ctx.source == "upload":
        if not ctx.source_path or not ctx.source_path.exists():
            raise StageError("the uploaded ONNX file is missing from the artifact store", "source_missing")
        model = graphs.load(ctx.source_path)
    else:
        model = _source_from_mlflow(ctx)
    ctx.log(f"source graph: {len(model.graph.node)} nodes, opset {graphs.default_opset(model)}, producer {model.producer_name!r}")
    ctx.canonical, folded, notes = recipes.canonical_graph(model, ctx.work_dir, opset=conf.get("BUILD_OPSET"))
    for note in notes:
        ctx.log(note)
    ctx.signature = _signature(folded)
    _check_signature(ctx)
    ctx.log("signature: " + ", ".join(f"{s['name']}:{s['dtype']}{s['shape']}" for s in ctx.signature["inputs"] + ctx.signature["outputs"]))
    if ctx.torch_model is not None:
        _check_export_fidelity(ctx)


def _signature(model: onnx.ModelProto) -> dict:
    from registry.onnx_files import signature_of

    return signature_of(model)


def _check_signature(ctx: BuildContext) -> None:
    expected = ctx.expected_signature or {}
    for side in ("inputs", "outputs"):
        want = {s["name"]: s for s in expected.get(side) or []}
        if not want:
            continue
        have = {s["name"]: s for s in ctx.signature[side]}
        if set(want) != set(have):
            raise StageError(
                f"signature mismatch: the version declares {side} {sorted(want)} but the graph has {sorted(have)}", "signature_mismatch"
            )
        for name, spec in want.items():
            if spec.get("dtype") and spec["dtype"] != have[name]["dtype"]:
                raise StageError(
                    f"signature mismatch: {side[:-1]} {name!r} is {have[name]['dtype']} in the graph, {spec['dtype']} in the version",
                    "signature_mismatch",
                )


def _check_export_fidelity(ctx: BuildContext) -> None:
    import torch

    feeds = graphs.seeded_inputs(ctx.signature, 256, seed=1, int_high=conf.get("BUILD_INT_INPUT_HIGH"))
    with torch.inference_mode():
        eager = ctx.torch_model(*[torch.from_numpy(feeds[s["name"]]) for s in ctx.signature["inputs"]])
    eager = (eager[0] if isinstance(eager, (tuple, list)) else eager).numpy()
    exported = graphs.session(ctx.canonical).run(None, feeds)[0]
    err = float(np.max(np.abs(eager.reshape(exported.shape) - exported)))
    ctx.log(f"export fidelity vs PyTorch eager on 256 seeded rows: max abs error {err:.2e}")
    if not np.isfinite(err) or err > 1e-4:
        raise StageError(f"the exported graph disagrees with PyTorch eager (max abs error {err:.3g})", "export_mismatch")


# --- 2. optimize -------------------------------------------------------------------------------
def optimize(ctx: BuildContext) -> None:
    ctx.fused, ctx.optimized, notes = recipes.optimized_graphs(ctx.canonical, ctx.work_dir)
    for note in notes:
        ctx.log(note)


# --- 3. variants -------------------------------------------------------------------------------
def variants(ctx: BuildContext) -> None:
    for target in ctx.targets:
        result = VariantResult(name=target)
        ctx.variants[target] = result
        path = ctx.work_dir / f"{target}.onnx"
        try:
            recipes.make_variant(target, fused=ctx.fused, optimized=ctx.optimized, dest=path)
        except recipes.VariantRefused as exc:
            result.status, result.reason = "rejected", str(exc)
            ctx.log(f"{target}: {result.reason}")
            continue
        except KeyError:
            raise StageError(f"unknown target {target!r}", "unknown_target") from None
        result.onnx_path = path
        result.size_bytes = path.stat().st_size
        ctx.log(f"{target}: model file {human_size(result.size_bytes)}")


# --- 4. validate -------------------------------------------------------------------------------
def _validation_feeds(ctx: BuildContext) -> tuple[dict, np.ndarray | None, str]:
    if ctx.validation_set and ctx.validation_set.exists():
        with np.load(ctx.validation_set, allow_pickle=False) as data:
            names = [s["name"] for s in ctx.signature["inputs"]]
            if all(n in data.files for n in names) and "label" in data.files:
                rows = min(len(data["label"]), conf.get("BUILD_VALIDATION_ROWS"))
                return {n: data[n][:rows] for n in names}, data["label"][:rows].astype(np.float64), "validation set"
        ctx.log("the version's validation set does not match the signature; using seeded inputs")
    rows = conf.get("BUILD_VALIDATION_ROWS")
    return graphs.seeded_inputs(ctx.signature, rows, int_high=conf.get("BUILD_INT_INPUT_HIGH")), None, "seeded sample"


def _run(path: Path, feeds: dict, providers=None) -> np.ndarray:
    return gpu_checks.run_rows(graphs.session(path, providers=providers), feeds)


def _log_check(ctx: BuildContext, name: str, result: VariantResult) -> None:
    evidence = result.validation
    if result.status == "validated":
        ctx.log(f"{name}: passed on {evidence.get('execution_provider', 'CPUExecutionProvider')} (max abs error {evidence['max_abs_error']:.2e}"
                + (f", AUC delta {evidence['auc_delta']:+.6f})" if "auc_delta" in evidence else ")"))
    else:
        ctx.log(f"{name}: {result.status} ({result.reason})")


def validate(ctx: BuildContext) -> None:
    feeds, labels, label_source = _validation_feeds(ctx)
    try:
        reference = _run(ctx.canonical, feeds).astype(np.float64)
    except Exception as exc:  # the original itself cannot run on the sample: the build fails
        raise StageError(f"the original graph fails on {label_source} inputs: {str(exc).splitlines()[0][:300]}", "original_failed") from exc
    if not np.all(np.isfinite(reference)):
        raise StageError(f"the original graph outputs NaN/Inf on {label_source} inputs", "original_nan")
    classifier = graphs.is_probability(reference) and ctx.task in ("ctr", "classification", "ranking")
    if not classifier:
        labels = None
    elif labels is None:
        labels = numerics.labels_from_reference(reference)
        label_source += " with labels drawn from the original's probabilities"
    ctx.log(f"validating on {reference.shape[0]} rows ({label_source})")
    base = numerics.baseline(reference, labels)
    for name, result in ctx.variants.items():
        if result.status != "pending":
            continue
        common = {"rows": int(reference.shape[0]), "inputs": label_source, **{f"original_{k}": v for k, v in base.items()}}
        if name in GPU_VARIANTS:
            # On the provider its Triton config names; skipped with the reason where it cannot be had.
            check = gpu_checks.validate_variant(
                name, result.onnx_path, feeds, reference, labels if classifier else None, tolerance=conf.tolerance(name),
                signature=ctx.signature, work_dir=ctx.work_dir, base=base, with_cpu_check=name != "tensorrt",
            )
            result.status, result.reason, result.validation = check.status, check.reason, {**common, **check.evidence}
            _log_check(ctx, name, result)
            continue
        try:
            out = _run(result.onnx_path, feeds).astype(np.float64)
        except Exception as exc:  # a variant that cannot run is rejected, the build goes on
            result.status, result.reason = "rejected", f"the variant fails to run: {str(exc).splitlines()[0][:300]}"
            result.validation = common
            ctx.log(f"{name}: rejected ({result.reason})")
            continue
        evidence = {**common, **numerics.compare(reference, out, labels, base)}
        ok, why, threshold = numerics.judge(evidence, conf.tolerance(name), classifier=classifier)
        evidence.update(threshold=threshold, passed=bool(ok))
        result.validation = evidence
        result.status, result.reason = ("validated", "") if ok else ("rejected", f"validation failed: {why}")
        _log_check(ctx, name, result)


# --- 5. benchmark ------------------------------------------------------------------------------
def _benchmark_gpu(ctx: BuildContext, name: str, result: VariantResult) -> None:
    batches = conf.bench_batches("BUILD_GPU_BENCH_BATCHES")
    feeds = graphs.seeded_inputs(ctx.signature, max(batches), seed=3, int_high=conf.get("BUILD_INT_INPUT_HIGH"))
    try:
        bench = gpu_checks.benchmark_variant(name, result.onnx_path, feeds, batches, signature=ctx.signature, work_dir=ctx.work_dir,
                                             seconds=float(conf.get("BUILD_BENCH_SECONDS")))
    except ProviderMissing as exc:  # validated on the GPU a moment ago: say so rather than fall back
        result.benchmark = {"skipped": f"not benchmarked: {exc.reason}"}
        ctx.log(f"{name}: benchmark skipped ({exc.reason})")
        return
    result.benchmark = bench
    for mode, per_batch in bench["modes"].items():
        ctx.log(f"{name} [{mode}]: " + ", ".join(f"b{b} p50 {s['p50_ms']:.3f} ms {s['throughput_p50_rps']:,.0f}/s" for b, s in per_batch.items()))
    for mode, note in bench["notes"].items():
        ctx.log(f"{name} [{mode}]: {note}")


def benchmark(ctx: BuildContext) -> None:
    threads = int(conf.get("BUILD_BENCH_THREADS"))
    batches = conf.bench_batches()
    seconds, max_iters = float(conf.get("BUILD_BENCH_SECONDS")), int(conf.get("BUILD_BENCH_MAX_ITERS"))
    feeds = graphs.seeded_inputs(ctx.signature, max(batches), seed=3, int_high=conf.get("BUILD_INT_INPUT_HIGH"))
    if ctx.torch_model is not None:
        import torch

        torch.set_num_threads(threads)
        tensors = {k: torch.from_numpy(v) for k, v in feeds.items()}
        names = [s["name"] for s in ctx.signature["inputs"]]
        for batch in batches:
            args = [tensors[n][:batch] for n in names]

            def eager_call(args=args):
                with torch.inference_mode():
                    return ctx.torch_model(*args)

            ctx.eager_benchmark[str(batch)] = measure(eager_call, batch, seconds=seconds, max_iters=max_iters)
        ctx.log("PyTorch eager: " + ", ".join(f"b{b} {ctx.eager_benchmark[str(b)]['p50_ms']:.3f} ms" for b in batches))
    for name, result in ctx.variants.items():
        if name in GPU_VARIANTS and result.status == "skipped":
            result.benchmark = {"skipped": result.reason}
        if result.status != "validated":
            continue
        if name in GPU_VARIANTS:
            _benchmark_gpu(ctx, name, result)
            continue
        sess = graphs.session(result.onnx_path, threads=threads)
        out_name = sess.get_outputs()[0].name
        per_batch = {}
        for batch in batches:
            part = graphs.slice_rows(feeds, 0, batch)
            per_batch[str(batch)] = measure(lambda part=part: sess.run([out_name], part), batch, seconds=seconds, max_iters=max_iters)
        bench = {"threads": threads, "batches": per_batch, "runtime": "onnxruntime CPUExecutionProvider"}
        if ctx.eager_benchmark:
            bench["eager"] = ctx.eager_benchmark
            bench["speedup_vs_eager"] = {
                b: per_batch[b]["throughput_rps"] / ctx.eager_benchmark[b]["throughput_rps"] for b in per_batch
            }
        result.benchmark = bench
        ctx.log(f"{name}: " + ", ".join(f"b{b} p50 {per_batch[str(b)]['p50_ms']:.3f} ms {per_batch[str(b)]['throughput_rps']:.0f}/s" for b in batches))


# --- 6. package --------------------------------------------------------------------------------
def package(ctx: BuildContext) -> None:
    """Stage one Triton model dir per servable variant (GPU variants too, marked skipped)."""
    for name, result in ctx.variants.items():
        packable = result.status == "validated" or (name in GPU_VARIANTS and result.status == "skipped")
        if not packable:
            continue
        model_name = names.triton_model_name(ctx.model_name, ctx.version, name)
        staged = ctx.work_dir / "package" / model_name
        (staged / "1").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(result.onnx_path, staged / "1" / "model.onnx")
        plan = None
        if name in CPU_VARIANTS:
            shutil.copyfile(ADAPTER, staged / "1" / "model.py")
        else:
            # Batching and accelerators from this variant's measured GPU curve (a stated default without one).
            plan = gpu_serving.plan(name, ctx.signature, curve=gpu_measure.curve(result.benchmark))
            ctx.log(f"{name}: max batch {plan['max_batch_size']}, preferred {plan['preferred_batch_sizes']} ({plan['basis']})")
        config = triton_config.build_config(
            name=model_name, signature=ctx.signature, variant=name, max_batch_size=int(conf.get("BUILD_MAX_BATCH_SIZE")),
            cpu_threads=int(conf.get("BUILD_BENCH_THREADS")), gpu_plan=plan,
        )
        text = triton_config.to_text(config)
        if triton_config.parse(text) != config:
            raise StageError(f"{name}: config.pbtxt does not parse back to the same ModelConfig", "config_roundtrip")
        (staged / "config.pbtxt").write_text(text)
        result.package_dir = staged
        result.size_bytes = sum(p.stat().st_size for p in staged.rglob("*") if p.is_file())
        if result.status == "validated":
            result.status = "servable"
        ctx.log(f"{name}: packaged {model_name} ({human_size(result.size_bytes)})")


STAGE_FUNCTIONS = {
    "canonicalize": canonicalize,
    "optimize": optimize,
    "variants": variants,
    "validate": validate,
    "benchmark": benchmark,
    "package": package,
}
