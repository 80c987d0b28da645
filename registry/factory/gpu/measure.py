"""Latency and throughput of one variant per batch size, in the ways it can be run.

Modes:
- `host-io`: `session.run` with numpy inputs and outputs (ONNX Runtime copies them to and
  from the device inside the call);
- `iobinding`: inputs already on the device and outputs bound there (what Triton's
  ONNX Runtime backend does for a KIND_GPU instance; on the CPU, bound CPU buffers);
- `cuda-graph`: I/O binding on fixed device buffers plus CUDA graph capture/replay, one
  graph per batch size (`gpu_graph_id`); only for the CUDA EP and only where the graph
  allows it (every node on the CUDA EP). Its outputs are checked against `host-io`.

Each measurement is single-stream, after warm-up; latencies in ms, rows/s = batch / p50.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from registry.factory.gpu.providers import CUDA, TENSORRT, open_session
from registry.factory.graphs import slice_rows
from registry.factory.timing import measure

MODES = ("cuda-graph", "iobinding", "host-io")


def _device(provider: str) -> str:
    return "cuda" if provider in (CUDA, TENSORRT) else "cpu"


def _bind(session, binding, feeds: dict, outputs: dict, device: str):
    import onnxruntime as ort

    keep = []
    for name, array in feeds.items():
        value = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array), device, 0)
        binding.bind_ortvalue_input(name, value)
        keep.append(value)
    for name, like in outputs.items():
        value = ort.OrtValue.ortvalue_from_shape_and_type(list(like.shape), like.dtype, device, 0)
        binding.bind_ortvalue_output(name, value)
        keep.append(value)
    return keep  # the buffers must outlive the binding (a CUDA graph replays on their addresses)


def measure_variant(
    path: Path,
    providers: list[tuple[str, dict]],
    feeds: dict,
    batches: list[int],
    *,
    seconds: float,
    modes=MODES,
    threads: int = 1,
    max_iters: int = 1_000_000,
    graph_providers: list | None = None,
) -> dict:
    """{"providers": [...], "modes": {mode: {batch: stats}}, "notes": {mode: why not}}.
    `graph_providers`: the same providers with CUDA graphs enabled (None: no graph mode)."""
    provider = providers[0][0]
    device = _device(provider)
    session = open_session(path, providers, threads=threads)
    out_names = [o.name for o in session.get_outputs()]
    result = {"providers": list(session.get_providers()), "device": device, "modes": {}, "notes": {}}
    reference = {}
    for batch in batches:
        part = slice_rows(feeds, 0, batch)
        outputs = session.run(out_names, part)
        reference[batch] = (part, dict(zip(out_names, outputs)))
    if "host-io" in modes:
        result["modes"]["host-io"] = {
            str(b): measure(
                lambda p=reference[b][0]: session.run(out_names, p), b, seconds=seconds, max_iters=max_iters
            )
            for b in batches
        }
    if "iobinding" in modes:
        per_batch = {}
        for batch in batches:
            binding = session.io_binding()
            keep = _bind(session, binding, *reference[batch], device)
            per_batch[str(batch)] = measure(
                lambda b=binding: session.run_with_iobinding(b), batch, seconds=seconds, max_iters=max_iters
            )
            del keep
        result["modes"]["iobinding"] = per_batch
    if "cuda-graph" in modes:
        if device != "cuda" or provider != CUDA or graph_providers is None:
            result["notes"]["cuda-graph"] = (
                f"not measured: CUDA graphs are measured on the CUDA EP only ({provider} here)"
            )
        else:
            _measure_graphs(path, graph_providers, reference, batches, seconds, max_iters, result)
    return result


def _measure_graphs(
    path, graph_providers, reference, batches, seconds, max_iters, result, device: str = "cuda"
) -> None:
    import onnxruntime as ort

    try:
        graph_session = open_session(path, graph_providers)
    except Exception as exc:  # ORT refuses CUDA graphs when a node is not on the CUDA EP
        result["notes"]["cuda-graph"] = (
            f"the graph does not allow CUDA graphs: {str(exc).strip().splitlines()[0][:300]}"
        )
        return
    per_batch, mismatch, max_diff = {}, [], 0.0
    for graph_id, batch in enumerate(batches, start=1):  # id 0 is reserved by ONNX Runtime
        binding = graph_session.io_binding()
        keep = _bind(graph_session, binding, *reference[batch], device)
        run_options = ort.RunOptions()
        run_options.add_run_config_entry("gpu_graph_id", str(graph_id))

        def call(b=binding, r=run_options):
            graph_session.run_with_iobinding(b, r)

        per_batch[str(batch)] = measure(call, batch, seconds=seconds, max_iters=max_iters)
        # A replay on stale buffers or a wrong shape gives other rows' scores; two sessions'
        # kernels may round differently (fp16), hence a tolerance, and the difference is kept.
        for got, want in zip(binding.copy_outputs_to_cpu(), reference[batch][1].values()):
            got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
            if got.shape != want.shape:
                mismatch.append(batch)
                continue
            max_diff = max(max_diff, float(np.max(np.abs(got - want))) if got.size else 0.0)
            if not np.allclose(got, want, rtol=1e-3, atol=1e-3, equal_nan=True):
                mismatch.append(batch)
        del keep
    if mismatch:
        result["notes"]["cuda-graph"] = (
            f"replayed outputs differ from a plain run at batch {sorted(set(mismatch))} (max abs {max_diff:.2e}): not reported"
        )
        return
    result["modes"]["cuda-graph"] = per_batch
    result["cuda_graph_max_abs_diff"] = max_diff


def best_mode(result: dict) -> str | None:
    """The best way this variant could be run that was measured: cuda-graph, else
    iobinding, else host-io."""
    return next((m for m in MODES if m in result.get("modes", {})), None)


def curve(result: dict, mode: str = "iobinding") -> dict:
    """{batch: rows/s} of one mode (default: the one Triton's backend can use)."""
    per_batch = result.get("modes", {}).get(mode) or {}
    return {int(b): stats["throughput_p50_rps"] for b, stats in per_batch.items()}
