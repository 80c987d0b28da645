"""python -m bench gpu: the GPU check, runnable on any host.

    python -m bench gpu ARTIFACT_DIR…            check the factory's packaged variants
    python -m bench gpu --reference [--rows N]   make the reference ranker's artifacts here, then check them

Needs numpy, onnx, scipy and onnxruntime(-gpu) only (torch for --reference); no Django,
no tritonclient. For each variant: the numerical comparison with the CPU fp32 reference
on the validation data (max abs error, AUC and logloss deltas), on the execution provider
its Triton config names (checked with `session.get_providers()`); then p50/p99 latency and
rows/s at batch 1/32/512/4096 per way of running it (CUDA graph + I/O binding where the
graph allows it, I/O binding, host I/O), the CPU int8 variant on every core for
comparison, and the serving plan the factory derives from the curves. A GPU row that
cannot run here is printed as skipped with the reason. Writes var/bench/gpu.json
(BENCH_DIR overrides the folder).

ARTIFACT_DIR is a Triton model directory as the factory packages it
(`{model}__v{version}__{variant}/1/model.onnx`), or VARIANT=DIR for one named otherwise
(a content-addressed copy). The CPU fp32 reference is --reference-onnx, else the onnx-fp32
artifact (else the onnx-fp32-gpu one) run on the CPU; the data is --validation (an .npz
with one array per input and `label`, the format of a version's validation set), else
seeded inputs with labels drawn from the reference's probabilities, as the build does.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import print_table, write_json
from registry.factory import CPU_VARIANTS, GPU_VARIANTS, VARIANTS, graphs, numerics, recipes
from registry.factory.gpu import checks, serving
from registry.factory.gpu.measure import best_mode, curve, measure_variant
from registry.factory.gpu.providers import CPU, CUDA, ProviderMissing, open_session, runtime_line

ORT_DTYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(double)": "float64",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(bool)": "bool",
}
GOALS = {"fp16_auc_delta": 1e-4, "fp16_b1_p50_ms": 0.06, "fp16_b4096_rps": 20e6}
STARTED = time.monotonic()


class CliError(Exception):
    pass


def progress(line: str) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f}s] {line}", flush=True)


def _args(argv):
    parser = argparse.ArgumentParser(prog="python -m bench gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("artifacts", nargs="*", help="Triton model directories (or VARIANT=DIR)")
    parser.add_argument(
        "--reference", action="store_true", help="train the reference ranker here and make its artifacts first"
    )
    parser.add_argument("--rows", type=int, default=200_000, help="--reference: training rows")
    parser.add_argument("--vocab", type=int, default=100_000, help="--reference: hash buckets per table")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--validation", type=Path, help=".npz with one array per input and `label`")
    parser.add_argument("--validation-rows", type=int, default=20_000)
    parser.add_argument(
        "--reference-onnx", type=Path, help="the CPU fp32 reference graph (default: the onnx-fp32 artifact)"
    )
    parser.add_argument("--batches", default="1,32,512,4096")
    parser.add_argument("--seconds", type=float, default=0.5, help="measuring time per (variant, mode, batch)")
    parser.add_argument("--cpu-threads", type=int, default=os.cpu_count() or 1, help="threads of the CPU rows")
    parser.add_argument("--work", type=Path, help="work folder (default: a temporary one, removed at the end)")
    args = parser.parse_args(argv)
    if not args.artifacts and not args.reference:
        parser.error("give ARTIFACT_DIR… or --reference")
    args.batches = sorted({int(b) for b in args.batches.split(",") if b.strip()})
    if not args.batches or min(args.batches) < 1:
        parser.error("--batches: positive integers, comma-separated")
    return args


# --- inputs ------------------------------------------------------------------------------------
def artifact_variant(spec: str) -> tuple[str, Path]:
    """(variant, model.onnx) of one ARTIFACT_DIR argument."""
    variant, sep, rest = spec.partition("=")
    directory = Path(rest if sep else spec)
    if not sep:
        variant = directory.name.rsplit("__", 1)[-1]
        if variant not in VARIANTS:
            variant = _variant_from_config(directory) or variant
    if variant not in VARIANTS:
        raise CliError(
            f"{spec}: cannot tell the variant; name the directory {{model}}__v{{version}}__{{variant}} or pass VARIANT=DIR "
            f"(variants: {', '.join(VARIANTS)})"
        )
    if not directory.is_dir():
        raise CliError(f"{directory}: not a directory")
    versions = sorted((p for p in directory.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
    model = (versions[-1] if versions else directory) / "model.onnx"
    if not model.is_file():
        raise CliError(f"{directory}: no model.onnx in {model.parent}")
    return variant, model


def _variant_from_config(directory: Path) -> str | None:
    """The variant named in config.pbtxt, read with Triton's protobuf where tritonclient is installed."""
    try:
        from registry import triton_config
    except ImportError:
        return None
    try:
        name = triton_config.parse((directory / "config.pbtxt").read_text()).name
    except (OSError, ValueError):  # unreadable, or not a ModelConfig (triton_config.ConfigError)
        return None
    return name.rsplit("__", 1)[-1]


def signature_of(session) -> dict:
    def spec(arg):
        return {
            "name": arg.name,
            "dtype": ORT_DTYPES.get(arg.type, arg.type),
            "shape": [d if isinstance(d, int) and d > 0 else -1 for d in arg.shape],
        }

    return {"inputs": [spec(a) for a in session.get_inputs()], "outputs": [spec(a) for a in session.get_outputs()]}


def load_validation(path: Path, signature: dict, rows: int) -> tuple[dict, np.ndarray | None]:
    with np.load(path, allow_pickle=False) as data:
        names = [s["name"] for s in signature["inputs"]]
        missing = [n for n in names if n not in data.files]
        if missing:
            raise CliError(f"{path}: no array for input(s) {missing} (has {data.files})")
        feeds = {n: np.ascontiguousarray(data[n][:rows]) for n in names}
        labels = data["label"][:rows].astype(np.float64) if "label" in data.files else None
    return feeds, labels


# --- the reference model, made here -------------------------------------------------------------
def build_reference(args, work: Path) -> tuple[dict, Path, Path, dict]:
    """Train the reference ranker (on CUDA where torch sees a GPU), export it, and run the
    factory's own graph steps: ({variant: model.onnx}, canonical graph, validation .npz, info)."""
    import onnx
    import torch

    from experiments.reference.export import export_onnx
    from experiments.reference.model import ReferenceConfig
    from experiments.reference.train import train

    device = "cuda" if torch.cuda.is_available() else "cpu"
    config = ReferenceConfig(vocab=args.vocab, emb_dim=16, interaction="dcn", cross_layers=2, mlp=[256, 128])
    progress(
        f"training the reference ranker (26 x {args.vocab} x 16, DCN-v2) on {device}: {args.rows} rows x {args.epochs} epochs"
    )
    result = train(
        config,
        rows=args.rows,
        valid_rows=args.validation_rows,
        epochs=args.epochs,
        threads=min(16, os.cpu_count() or 1),
        device=device,
    )
    progress(f"trained in {result.metrics['train_seconds']:.1f}s, validation AUC {result.metrics['auc']:.4f}")
    valid = result.validation
    validation = work / "validation.npz"
    np.savez(validation, **valid.arrays())
    source = work / "exported.onnx"
    exporter = export_onnx(result.model, source)
    progress(f"exported ONNX ({exporter} exporter): {source.stat().st_size / 1e6:.0f} MB")
    canonical, _, notes = recipes.canonical_graph(onnx.load(str(source)), work, opset=17)
    fused, optimized, more = recipes.optimized_graphs(canonical, work)
    for note in notes + more:
        progress(f"factory: {note}")
    variants = {}
    for target in ("onnx-fp32", "onnx-int8", "onnx-fp32-gpu", "onnx-fp16", "tensorrt"):
        dest = work / f"{target}.onnx"
        recipes.make_variant(target, fused=fused, optimized=optimized, dest=dest)
        variants[target] = dest
        progress(f"factory: {target} {dest.stat().st_size / 1e6:.0f} MB")
    info = {
        "model": {
            "tables": 26,
            "vocab": args.vocab,
            "emb_dim": 16,
            "interaction": "dcn-v2 (2 cross layers)",
            "mlp": [256, 128, 1],
        },
        "train": {"device": device, "rows": args.rows, "epochs": args.epochs, **result.metrics},
        "exporter": exporter,
        "eager_model": result.model.to(device).eval(),
        "device": device,
    }
    return variants, canonical, validation, info


def eager_benchmark(model, device: str, feeds: dict, batches: list[int], seconds: float) -> dict:
    import torch

    from registry.factory.timing import measure

    per_batch = {}
    for batch in batches:
        dense = torch.from_numpy(feeds["dense"][:batch]).to(device)
        sparse = torch.from_numpy(feeds["sparse"][:batch]).to(device)

        def call(dense=dense, sparse=sparse):
            with torch.inference_mode():
                model(dense, sparse)
            if device == "cuda":
                torch.cuda.synchronize()

        per_batch[str(batch)] = measure(call, batch, seconds=seconds, max_iters=1_000_000)
    return {"providers": [f"torch {torch.__version__} {device}"], "modes": {"eager": per_batch}, "notes": {}}


# --- checks ------------------------------------------------------------------------------------
def host_info() -> dict:
    info = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "cpus": os.cpu_count(),
        "runtime": runtime_line(),
        "platform": platform.platform(),
    }
    if shutil.which("nvidia-smi"):
        query = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        info["gpus"] = [line.strip() for line in query.stdout.splitlines() if line.strip()] or [
            query.stderr.strip()[:200]
        ]
    else:
        info["gpus"] = []
    return info


def check_numerics(
    variant: str,
    path: Path,
    feeds: dict,
    reference: np.ndarray,
    labels,
    base: dict,
    *,
    signature: dict,
    work: Path,
    cpu_threads: int,
) -> dict:
    """The validate stage's comparison, on the provider the variant is served with."""
    tolerance = numerics.tolerance_for(numerics.VARIANT_KIND.get(variant, "lowp"))
    if variant in CPU_VARIANTS:
        try:
            out = checks.run_rows(open_session(path, [(CPU, {})], threads=cpu_threads), feeds)
        except Exception as exc:  # one variant's failure is a row, not the end of the run
            return {"status": "rejected", "reason": f"fails to run on {CPU}: {_error(exc)}", "execution_provider": CPU}
        evidence = {"execution_provider": CPU, "providers": [CPU], **numerics.compare(reference, out, labels, base)}
        ok, why, threshold = numerics.judge(evidence, tolerance, classifier=labels is not None)
        return {
            "status": "validated" if ok else "rejected",
            "reason": "" if ok else why,
            "threshold": threshold,
            **evidence,
        }
    check = checks.validate_variant(
        variant,
        path,
        feeds,
        reference,
        labels,
        tolerance=tolerance,
        signature=signature,
        work_dir=work,
        base=base,
        with_cpu_check=False,
    )
    return {"status": check.status, "reason": check.reason, **check.evidence}


def run_benchmarks(
    variants: dict,
    results: dict,
    feeds: dict,
    batches: list[int],
    args,
    signature: dict,
    work: Path,
    *,
    engines: dict | None = None,
    on_row=None,
) -> dict:
    """Fills `engines` {label: measurement or {"skipped": why}}; `on_row()` after each variant."""
    engines = {} if engines is None else engines
    for variant, path in variants.items():
        if on_row is not None and engines:
            on_row()
        if variant in CPU_VARIANTS:
            label = f"{variant} (CPU, {args.cpu_threads} threads)"
            progress(f"benchmark {label}")
            try:
                engines[label] = {
                    "variant": variant,
                    **measure_variant(
                        path,
                        [(CPU, {})],
                        feeds,
                        batches,
                        seconds=args.seconds,
                        modes=("host-io",),
                        threads=args.cpu_threads,
                    ),
                }
            except Exception as exc:  # a row, not the end of the run
                engines[label] = {"variant": variant, "skipped": f"failed: {_error(exc)}"}
            if variant == "onnx-fp32":
                # What serving the CPU-optimized graph on a GPU would give (its fused nodes have no CUDA kernels).
                label = "onnx-fp32 CPU graph on CUDA"
                progress(f"benchmark {label}")
                try:
                    engines[label] = {
                        "variant": variant,
                        **measure_variant(
                            path, [(CUDA, {})], feeds, batches, seconds=args.seconds, modes=("iobinding",)
                        ),
                    }
                except ProviderMissing as exc:
                    engines[label] = {"variant": variant, "skipped": exc.reason}
                except Exception as exc:  # a row, not the end of the run
                    engines[label] = {"variant": variant, "skipped": f"failed: {_error(exc)}"}
            continue
        label = variant
        if results[variant]["status"] == "skipped":
            engines[label] = {"variant": variant, "skipped": results[variant]["reason"]}
            continue
        progress(f"benchmark {label} on {results[variant]['execution_provider']}")
        try:
            engines[label] = {
                "variant": variant,
                **checks.benchmark_variant(
                    variant, path, feeds, batches, signature=signature, work_dir=work, seconds=args.seconds
                ),
            }
        except ProviderMissing as exc:
            engines[label] = {"variant": variant, "skipped": exc.reason}
        except Exception as exc:  # one variant's failure is a row, not the end of the run
            engines[label] = {"variant": variant, "skipped": f"failed: {_error(exc)}"}
    if on_row is not None:
        on_row()
    return engines


def _error(exc: Exception) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:300] if text else ''}"


def _rate(rps: float) -> str:
    return f"{rps / 1e6:.2f}M" if rps >= 1e6 else f"{rps / 1e3:.1f}k" if rps >= 1e3 else f"{rps:.0f}"


def print_tables(results: dict, engines: dict, batches: list[int]) -> None:
    print("\nnumerics against the CPU fp32 reference")
    rows = []
    for variant, r in results.items():
        rows.append(
            [
                variant,
                r.get("execution_provider", ""),
                " > ".join(r.get("providers", [])) or "-",
                r["status"],
                _fmt(r.get("max_abs_error"), ".2e"),
                _fmt(r.get("auc_delta"), "+.2e"),
                _fmt(r.get("logloss_delta"), "+.2e"),
            ]
        )
    print_table(["variant", "asked for", "providers got", "status", "max abs err", "AUC delta", "logloss delta"], rows)
    print("\nlatency and throughput, single stream (each cell: p50 / p99 ms · rows/s = batch / p50)")
    rows = []
    for label, engine in engines.items():
        if "skipped" in engine:
            continue
        for mode, per_batch in engine["modes"].items():
            cells = []
            for b in batches:
                s = per_batch.get(str(b))
                cells.append(f"{s['p50_ms']:.3f} / {s['p99_ms']:.3f} · {_rate(s['throughput_p50_rps'])}" if s else "-")
            rows.append([label, mode, engine["providers"][0], *cells])
    print_table(["engine", "mode", "provider", *[f"b{b}" for b in batches]], rows)
    for label, engine in engines.items():
        if "skipped" in engine:
            print(f"  {label}: skipped: {engine['skipped']}")
        for mode, note in engine.get("notes", {}).items():
            print(f"  {label} [{mode}]: {note}")
    skipped = {e["skipped"] for e in engines.values() if "skipped" in e}
    for variant, r in results.items():
        if r["status"] != "validated" and r.get("reason") and r["reason"] not in skipped:
            print(f"  {variant}: {r['status']}: {r['reason']}")
        if r.get("note"):
            print(f"  {variant}: {r['note']}")


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def goals(results: dict, engines: dict, batches: list[int]) -> list[dict]:
    """The GPU goals on an H100 (docs/benchmarks.md), evaluated on what was measured (not measured: said so)."""
    out = []
    fp16 = results.get("onnx-fp16", {})
    delta = fp16.get("auc_delta")
    out.append(
        {
            "goal": f"onnx-fp16 |AUC delta| <= {GOALS['fp16_auc_delta']:g}",
            "measured": delta,
            "met": None if delta is None else abs(delta) <= GOALS["fp16_auc_delta"],
        }
    )
    engine = engines.get("onnx-fp16", {})
    for mode in dict.fromkeys(m for m in (best_mode(engine), "iobinding") if m):
        per_batch = engine.get("modes", {}).get(mode, {})
        b1, b4096 = per_batch.get("1"), per_batch.get("4096")
        out.append(
            {
                "goal": f"onnx-fp16 [{mode}] batch-1 p50 <= {GOALS['fp16_b1_p50_ms']} ms",
                "measured": b1 and b1["p50_ms"],
                "met": None if not b1 else b1["p50_ms"] <= GOALS["fp16_b1_p50_ms"],
            }
        )
        out.append(
            {
                "goal": f"onnx-fp16 [{mode}] batch 4096 >= {GOALS['fp16_b4096_rps'] / 1e6:.0f} M rows/s",
                "measured": b4096 and b4096["throughput_p50_rps"],
                "met": None if not b4096 else b4096["throughput_p50_rps"] >= GOALS["fp16_b4096_rps"],
            }
        )
    int8 = next((e for e in engines.values() if e.get("variant") == "onnx-int8" and "modes" in e), None)
    for label, engine in engines.items():
        if engine.get("variant") not in GPU_VARIANTS or "modes" not in engine or int8 is None:
            continue
        for mode in dict.fromkeys(m for m in (best_mode(engine), "iobinding") if m):
            slower = [
                b
                for b in batches
                if str(b) in engine["modes"].get(mode, {})
                and engine["modes"][mode][str(b)]["p50_ms"] > int8["modes"]["host-io"][str(b)]["p50_ms"]
            ]
            out.append(
                {
                    "goal": f"{label} [{mode}] not slower than CPU int8 at any batch",
                    "measured": f"slower at {slower}" if slower else "never slower",
                    "met": not slower,
                }
            )
    return out


def main(argv) -> int:
    try:
        return run(_args(argv))
    except CliError as exc:
        print(f"python -m bench gpu: {exc}", file=sys.stderr)
        return 2


def run(args) -> int:
    host = host_info()
    progress(f"host: {host['platform']}, {host['cpus']} CPUs, GPUs: {', '.join(host['gpus']) or 'none'}")
    progress(host["runtime"])
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-gpu-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        return _run(args, host, work)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


def _variants(args, work: Path) -> tuple[dict, object, object, str | None, dict]:
    """(variants {name: path}, the eager model or None, the CPU fp32 reference graph, the
    validation set or None, what the reference build adds to the report): the reference
    ranker built here (--reference), else the artifacts given."""
    info: dict = {}
    if args.reference:
        variants, reference_graph, validation, info = build_reference(args, work)
        eager_model = info.pop("eager_model")
    else:
        variants, eager_model = dict(artifact_variant(spec) for spec in args.artifacts), None
        validation = args.validation
        reference_graph = args.reference_onnx or next(
            (variants[v] for v in ("onnx-fp32", "onnx-fp32-gpu", "tensorrt") if v in variants), None
        )
        if reference_graph is None:
            raise CliError("no CPU fp32 reference: give an onnx-fp32 (or onnx-fp32-gpu) artifact, or --reference-onnx")
    return variants, eager_model, reference_graph, validation, info


def _run(args, host: dict, work: Path) -> int:
    variants, eager_model, reference_graph, validation, info = _variants(args, work)
    reference_session = open_session(Path(reference_graph), [(CPU, {})], threads=args.cpu_threads)
    signature = signature_of(reference_session)
    rows = max(args.validation_rows, max(args.batches))
    if validation:
        feeds, labels = load_validation(Path(validation), signature, args.validation_rows)
        source = f"validation set {Path(validation).name}"
    else:
        feeds, labels = graphs.seeded_inputs(signature, rows), None
        source = "seeded inputs"
    reference = checks.run_rows(reference_session, feeds).astype(np.float64)
    classifier = graphs.is_probability(reference)
    if classifier and labels is None:
        labels, source = (
            numerics.labels_from_reference(reference),
            source + " with labels drawn from the reference's probabilities",
        )
    labels = labels if classifier else None
    base = numerics.baseline(reference, labels)
    progress(
        f"CPU fp32 reference {reference_graph} on {reference.shape[0]} rows ({source})"
        + (f": AUC {base['auc']:.4f}" if base else "")
    )
    if len(next(iter(feeds.values()))) < max(args.batches):
        feeds = {
            k: np.concatenate([v] * (max(args.batches) // len(v) + 1))[: max(args.batches)] for k, v in feeds.items()
        }
    results, engines = {}, {}
    # Saved after every step (complete: false until the end): a run cut short keeps what it measured.
    payload = {
        "complete": False,
        "host": host,
        "batches": args.batches,
        "seconds": args.seconds,
        "cpu_threads": args.cpu_threads,
        "reference": {"graph": str(reference_graph), "rows": int(reference.shape[0]), "inputs": source, **base},
        **info,
        "numerics": results,
        "benchmarks": engines,
    }

    def save() -> Path:
        return write_json("gpu", json.loads(json.dumps(payload, default=str)))

    for variant, path in variants.items():
        results[variant] = r = check_numerics(
            variant,
            path,
            _rows(feeds, reference.shape[0]),
            reference,
            labels,
            base,
            signature=signature,
            work=work,
            cpu_threads=args.cpu_threads,
        )
        progress(
            f"numerics {variant}: {r['status']} on {' > '.join(r.get('providers', [])) or r.get('execution_provider')}, "
            f"max abs error {_fmt(r.get('max_abs_error'), '.2e')}, AUC delta {_fmt(r.get('auc_delta'), '+.2e')}"
        )
        save()
    reported: set[str] = set()

    def on_row() -> None:
        for label, engine in engines.items():
            if label not in reported:
                reported.add(label)
                progress(
                    f"  {label}: "
                    + (
                        f"skipped: {engine['skipped']}"
                        if "skipped" in engine
                        else "; ".join(
                            f"[{mode}] "
                            + ", ".join(
                                f"b{b} {st['p50_ms']:.3f} ms {_rate(st['throughput_p50_rps'])}/s"
                                for b, st in per_batch.items()
                            )
                            for mode, per_batch in engine["modes"].items()
                        )
                    )
                )
        save()

    run_benchmarks(variants, results, feeds, args.batches, args, signature, work, engines=engines, on_row=on_row)
    if eager_model is not None:
        label = f"pytorch eager fp32 ({info['device']})"
        progress(f"benchmark {label}")
        try:
            engines[label] = {
                "variant": "pytorch",
                **eager_benchmark(eager_model, info["device"], feeds, args.batches, args.seconds),
            }
        except Exception as exc:  # a row, not the end of the run
            engines[label] = {"variant": "pytorch", "skipped": f"failed: {_error(exc)}"}
        on_row()
    plans = {}
    for variant in variants:
        if variant in GPU_VARIANTS:
            measured = curve(engines.get(variant, {}))
            plans[variant] = serving.plan(variant, signature, curve=measured)
    goal_rows = goals(results, engines, args.batches)
    payload.update(complete=True, serving_plans=plans, goals=goal_rows)
    written = save()  # before printing: nothing measured is lost
    print_tables(results, engines, args.batches)
    print("\nserving plan the factory writes into each GPU variant's config.pbtxt")
    for variant, plan in plans.items():
        accelerators = (
            "; ".join(
                f"{name}: {', '.join(f'{k}={v}' for k, v in params.items())}" for name, params in plan["accelerators"]
            )
            or "none"
        )
        print(
            f"  {variant}: max_batch_size {plan['max_batch_size']}, preferred {plan['preferred_batch_sizes']} ({plan['basis']}); accelerators: {accelerators}"
        )
    print("\ngoals (on an H100)")
    print_table(
        ["goal", "measured", "met"],
        [
            [g["goal"], _fmt_goal(g["measured"]), {True: "yes", False: "NO", None: "not measured"}[g["met"]]]
            for g in goal_rows
        ],
    )
    print(f"wrote {written}")
    return 0


def _fmt_goal(value) -> str:
    if isinstance(value, float):
        return f"{value:.3e}" if abs(value) < 1e-2 else f"{value:,.3f}"
    return "-" if value is None else str(value)


def _rows(feeds: dict, rows: int) -> dict:
    return {k: v[:rows] for k, v in feeds.items()}
