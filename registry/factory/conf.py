"""Build settings: Django settings win, else the environment, else these defaults
(kernel.conf.setting). Read at call time so tests can shorten leases (settings fixture
in-process, environment for worker processes).
"""

from kernel.conf import setting
from registry.factory import numerics

DEFAULTS = {
    "BUILD_LEASE_SECONDS": 60.0,  # a running build's lease; renewed by a heartbeat
    "BUILD_MAX_ATTEMPTS": 3,
    "BUILD_SOFT_TIME_LIMIT_S": 1800,
    "BUILD_TIME_LIMIT_S": 1900,
    "BUILD_RECLAIM_BATCH": 20,
    "BUILD_QUEUED_REDISPATCH_S": 600.0,  # a queued build nobody claimed for this long is sent again
    "BUILD_OPSET": 17,
    "BUILD_VALIDATION_ROWS": 4096,
    "BUILD_BENCH_BATCHES": "1,8,32,128,512",
    "BUILD_BENCH_SECONDS": 0.5,  # wall time per (variant, batch size), after warm-up
    "BUILD_BENCH_MAX_ITERS": 2000,
    "BUILD_BENCH_THREADS": 1,
    "BUILD_MAX_BATCH_SIZE": 512,
    "BUILD_GPU_BENCH_BATCHES": "1,32,512,4096",  # GPU variants, on a build-gpu worker
    "BUILD_FP32_MAX_ABS": numerics.FP32_MAX_ABS,
    "BUILD_FP16_MAX_ABS": numerics.FP16_MAX_ABS,
    "BUILD_FP16_MAX_AUC_LOSS": numerics.FP16_MAX_AUC_LOSS,
    "BUILD_LOWP_MAX_AUC_LOSS": numerics.LOWP_MAX_AUC_LOSS,
    "BUILD_INT_INPUT_HIGH": 1_000_000,  # synthetic integer inputs are drawn from [0, this) at most
    "BUILD_DYNAMIC_DIM_SIZE": 4,  # synthetic inputs: the size of a dynamic non-batch dimension
    # The tune stage (builds that ask for it; registry/factory/tune/): defaults of a request
    # and how long each measuring window lasts.
    "TUNE_BUDGET_S": 120.0,  # wall time of the search per build, over its variants
    "TUNE_MAX_TRIALS": 24,  # configs measured per variant at most (the default config included)
    "TUNE_WINDOW_S": 0.8,  # one closed-loop window of the concurrency sweep
    "TUNE_OPEN_WINDOW_S": 1.2,  # one open-loop window of the rate search
    "TUNE_OPEN_WINDOWS": 4,  # open-loop windows per trial at most
    "TUNE_LEVELS": "1,2,4,8,16,32,64",  # concurrency levels of the sweep
    "TUNE_BODIES": 64,  # distinct single-row request bodies the load cycles over
    # Generative recommender builds (registry/factory/generative/): the beam gates' holdout,
    # the served beam width they judge at, and their thresholds (gates.py says why each).
    "BUILD_GR_HOLDOUT_USERS": 256,
    "BUILD_GR_BEAM_WIDTH": 32,
    "BUILD_GR_MIN_OVERLAP": 0.86,
    "BUILD_GR_MIN_TOP_IN_BEAM": 0.95,
    "BUILD_GR_MAX_HR_DROP": 0.02,
    "BUILD_GR_CACHE_MB": 64,  # a packaged variant's prefix cache bound per replica
    # Each build's stages run in one child process with these limits (registry/factory/box.py).
    "BUILD_MEMORY_LIMIT_MB": 4096,
    "BUILD_CPU_LIMIT_S": 600,
}


def get(name: str):
    return setting(name, DEFAULTS[name])


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
