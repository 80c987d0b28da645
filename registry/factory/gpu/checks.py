"""Validate and benchmark one GPU variant on the execution provider it is served with.

The build's validate and benchmark stages (registry/factory/stages.py) and
`python -m bench gpu` call these same two functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from registry.factory import numerics
from registry.factory.gpu.measure import measure_variant
from registry.factory.gpu.providers import (
    CPU,
    CUDA,
    VARIANT_PROVIDER,
    ProviderMissing,
    open_session,
    placement,
    requested_providers,
)
from registry.factory.graphs import slice_rows

TF32_POLICY = {
    "onnx-fp32-gpu": "off (use_tf32=0): validated and served as exact fp32",
    "onnx-fp16": "n/a: fp16 arithmetic",
    "tensorrt": "n/a: FP16 TensorRT engines",
}


@dataclass
class Check:
    status: str  # validated | rejected | skipped
    reason: str = ""
    evidence: dict = field(default_factory=dict)


def run_rows(session, feeds: dict, chunk: int = 1024) -> np.ndarray:
    """The first output over all rows of `feeds`, `chunk` rows per run."""
    name = session.get_outputs()[0].name
    rows = len(next(iter(feeds.values())))
    return np.concatenate(
        [session.run([name], slice_rows(feeds, start, start + chunk))[0] for start in range(0, rows, chunk)], axis=0
    )


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


def cpu_check(path: Path, feeds: dict, reference: np.ndarray, labels, base) -> dict:
    """Evidence only, where no GPU is: does the graph run on the CPU EP, and how far its
    outputs are (ONNX Runtime's CPU runs fp16 ops without CPU kernels in fp32, so this says
    nothing about fp16 overflow on a GPU)."""
    try:
        out = run_rows(open_session(path, [(CPU, {})]), feeds)
    except Exception as exc:  # evidence only: a graph the CPU cannot run may still run on the GPU
        return {"ran": False, "error": _first_line(exc)}
    return {"ran": True, "provider": CPU, **numerics.compare(reference, out, labels, base)}


def validate_variant(
    variant: str,
    path: Path,
    feeds: dict,
    reference: np.ndarray,
    labels: np.ndarray | None,
    *,
    tolerance: numerics.Tolerance,
    signature: dict,
    work_dir: Path,
    base: dict | None = None,
    with_cpu_check: bool = True,
) -> Check:
    """Run `variant` on its provider over `feeds` and judge it against `reference` (the
    original on the CPU). Skipped with the reason when the provider cannot be had."""
    providers = requested_providers(variant, signature, trt_cache_dir=work_dir / "tensorrt-cache")
    provider = providers[0][0]
    evidence = {
        "rows": int(reference.shape[0]),
        "execution_provider": provider,
        "provider_options": {name: options for name, options in providers},
        "tf32": TF32_POLICY.get(variant, "default"),
    }
    try:
        session = open_session(path, providers, profile_prefix=work_dir / f"profile-{variant}")
    except ProviderMissing as exc:
        evidence["skipped"] = exc.reason
        if with_cpu_check:
            evidence["cpu_check"] = cpu_check(path, feeds, reference, labels, base)
        return Check("skipped", f"not validated on {provider}: {exc.reason}", evidence)
    except Exception as exc:  # ORT raises its own types for graphs a provider refuses
        return Check("rejected", f"the variant does not load on {provider}: {_first_line(exc)}", evidence)
    evidence["providers"] = list(session.get_providers())
    try:
        out = run_rows(session, feeds)
    except Exception as exc:  # a variant that cannot run is rejected
        return Check("rejected", f"the variant fails to run on {provider}: {_first_line(exc)}", evidence)
    try:
        evidence["placement"] = placement(session)
    except Exception as exc:  # evidence only: no profile must not fail a variant that ran
        evidence["placement"] = {"error": _first_line(exc)}
    cpu_nodes = evidence["placement"].get("cpu_ops")
    if provider != CPU and cpu_nodes:
        evidence["note"] = f"nodes ONNX Runtime placed on the CPU (host copies around them): {cpu_nodes}"
    evidence.update(numerics.compare(reference, out, labels, base))
    ok, why, threshold = numerics.judge(evidence, tolerance, classifier=labels is not None)
    evidence.update(threshold=threshold, passed=bool(ok))
    return Check("validated" if ok else "rejected", "" if ok else f"validation on {provider} failed: {why}", evidence)


def benchmark_variant(
    variant: str,
    path: Path,
    feeds: dict,
    batches: list[int],
    *,
    signature: dict,
    work_dir: Path,
    seconds: float,
    threads: int = 1,
) -> dict:
    """Per-mode latency/throughput of `variant` on its provider (raises ProviderMissing)."""
    provider = VARIANT_PROVIDER.get(variant, CPU)
    trt = dict(trt_cache_dir=work_dir / "tensorrt-cache", trt_max_batch=max(batches), trt_opt_batch=max(batches))
    providers = requested_providers(variant, signature, **trt)
    graph = requested_providers(variant, signature, cuda_graph=True, **trt) if provider == CUDA else None
    result = measure_variant(
        path,
        providers,
        feeds,
        batches,
        seconds=seconds,
        threads=threads,
        graph_providers=graph,
        modes=("cuda-graph", "iobinding", "host-io") if provider != CPU else ("host-io",),
    )
    # "batches": the mode Triton's backend runs (the curve the serving plan reads), under the
    # key the CPU variants' benchmarks use, so the dashboard's latency chart shows both.
    return {
        "execution_provider": provider,
        "serving_mode": "iobinding",
        "batches": result["modes"].get("iobinding", {}),
        **result,
    }
