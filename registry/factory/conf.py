"""Build settings, declared once each (kernel/conf.py: a Django setting wins, else the
environment, else these defaults). Read at call time so tests can shorten leases (settings fixture
in-process, environment for worker processes).
"""

from kernel.conf import Setting, declare, getter
from registry.factory import numerics

SETTINGS = declare(
    "factory",
    Setting("BUILD_LEASE_SECONDS", 60.0, "a running build's lease; renewed by a heartbeat"),
    Setting("BUILD_MAX_ATTEMPTS", 3, "attempts of one build before it fails (a worker that dies mid-build costs one)"),
    Setting("BUILD_SOFT_TIME_LIMIT_S", 1800, "a build task's soft time limit"),
    Setting("BUILD_TIME_LIMIT_S", 1900, "a build task's hard time limit"),
    Setting("BUILD_RECLAIM_BATCH", 20, "builds with an expired lease taken back per sweep"),
    Setting("BUILD_QUEUED_REDISPATCH_S", 600.0, "a queued build nobody claimed for this long is sent again"),
    Setting("BUILD_OPSET", 17, "the ONNX opset exports target"),
    Setting("BUILD_VALIDATION_ROWS", 4096, "synthetic rows a variant's outputs are compared on"),
    Setting("BUILD_BENCH_BATCHES", "1,8,32,128,512", "batch sizes the benchmark stage measures"),
    Setting("BUILD_BENCH_SECONDS", 0.5, "wall time per (variant, batch size), after warm-up"),
    Setting("BUILD_BENCH_MAX_ITERS", 2000, "iterations per (variant, batch size) at most"),
    Setting("BUILD_BENCH_THREADS", 1, "threads of the benchmark's ONNX Runtime session"),
    Setting("BUILD_MAX_BATCH_SIZE", 512, "the largest batch a built variant declares"),
    Setting("BUILD_GPU_BENCH_BATCHES", "1,32,512,4096", "batch sizes of GPU variants, on a build-gpu worker"),
    Setting(
        "BUILD_FP32_MAX_ABS", numerics.FP32_MAX_ABS, "fp32 variants: the largest absolute difference from the reference"
    ),
    Setting(
        "BUILD_FP16_MAX_ABS", numerics.FP16_MAX_ABS, "fp16 variants: the largest absolute difference from the reference"
    ),
    Setting(
        "BUILD_FP16_MAX_AUC_LOSS",
        numerics.FP16_MAX_AUC_LOSS,
        "fp16 variants: the largest AUC loss on the validation set",
    ),
    Setting(
        "BUILD_LOWP_MAX_AUC_LOSS",
        numerics.LOWP_MAX_AUC_LOSS,
        "int8 and other low-precision variants: the largest AUC loss",
    ),
    Setting("BUILD_INT_INPUT_HIGH", 1_000_000, "synthetic integer inputs are drawn from [0, this) at most"),
    Setting("BUILD_DYNAMIC_DIM_SIZE", 4, "synthetic inputs: the size of a dynamic non-batch dimension"),
    Setting("TUNE_BUDGET_S", 120.0, "tune stage: wall time of the search per build, over its variants"),
    Setting("TUNE_MAX_TRIALS", 24, "tune stage: configs measured per variant at most (the default config included)"),
    Setting("TUNE_WINDOW_S", 0.8, "tune stage: one closed-loop window of the concurrency sweep"),
    Setting("TUNE_OPEN_WINDOW_S", 1.2, "tune stage: one open-loop window of the rate search"),
    Setting("TUNE_OPEN_WINDOWS", 4, "tune stage: open-loop windows per trial at most"),
    Setting("TUNE_LEVELS", "1,2,4,8,16,32,64", "tune stage: concurrency levels of the sweep"),
    Setting("TUNE_BODIES", 64, "tune stage: distinct single-row request bodies the load cycles over"),
    Setting("BUILD_GR_HOLDOUT_USERS", 256, "generative recommender builds: users of the beam gates' holdout"),
    Setting("BUILD_GR_BEAM_WIDTH", 32, "generative recommender builds: the served beam width the gates judge at"),
    Setting(
        "BUILD_GR_MIN_OVERLAP",
        0.86,
        "generative recommender builds: beam-set overlap with fp32 at least (gates.py says why)",
    ),
    Setting(
        "BUILD_GR_MIN_TOP_IN_BEAM",
        0.95,
        "generative recommender builds: share of users whose fp32 top item is in the beam, at least",
    ),
    Setting("BUILD_GR_MAX_HR_DROP", 0.02, "generative recommender builds: HR@10 below fp32's by at most"),
    Setting(
        "BUILD_GR_CACHE_MB", 64, "generative recommender builds: a packaged variant's prefix cache bound per replica"
    ),
    Setting(
        "BUILD_MEMORY_LIMIT_MB",
        4096,
        "the memory limit of the child process that runs a build's stages (over it: the build fails with the reason)",
    ),
    Setting("BUILD_CPU_LIMIT_S", 600, "the CPU-time limit of that child process"),
)
get = getter(SETTINGS)


def bench_batches(name: str = "BUILD_BENCH_BATCHES") -> list[int]:
    raw = get(name)
    if isinstance(raw, (list, tuple)):
        return [int(b) for b in raw]
    return [int(b) for b in str(raw).split(",") if b.strip()]


def tolerance(variant: str) -> numerics.Tolerance:
    """The tolerance `variant` is validated against, with this deployment's settings."""
    return numerics.tolerance_for(
        numerics.VARIANT_KIND.get(variant, "lowp"),
        fp32_max_abs=float(get("BUILD_FP32_MAX_ABS")),
        fp16_max_abs=float(get("BUILD_FP16_MAX_ABS")),
        fp16_max_auc_loss=float(get("BUILD_FP16_MAX_AUC_LOSS")),
        lowp_max_auc_loss=float(get("BUILD_LOWP_MAX_AUC_LOSS")),
    )
