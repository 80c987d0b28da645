"""The six build stages (and the tune, registry/factory/tune/, for builds that ask). Each takes the BuildContext, does its work in ctx.work_dir,
appends log lines with ctx.log(...) and raises StageError to fail the build.

Nothing here touches the database: registry/factory/runner.py records progress and
publishes the result; so a stage can be re-run from scratch on a retried attempt.

Why this is one long module: the six stages are one pipeline over one BuildContext, read
top to bottom in the order they run; what they lean on already lives apart (graph surgery
in graphs.py, Triton configs in registry/triton_config.py, AUC/logloss in registry/quality.py, the
BuildContext, results and the inputs a stage runs on in context.py).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import onnx

from registry import names, triton_config
from registry.factory import CPU_VARIANTS, GPU_VARIANTS, conf, graphs, numerics, outputs, recipes
from registry.factory.context import (
    ATTACH_DATA,
    BuildContext,
    StageError,
    VariantResult,
    data_or_synthetic,
    load_npz,
)
from registry.factory.gpu import checks as gpu_checks
from registry.factory.gpu import measure as gpu_measure
from registry.factory.gpu import serving as gpu_serving
from registry.factory.gpu.providers import ProviderMissing
from registry.factory.timing import measure
from registry.sizes import human_size

ADAPTER = Path(__file__).resolve().parents[2] / "platform" / "triton" / "onnxruntime_adapter" / "model.py"


# --- 1. canonicalize ---------------------------------------------------------------------------
def _source_from_mlflow(ctx: BuildContext) -> onnx.ModelProto:
    from kernel import mlflow as mlflow_config

    mlflow_config.configure()
    import mlflow
    from mlflow.exceptions import MlflowException

    try:
        info = mlflow.models.get_model_info(ctx.source_uri)
    except (MlflowException, OSError, ValueError) as exc:
        raise StageError(
            f"MLflow model URI {ctx.source_uri!r} does not resolve: {str(exc).splitlines()[0][:300]}",
            "source_unresolvable",
        ) from exc
    flavors = set(info.flavors)
    ctx.log(f"MLflow model {ctx.source_uri} (run {info.run_id}) flavors: {', '.join(sorted(flavors))}")
    if info.run_id and not ctx.validation_set:
        ctx.mlflow_dataset = _mlflow_validation_dataset(ctx, info.run_id)
    if "onnx" in flavors:
        local = Path(mlflow.artifacts.download_artifacts(ctx.source_uri, dst_path=str(ctx.work_dir / "mlflow")))
        _mlflow_example(ctx, local)
        candidates = sorted(local.rglob("*.onnx"))
        if not candidates:
            raise StageError("the MLflow onnx model has no .onnx file", "source_unresolvable")
        return graphs.load(candidates[0])
    if "pytorch" in flavors:
        if info.saved_input_example_info and not (ctx.validation_set or ctx.input_example):
            _mlflow_example(
                ctx, Path(mlflow.artifacts.download_artifacts(ctx.source_uri, dst_path=str(ctx.work_dir / "mlflow")))
            )
        return _export_pytorch(ctx, info)
    raise StageError(f"MLflow model flavors {sorted(flavors)}: only onnx and pytorch are built", "unsupported_flavor")


MLFLOW_VALIDATION_CONTEXTS = ("validation", "eval", "evaluation", "test")


def _mlflow_validation_dataset(ctx: BuildContext, run_id: str) -> Path | None:
    """A dataset logged to the model's run with a validation context (mlflow.log_input) whose
    file is one of that run's own artifacts; anything else (a path or URL elsewhere) is not read."""
    import json
    import posixpath

    import mlflow

    run = mlflow.get_run(run_id)
    root = run.info.artifact_uri.rstrip("/") + "/"
    for item in run.inputs.dataset_inputs:
        context = {t.key: t.value for t in item.tags}.get("mlflow.data.context", "")
        if context not in MLFLOW_VALIDATION_CONTEXTS:
            continue
        try:
            uri = str(json.loads(item.dataset.source or "{}").get("uri", ""))
        except (ValueError, AttributeError):
            uri = ""
        relative = uri[len(root) :] if uri.startswith(root) else ""
        if not relative or posixpath.normpath(relative).startswith("..") or "/../" in f"/{relative}/":
            ctx.log(f"MLflow dataset {item.dataset.name!r} ({context}) is not one of the run's artifacts; not read")
            continue
        local = mlflow.artifacts.download_artifacts(
            run_id=run_id, artifact_path=relative, dst_path=str(ctx.work_dir / "mlflow-data")
        )
        ctx.log(f"MLflow dataset {item.dataset.name!r} ({context}) found in the run's artifacts: {relative}")
        return Path(local)
    return None


def _use_mlflow_dataset(ctx: BuildContext) -> None:
    """Check the run's validation dataset against the signature and validate on it (a
    label column: `label`, else the one column that is no input)."""
    from kernel.errors import PlatformError
    from registry import data_files

    try:
        _, arrays = data_files.read(ctx.mlflow_dataset)
        inputs = {s["name"] for s in ctx.signature["inputs"]}
        extra = [k for k in arrays if k not in inputs]
        label = "label" if "label" in arrays else (extra[0] if len(extra) == 1 else None)
        checked = data_files.check(arrays, ctx.signature, label=label, max_rows=int(conf.get("VERSION_DATA_MAX_ROWS")))
    except PlatformError as exc:
        ctx.log(f"the MLflow validation dataset does not fit the model ({exc.detail}); not using it")
        return
    path = ctx.work_dir / "mlflow_validation.npz"
    np.savez(path, **checked)
    ctx.validation_set = path
    ctx.log(
        f"validating on the MLflow run's dataset: {len(next(iter(checked.values())))} rows"
        + (f", label {label!r}" if label else ", no label")
    )


def _mlflow_example(ctx: BuildContext, local: Path) -> None:
    """The input example logged with the MLflow model (JSON, never pickle), when the version
    carries no data of its own: the build validates and benchmarks on it."""
    if ctx.validation_set or ctx.input_example:
        return
    from mlflow.models import Model

    try:
        meta = Model.load(str(local))
        if not meta.saved_input_example_info or meta.saved_input_example_info.get("type") not in (
            "ndarray",
            "json_object",
        ):
            return
        example = meta.load_input_example(str(local))
    except Exception as exc:  # an unreadable example is not the build's failure: say so and go on
        ctx.log(f"the MLflow model's input example does not load ({str(exc).splitlines()[0][:200]}); not using it")
        return
    if not isinstance(example, dict) or not example:
        return
    path = ctx.work_dir / "mlflow_input_example.npz"
    np.savez(path, **{k: np.asarray(v) for k, v in example.items()})
    ctx.input_example = path
    ctx.log(f"using the input example logged with the MLflow model ({', '.join(sorted(example))})")


def _export_pytorch(ctx: BuildContext, info) -> onnx.ModelProto:
    """Export a trusted MLflow-logged PyTorch model with the legacy TorchScript exporter."""
    import mlflow.pytorch
    import torch

    signature = ctx.expected_signature if ctx.expected_signature.get("inputs") else {}
    if not signature and info.signature is not None:
        signature = {
            "inputs": [
                {"name": s.name, "dtype": str(s.type), "shape": list(s.shape)} for s in info.signature.inputs.inputs
            ],
            "outputs": [
                {"name": s.name, "dtype": str(s.type), "shape": list(s.shape)} for s in info.signature.outputs.inputs
            ],
        }
    if not signature.get("inputs") or not signature.get("outputs"):
        raise StageError(
            "the PyTorch model has no tensor signature in MLflow; log it with one so it can be exported",
            "signature_missing",
        )
    module = mlflow.pytorch.load_model(ctx.source_uri, map_location="cpu").eval()
    ctx.torch_model = module
    # Ids 0 only: any embedding table has a row 0 (the graph is not there yet to bound them).
    example = graphs.seeded_inputs(signature, 4, int_high=1)
    names_in = [s["name"] for s in signature["inputs"]]
    names_out = [s["name"] for s in signature["outputs"]]
    args = tuple(torch.from_numpy(example[n]) for n in names_in)
    out_path = ctx.work_dir / "exported.onnx"
    started = time.monotonic()
    try:
        torch.onnx.export(
            module,
            args,
            str(out_path),
            input_names=names_in,
            output_names=names_out,
            dynamic_axes={n: {0: "batch"} for n in names_in + names_out},
            opset_version=conf.get("BUILD_OPSET"),
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
    ctx.log(
        f"source graph: {len(model.graph.node)} nodes, opset {graphs.default_opset(model)}, producer {model.producer_name!r}"
    )
    ctx.canonical, folded, notes = recipes.canonical_graph(model, ctx.work_dir, opset=conf.get("BUILD_OPSET"))
    for note in notes:
        ctx.log(note)
    ctx.signature = _signature(folded)
    _check_signature(ctx)
    if ctx.mlflow_dataset is not None and not ctx.validation_set:
        _use_mlflow_dataset(ctx)
    ctx.log(
        "signature: "
        + ", ".join(f"{s['name']}:{s['dtype']}{s['shape']}" for s in ctx.signature["inputs"] + ctx.signature["outputs"])
    )
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
                f"signature mismatch: the version declares {side} {sorted(want)} but the graph has {sorted(have)}",
                "signature_mismatch",
            )
        for name, spec in want.items():
            if spec.get("dtype") and spec["dtype"] != have[name]["dtype"]:
                raise StageError(
                    f"signature mismatch: {side[:-1]} {name!r} is {have[name]['dtype']} in the graph, {spec['dtype']} in the version",
                    "signature_mismatch",
                )


def _check_export_fidelity(ctx: BuildContext) -> None:
    import torch

    feeds = data_or_synthetic(ctx, 256, seed=1)[0]
    with torch.inference_mode():
        eager = ctx.torch_model(*[torch.from_numpy(feeds[s["name"]]) for s in ctx.signature["inputs"]])
    eager = (eager[0] if isinstance(eager, (tuple, list)) else eager).numpy()
    exported = graphs.session(ctx.canonical).run(None, feeds)[0]
    err = float(np.max(np.abs(eager.reshape(exported.shape) - exported)))
    ctx.log(f"export fidelity vs PyTorch eager on 256 seeded rows: max abs error {err:.2e}")
    if not np.isfinite(err) or err > 1e-4:
        raise StageError(
            f"the exported graph disagrees with PyTorch eager (max abs error {err:.3g})", "export_mismatch"
        )


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
        except recipes.VariantNotApplicable as exc:
            result.status, result.reason = "skipped", str(exc)
            ctx.log(f"{target}: skipped ({result.reason})")
            continue
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
    rows = conf.get("BUILD_VALIDATION_ROWS")
    data = load_npz(ctx.validation_set)
    if data is not None:  # a validation set as given (no repeats), at most `rows` rows;
        rows = min(rows, len(next(iter(data.values()))))  # an input example is repeated up to `rows`
    return data_or_synthetic(ctx, rows)


def _run(path: Path, feeds: dict, providers=None) -> np.ndarray:
    """The first output over all rows (GPU checks and their tests judge on it)."""
    return gpu_checks.run_rows(graphs.session(path, providers=providers), feeds)


def _log_check(ctx: BuildContext, name: str, result: VariantResult) -> None:
    evidence = result.validation
    if result.status == "validated":
        ctx.log(
            f"{name}: passed on {evidence.get('execution_provider', 'CPUExecutionProvider')} (max abs error {evidence['max_abs_error']:.2e}"
            + (f", AUC delta {evidence['auc_delta']:+.6f})" if "auc_delta" in evidence else ")")
        )
    else:
        ctx.log(f"{name}: {result.status} ({result.reason})")


def _reference(ctx: BuildContext, feeds: dict, synthetic: bool, label_source: str) -> tuple[str, np.ndarray, dict]:
    """(primary output's name, its values as float64, every output) of the original graph on the
    feeds; a graph that does not run, or a non-primary output with NaN, fails the build."""
    try:
        reference_all = outputs.run_all(ctx.canonical, feeds)
    except Exception as exc:  # the original itself cannot run on the inputs: the build fails
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        ctx.log(f"ONNX Runtime: {first}")
        if synthetic:
            raise StageError(
                "the original graph does not run on synthetic inputs derived from the graph; "
                + ATTACH_DATA.format(id=ctx.version_id or "…"),
                "original_failed",
            ) from exc
        raise StageError(
            f"the original graph does not run on {label_source}: check the data matches what the model takes",
            "original_failed",
        ) from exc
    primary, reference = outputs.primary(ctx.signature, reference_all)
    reference = reference.astype(np.float64)
    if len(reference_all) > 1:
        ctx.log(f"{len(reference_all)} outputs: variants judged on {primary!r}, the others checked too")
    for name, value in reference_all.items():  # the primary output is checked below (constant outputs too)
        problem = numerics.degenerate(value, classifier=False) if name != primary and value.dtype.kind == "f" else None
        if problem and "NaN" in problem:
            raise StageError(
                f"output {name!r}: {problem} on {label_source}"
                + ("; " + ATTACH_DATA.format(id=ctx.version_id or "…") if synthetic else ""),
                "degenerate_outputs",
            )
    return primary, reference, reference_all


def validate(ctx: BuildContext) -> None:
    feeds, labels, data_source = _validation_feeds(ctx)
    synthetic = data_source == "synthetic"
    label_source = "synthetic inputs derived from the graph" if synthetic else f"the version's {data_source}"
    primary, reference, reference_all = _reference(ctx, feeds, synthetic, label_source)
    classifier = graphs.is_probability(reference) and ctx.task in ("ctr", "classification", "ranking")
    problem = numerics.degenerate(reference, classifier=classifier)
    if problem:  # NaN/Inf or a constant output: a failed validation with the reason, never an internal error
        raise StageError(
            f"{problem} on {reference.shape[0]} rows of {label_source}"
            + ("; " + ATTACH_DATA.format(id=ctx.version_id or "…") if synthetic else ""),
            "degenerate_outputs",
        )
    true_labels = classifier and labels is not None and np.unique(labels).size > 1  # AUC needs both classes
    skipped = {}
    if not true_labels:
        why = (
            ("no labelled validation set is attached" if labels is None else "the attached labels have one class only")
            if classifier
            else "the model's output is not a probability for a classification task"
        )
        skipped = {"auc": why, "logloss": why}
        ctx.log(f"quality checks skipped: AUC and logloss of the model ({why})")
        labels = None
    if not classifier:
        labels = None
    elif labels is None:
        labels = numerics.labels_from_reference(reference)
        label_source += "; variants compared on labels drawn from the original's probabilities (ranking agreement)"
    if labels is not None and np.unique(labels).size < 2:  # AUC needs both classes: judge by errors instead
        ctx.log(
            f"the labels of {label_source} have one class only: AUC is undefined, variants are judged by their errors"
        )
        labels, classifier = None, False
    ctx.log(f"validating on {reference.shape[0]} rows ({label_source})")
    base = numerics.baseline(reference, labels)
    for name, result in ctx.variants.items():
        if result.status != "pending":
            continue
        common = {
            "rows": int(reference.shape[0]),
            "inputs": "synthetic inputs derived from the graph" if synthetic else data_source,
            "primary_output": primary,
            "data": data_source,
            "quality_checks_skipped": skipped,
            **({f"original_{k}": v for k, v in base.items()} if true_labels else {}),
        }
        if synthetic:
            common["synthetic_inputs"] = [p.describe() for p in ctx.input_plans.values()]
        if name in GPU_VARIANTS:
            # On the provider its Triton config names; skipped with the reason where it cannot be had.
            check = gpu_checks.validate_variant(
                name,
                result.onnx_path,
                feeds,
                reference,
                labels if classifier else None,
                tolerance=conf.tolerance(name),
                signature=ctx.signature,
                work_dir=ctx.work_dir,
                base=base,
                with_cpu_check=name != "tensorrt",
            )
            result.status, result.reason, result.validation = check.status, check.reason, {**common, **check.evidence}
            _log_check(ctx, name, result)
            continue
        _validate_on_cpu(
            ctx, name, result, feeds, (primary, reference, reference_all), labels, base, classifier, common
        )


def _validate_on_cpu(ctx, name, result, feeds, original, labels, base, classifier: bool, common: dict) -> None:
    """One CPU variant against the original's outputs (`original`: primary name, its values, every output)."""
    primary, reference, reference_all = original
    try:
        out_all = outputs.run_all(result.onnx_path, feeds)
        out = outputs.pick(primary, out_all, reference).astype(np.float64)
    except Exception as exc:  # a variant that cannot run is rejected, the build goes on
        result.status, result.reason = "rejected", f"the variant fails to run: {str(exc).splitlines()[0][:300]}"
        result.validation = common
        ctx.log(f"{name}: rejected ({result.reason})")
        return
    evidence = {**common, **numerics.compare(reference, out, labels, base)}
    ok, why, threshold = numerics.judge(evidence, conf.tolerance(name), classifier=classifier)
    if len(reference_all) > 1:
        rest_ok, rest_why, evidence["outputs"] = outputs.others(
            reference_all, out_all, primary, conf.tolerance(name).kind, float(conf.get("BUILD_FP32_MAX_ABS"))
        )
        ok, why = (ok and rest_ok), (why if not ok else rest_why)
    evidence.update(threshold=threshold, passed=bool(ok))
    result.validation = evidence
    result.status, result.reason = ("validated", "") if ok else ("rejected", f"validation failed: {why}")
    _log_check(ctx, name, result)


# --- 5. benchmark ------------------------------------------------------------------------------
def _benchmark_gpu(ctx: BuildContext, name: str, result: VariantResult) -> None:
    batches = conf.bench_batches("BUILD_GPU_BENCH_BATCHES")
    feeds = data_or_synthetic(ctx, max(batches), seed=3)[0]
    try:
        bench = gpu_checks.benchmark_variant(
            name,
            result.onnx_path,
            feeds,
            batches,
            signature=ctx.signature,
            work_dir=ctx.work_dir,
            seconds=float(conf.get("BUILD_BENCH_SECONDS")),
        )
    except ProviderMissing as exc:  # validated on the GPU a moment ago: say so rather than fall back
        result.benchmark = {"skipped": f"not benchmarked: {exc.reason}"}
        ctx.log(f"{name}: benchmark skipped ({exc.reason})")
        return
    result.benchmark = bench
    for mode, per_batch in bench["modes"].items():
        ctx.log(
            f"{name} [{mode}]: "
            + ", ".join(f"b{b} p50 {s['p50_ms']:.3f} ms {s['throughput_p50_rps']:,.0f}/s" for b, s in per_batch.items())
        )
    for mode, note in bench["notes"].items():
        ctx.log(f"{name} [{mode}]: {note}")


def benchmark(ctx: BuildContext) -> None:
    threads = int(conf.get("BUILD_BENCH_THREADS"))
    batches = conf.bench_batches()
    seconds, max_iters = float(conf.get("BUILD_BENCH_SECONDS")), int(conf.get("BUILD_BENCH_MAX_ITERS"))
    feeds, _, data_source = data_or_synthetic(ctx, max(batches), seed=3)
    ctx.log(
        "benchmark inputs: "
        + ("synthetic inputs derived from the graph" if data_source == "synthetic" else f"the version's {data_source}")
    )
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
        out_names = [o.name for o in sess.get_outputs()]
        per_batch = {}
        for batch in batches:
            part = graphs.slice_rows(feeds, 0, batch)
            per_batch[str(batch)] = measure(
                lambda part=part: sess.run(out_names, part), batch, seconds=seconds, max_iters=max_iters
            )
        bench = {
            "threads": threads,
            "batches": per_batch,
            "runtime": "onnxruntime CPUExecutionProvider",
            "data": data_source,
        }
        if ctx.eager_benchmark:
            bench["eager"] = ctx.eager_benchmark
            bench["speedup_vs_eager"] = {
                b: per_batch[b]["throughput_rps"] / ctx.eager_benchmark[b]["throughput_rps"] for b in per_batch
            }
        result.benchmark = bench
        ctx.log(
            f"{name}: "
            + ", ".join(
                f"b{b} p50 {per_batch[str(b)]['p50_ms']:.3f} ms {per_batch[str(b)]['throughput_rps']:.0f}/s"
                for b in batches
            )
        )


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
            ctx.log(
                f"{name}: max batch {plan['max_batch_size']}, preferred {plan['preferred_batch_sizes']} ({plan['basis']})"
            )
        config = triton_config.build_config(
            name=model_name,
            signature=ctx.signature,
            variant=name,
            max_batch_size=int(conf.get("BUILD_MAX_BATCH_SIZE")),
            cpu_threads=int(conf.get("BUILD_BENCH_THREADS")),
            gpu_plan=plan,
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


def tune(ctx: BuildContext) -> None:
    from registry.factory.tune.stage import tune as tune_stage

    tune_stage(ctx)


STAGE_FUNCTIONS = {
    "canonicalize": canonicalize,
    "optimize": optimize,
    "variants": variants,
    "validate": validate,
    "benchmark": benchmark,
    "package": package,
    "tune": tune,
}
