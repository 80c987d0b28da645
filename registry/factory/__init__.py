"""The artifact factory: turn a registered version into validated, benchmarked Triton artifacts.

Stages (registry/factory/stages.py), each recorded on the Build row with status, duration
and log: canonicalize -> optimize -> variants -> validate -> benchmark -> package.

Variants (targets):
    onnx-fp32   CPU pools: the ORT-optimized fp32 graph (embedding gathers fused).
    onnx-int8   CPU pools: ONNX Runtime dynamic INT8 quantization.
    onnx-fp32-gpu  GPU pools: the fp32 graph without CPU-only fusions, on ORT's CUDA EP
                with TF32 off (exact: held to the fp32 tolerance).
    onnx-fp16   GPU pools: fp16 weights/activations with fp32 inputs/outputs (CUDA EP).
    tensorrt    GPU pools: the GPU fp32 graph + a Triton config that turns on ORT's
                TensorRT execution accelerator with FP16, an engine cache and an
                optimization profile (Triton builds the engine on the GPU).

GPU variants are validated and benchmarked on a build-gpu worker with the execution
provider their config names (registry/factory/gpu/); elsewhere they are skipped with the
reason and not servable.

Packaged Triton model directory (a stable contract; serving pools load it as is)::

    {model}__v{version}__{variant}/          <- Artifact.triton_model_name
        config.pbtxt                          <- from tritonclient.grpc.model_config_pb2
        1/model.onnx                          <- the variant's graph
        1/model.py                            <- CPU variants only: a copy of
                                                 platform/triton/onnxruntime_adapter/model.py

A generative recommender's version (task generative_rec; registry/factory/generative/) runs
its own five stages over its bundle and one catalog version: bundle -> variants -> gates ->
benchmark -> package. Targets gr-fp32 and gr-int8 (CPU), gr-fp16 (GPU: skipped with the
reason on a CPU worker); each is gated on its beams (0 illegal ids with the trie, beam-set
overlap and the reference's top item against the bundle's fp32 graphs, HR@10) and packaged
as `{target}-c{catalog version}` (registry/gr/triton.py's layout).

A build asked to tune (Build.tune: the latency SLO, variants, a time budget) runs a
seventh stage, `tune` (registry/factory/tune/): it searches each asked variant's serving
config on a scratch tritonserver and packages the best one within the SLO as the servable
variant `{variant}-tuned` (same graph, its own config.pbtxt, the search in its evidence).

CPU variants use `backend: "python"` with parameters `onnx_file` (model.onnx),
`intra_op_threads` and `inter_op_threads`; GPU variants use `platform: "onnxruntime_onnx"`
with a KIND_GPU instance group (one instance on each GPU of the replica), batching and
execution accelerators from registry/factory/gpu/serving.py. The directory is stored content-addressed with
registry.storage.put_dir (atomic rename) and Artifact.path is its path relative to
ARTIFACT_ROOT; the directory's own name in the store is its sha256, so a pool copies or
links it into its model repository under Artifact.triton_model_name.
"""

from enum import StrEnum

CPU_VARIANTS = ("onnx-fp32", "onnx-int8")
GPU_VARIANTS = ("onnx-fp32-gpu", "onnx-fp16", "tensorrt")
VARIANTS = CPU_VARIANTS + GPU_VARIANTS
DEFAULT_TARGETS = list(CPU_VARIANTS)
GR_CPU_TARGETS = ("gr-fp32", "gr-int8")
GR_GPU_TARGETS = ("gr-fp16",)
GR_TARGETS = GR_CPU_TARGETS + GR_GPU_TARGETS
GR_DEFAULT_TARGETS = list(GR_CPU_TARGETS)
BUILD_TARGETS = VARIANTS + GR_TARGETS  # what a build may ask for (GR targets for GR versions only)
GR_TASK = "generative_rec"  # registry.models.Task.GENERATIVE_REC (this module imports no Django)
GR_STAGES = ("bundle", "variants", "gates", "benchmark", "package")
GR_STAGE_WEIGHTS = {"bundle": 10, "variants": 20, "gates": 40, "benchmark": 15, "package": 15}
STAGES = ("canonicalize", "optimize", "variants", "validate", "benchmark", "package")
# Share of the progress bar each stage fills (sums to 100).
STAGE_WEIGHTS = {"canonicalize": 15, "optimize": 10, "variants": 15, "validate": 20, "benchmark": 25, "package": 15}
# A build that asks for a tune (Build.tune) runs one more stage after package: it takes
# longer than all the others together, so it fills most of that build's bar.
TUNE_STAGE = "tune"
TUNE_WEIGHT = 150


class StageStatus(StrEnum):
    """A build stage's status in Build.stages (the API and the build page show it)."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"


STAGE_DONE = frozenset({StageStatus.SUCCEEDED, StageStatus.SKIPPED})  # what the progress bar counts as done


def stages_for(tune: bool, task: str = "") -> tuple[str, ...]:
    if task == GR_TASK:
        return GR_STAGES
    return STAGES + ((TUNE_STAGE,) if tune else ())


def stage_rows(tune: dict | None, task: str = "") -> list[dict]:
    """A build's stage records as it starts: every stage pending."""
    return [
        {"name": s, "status": str(StageStatus.PENDING), "started_at": None, "duration_s": None, "log": ""}
        for s in stages_for(bool(tune), task)
    ]


def stage_weight(stage: str, tune: bool, task: str = "") -> float:
    """A stage's share of the progress bar (0-100) in a build with or without a tune."""
    weights = GR_STAGE_WEIGHTS if task == GR_TASK else {**STAGE_WEIGHTS, TUNE_STAGE: TUNE_WEIGHT}
    total = sum(weights[s] for s in stages_for(tune, task))
    return 100.0 * weights[stage] / total


def queue_for(targets: list[str]) -> str:
    """Builds with a GPU target go to build-gpu workers, the rest to build-cpu."""
    return "build-gpu" if any(t in GPU_VARIANTS or t in GR_GPU_TARGETS for t in targets) else "build-cpu"
