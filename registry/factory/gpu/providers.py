"""Which execution provider each GPU variant runs on, and sessions that prove they got it.

ONNX Runtime does not fail when it cannot give a session the provider asked for: a
session asked for [TensorRT, CUDA] without TensorRT installed silently becomes
[CUDA, CPU], and one asked for CUDA on the CPU build becomes [CPU]. `open_session`
therefore checks `session.get_providers()` and raises ProviderMissing with the reason.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from registry.factory.gpu import serving
from registry.factory.graphs import session_options

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"

# The provider each GPU variant's Triton config names (triton_config writes it from serving.py).
VARIANT_PROVIDER = {"onnx-fp32-gpu": CUDA, "onnx-fp16": CUDA, "tensorrt": TENSORRT}
GPU_PROVIDERS = (CUDA, TENSORRT)


# ONNX Runtime's words when a provider's libraries or device are missing (not the graph's fault).
UNAVAILABLE_SIGNS = (
    "cannot open shared object file",
    "Failed to load library",
    "libnvinfer",
    "CUDA_PATH is set",
    "Please install TensorRT",
    "no CUDA-capable device",
    "CUDA driver version is insufficient",
    "cudaErrorNoDevice",
    "cudaErrorInsufficientDriver",
)


class ProviderMissing(Exception):
    """The session did not get the execution provider asked for; `reason` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def requested_providers(
    variant: str,
    signature: dict | None = None,
    *,
    trt_cache_dir: Path | None = None,
    trt_max_batch: int = 4096,
    trt_opt_batch: int = 512,
    cuda_graph: bool = False,
) -> list[tuple[str, dict]]:
    """(provider, options) in priority order, as ONNX Runtime's Python API takes them; the
    options are the ones the variant's Triton config sets (serving.py), so what is
    validated is what is served."""
    provider = VARIANT_PROVIDER.get(variant, CPU)
    if provider == CPU:
        return [(CPU, {})]
    cuda = dict(serving.cuda_parameters(variant))
    if cuda_graph:
        cuda["enable_cuda_graph"] = "1"
    if provider == CUDA:
        return [(CUDA, cuda)]
    params = serving.tensorrt_parameters(
        signature or {"inputs": []},
        max_batch=trt_max_batch,
        opt_batch=trt_opt_batch,
        cache_dir=str(trt_cache_dir) if trt_cache_dir else serving.TENSORRT_CACHE_DIR,
    )
    if trt_cache_dir:
        Path(trt_cache_dir).mkdir(parents=True, exist_ok=True)
    return [(TENSORRT, serving.ort_tensorrt_options(params)), (CUDA, cuda)]


def available() -> list[str]:
    import onnxruntime as ort

    return list(ort.get_available_providers())


def runtime_line() -> str:
    import onnxruntime as ort

    return f"onnxruntime {ort.__version__} ({ort.get_device()}), providers {', '.join(available())}"


def check_providers(session, requested: list[str]) -> list[str]:
    """The providers `session` got; ProviderMissing when the first one asked for is not
    among them (a silent fallback)."""
    got = list(session.get_providers())
    if requested[0] not in got:
        hint = ""
        if requested[0] == TENSORRT:
            hint = ": TensorRT is not installed (or does not load) on this host, and the variant is not validated on CUDA in its place"
        elif requested[0] == CUDA:
            hint = ": no usable GPU for ONNX Runtime here"
        raise ProviderMissing(
            f"asked ONNX Runtime for {' > '.join(requested)}; the session got {' > '.join(got) or 'nothing'}{hint}"
        )
    return got


def open_session(
    path: Path,
    providers: list[tuple[str, dict]],
    *,
    threads: int = 1,
    level: str = "all",
    profile_prefix: Path | None = None,
):
    """An InferenceSession on `providers` that really got the first of them."""
    import onnxruntime as ort

    names = [name for name, _ in providers]
    if names[0] != CPU and names[0] not in available():
        raise ProviderMissing(
            f"{names[0]} is not in this ONNX Runtime ({runtime_line()}): "
            + (
                "the CPU build has no GPU providers; a build-gpu worker needs onnxruntime-gpu"
                if ort.get_device() == "CPU"
                else "this onnxruntime build lacks it"
            )
        )
    options = session_options(threads=threads, level=level)
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = str(profile_prefix)
    # enable_fallback=0: ORT's Python API otherwise retries a session it cannot create (CUDA
    # graphs refused, TensorRT missing) or a run that failed on the EP with fallback
    # providers and default options, saying so only on stdout.
    try:
        session = ort.InferenceSession(
            str(path),
            options,
            providers=[(name, opts) if opts else name for name, opts in providers],
            enable_fallback=0,
        )
    except Exception as exc:  # ORT raises plain RuntimeErrors (Fail, EPFail, …) for both kinds of failure
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        if any(sign in str(exc) for sign in UNAVAILABLE_SIGNS):
            raise ProviderMissing(f"{names[0]} cannot be loaded on this host: {first}") from exc
        raise
    check_providers(session, names)
    check_options(session, names[0], providers[0][1])
    return session


# Switches whose loss changes what is measured; paths and shape strings ORT may reformat.
CHECKED_OPTIONS = {
    "enable_cuda_graph",
    "use_tf32",
    "trt_fp16_enable",
    "trt_int8_enable",
    "trt_engine_cache_enable",
    "trt_cuda_graph_enable",
}


def _flag(value) -> str:
    text = str(value).strip()
    return {"true": "1", "false": "0"}.get(text.lower(), text)


def check_options(session, provider: str, asked: dict) -> None:
    """ProviderMissing when the session's `provider` runs with other values than asked for
    (the options ONNX Runtime reports back; keys it does not report cannot be checked)."""
    got = (session.get_provider_options() or {}).get(provider, {})
    differ = {
        key: got[key]
        for key, value in asked.items()
        if key in CHECKED_OPTIONS and key in got and _flag(got[key]) != _flag(value)
    }
    if differ:
        raise ProviderMissing(
            f"{provider} runs with {differ}, not the {', '.join(f'{k}={asked[k]}' for k in differ)} asked for"
        )


def placement(session) -> dict:
    """Where the nodes of a profiled session ran (after at least one run): node count per
    provider, and the CPU nodes by op type. Ends the session's profiling."""
    profile = Path(session.end_profiling())
    try:
        events = json.loads(profile.read_text())
    finally:
        with contextlib.suppress(OSError):
            os.unlink(profile)
    nodes: dict[str, dict] = {}
    for event in events:
        args = event.get("args") or {}
        if event.get("cat") == "Node" and args.get("provider") and event.get("name", "").endswith("_kernel_time"):
            nodes[event["name"][: -len("_kernel_time")]] = {"provider": args["provider"], "op": args.get("op_name", "")}
    per_provider: dict[str, int] = {}
    cpu_ops: dict[str, int] = {}
    for node in nodes.values():
        per_provider[node["provider"]] = per_provider.get(node["provider"], 0) + 1
        if node["provider"] == CPU:
            cpu_ops[node["op"]] = cpu_ops.get(node["op"], 0) + 1
    return {"nodes_per_provider": per_provider, "cpu_ops": cpu_ops}
