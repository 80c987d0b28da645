"""What a GPU variant's Triton config says, decided from the measured throughput curve.

Pure functions over plain data (no onnxruntime, no protobuf): registry/triton_config.py
turns the plan into a ModelConfig, and the sessions that validate and benchmark a variant
(providers.py) get the same execution-provider options, so what is measured is what is
served.

What Triton's ONNX Runtime backend can express, and what the plan sets:
- max_batch_size and the dynamic batcher's preferred sizes (from the curve, below);
- the TensorRT execution accelerator: FP16, an engine cache and a timing cache under
  TENSORRT_CACHE_DIR (the Kubernetes driver mounts a volume there on GPU pools), and one
  optimization profile over [1, max_batch_size] tuned for the largest preferred size;
- CUDA EP options through the `cuda` execution accelerator: TF32 off for `onnx-fp32-gpu`;
- I/O on the device needs nothing: for KIND_GPU instances the backend gathers a batch's
  inputs into GPU memory and binds outputs on the GPU (`RunWithBinding`).
What it cannot express: CUDA graphs for the CUDA EP (ORT replays a graph on the tensor
addresses and shapes it captured; the backend allocates per request and batches vary),
so the CUDA-graph rows of `python -m bench gpu` are a gap docs/factory.md states.
"""

from __future__ import annotations

import math

from registry.names import TENSORRT_CACHE_DIR

TRT_WORKSPACE_BYTES = 1 << 30
# Unmeasured GPU default (no GPU on the worker): the reference ranker's throughput on an
# H100 kept rising up to batch 4096 (docs/benchmarks.md), so the batcher may form batches that big.
DEFAULT_MAX_BATCH = 4096
DEFAULT_PREFERRED = (32, 512, 4096)
MAX_BATCH_INPUT_BYTES = 256 << 20  # a batch's inputs stay under this (wide rows get a smaller max batch)
PLATEAU_SHARE = 0.9  # max_batch_size: the smallest measured batch within 90 % of the peak throughput
PREFERRED_SHARE = 0.25  # preferred sizes: measured batches that reach a quarter of the peak
DTYPE_BYTES = {
    "float32": 4,
    "float16": 2,
    "float64": 8,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}


def _batched(spec: dict) -> bool:
    return bool(spec.get("shape")) and spec["shape"][0] in (-1, None)


def row_bytes(signature: dict) -> int | None:
    """Bytes of one row of all inputs, or None when a non-batch dimension is dynamic."""
    total = 0
    for spec in signature.get("inputs") or []:
        dims = spec["shape"][1:] if _batched(spec) else spec["shape"]
        if any(d in (-1, None) or d <= 0 for d in dims):
            return None
        total += math.prod(dims) * DTYPE_BYTES.get(spec["dtype"], 8)
    return total or None


def batch_cap(signature: dict) -> int:
    size = row_bytes(signature)
    return DEFAULT_MAX_BATCH if size is None else max(1, min(DEFAULT_MAX_BATCH * 16, MAX_BATCH_INPUT_BYTES // size))


def choose_batching(curve: dict | None, signature: dict) -> dict:
    """max_batch_size and preferred batch sizes. `curve`: {batch: rows/s} measured on the
    GPU with the variant's own provider (I/O binding, as Triton's backend runs it)."""
    cap = batch_cap(signature)
    points = sorted((int(b), float(t)) for b, t in (curve or {}).items() if t and t > 0 and int(b) <= cap)
    if not points:
        top = min(DEFAULT_MAX_BATCH, cap)
        preferred = [b for b in DEFAULT_PREFERRED if b <= top] or [top]
        return {
            "max_batch_size": top,
            "preferred_batch_sizes": preferred,
            "basis": f"default (no GPU measurement): max batch {top}, preferred {preferred}",
        }
    peak_batch, peak = max(points, key=lambda p: p[1])
    top = next(b for b, t in points if t >= PLATEAU_SHARE * peak)
    preferred = [b for b, t in points if 1 < b <= top and t >= PREFERRED_SHARE * peak] or [top]
    return {
        "max_batch_size": top,
        "preferred_batch_sizes": preferred,
        "basis": (
            f"measured: peak {peak:,.0f} rows/s at batch {peak_batch}; max batch = smallest measured batch within "
            f"{PLATEAU_SHARE:.0%} of the peak; preferred = measured batches reaching {PREFERRED_SHARE:.0%} of it"
        ),
    }


def profile_shapes(signature: dict, *, min_batch: int, opt_batch: int, max_batch: int) -> dict:
    """TensorRT optimization-profile options over the batch dimension; {} when another
    dimension is dynamic (TensorRT then builds from the shapes it sees) or a name cannot be
    written in the option's `name:AxB,…` format."""
    parts: dict[str, list[str]] = {"min": [], "opt": [], "max": []}
    for spec in signature.get("inputs") or []:
        if not _batched(spec):
            continue
        rest = spec["shape"][1:]
        if any(d in (-1, None) or d <= 0 for d in rest) or any(c in spec["name"] for c in ":,"):
            return {}
        for key, batch in (("min", min_batch), ("opt", opt_batch), ("max", max_batch)):
            parts[key].append(f"{spec['name']}:{'x'.join(str(int(d)) for d in [batch, *rest])}")
    if not parts["min"]:
        return {}
    return {f"trt_profile_{key}_shapes": ",".join(values) for key, values in parts.items()}


def tensorrt_parameters(
    signature: dict, *, max_batch: int, opt_batch: int, cache_dir: str = TENSORRT_CACHE_DIR
) -> dict:
    """Parameters of Triton's `tensorrt` GPU execution accelerator (its key names)."""
    opt_batch = max(1, min(opt_batch, max_batch))
    return {
        "precision_mode": "FP16",
        "max_workspace_size_bytes": str(TRT_WORKSPACE_BYTES),
        "trt_engine_cache_enable": "1",
        "trt_engine_cache_path": cache_dir,
        "trt_timing_cache_enable": "1",
        "trt_timing_cache_path": cache_dir,
        **profile_shapes(signature, min_batch=1, opt_batch=opt_batch, max_batch=max_batch),
    }


def ort_tensorrt_options(params: dict) -> dict:
    """Triton's tensorrt accelerator parameters as ONNX Runtime TensorRT EP options
    (the backend's own mapping: precision_mode FP16 -> trt_fp16_enable, workspace -> trt_max_workspace_size)."""
    options = {}
    for key, value in params.items():
        if key == "precision_mode":
            if value == "FP16":
                options["trt_fp16_enable"] = "1"
            elif value == "INT8":
                options["trt_int8_enable"] = "1"
        elif key == "max_workspace_size_bytes":
            options["trt_max_workspace_size"] = value
        else:
            options[key] = value
    return options


def cuda_parameters(variant: str) -> dict:
    """CUDA EP options of the variant's `cuda` accelerator: TF32 off for the exact fp32 variant."""
    return {"use_tf32": "0"} if variant == "onnx-fp32-gpu" else {}


def plan(variant: str, signature: dict, *, curve: dict | None = None) -> dict:
    """The serving plan of one GPU variant: batching plus execution accelerators
    [(name, parameters)], for triton_config.build_config."""
    batching = choose_batching(curve, signature)
    accelerators = []
    if variant == "tensorrt":
        opt = max(batching["preferred_batch_sizes"])
        accelerators.append(
            ("tensorrt", tensorrt_parameters(signature, max_batch=batching["max_batch_size"], opt_batch=opt))
        )
    cuda = cuda_parameters(variant)
    if cuda:
        accelerators.append(("cuda", cuda))
    return {**batching, "accelerators": accelerators}
