"""Build settings: Django settings win, else the environment, else these defaults
(config.conf.setting). Read at call time so tests can shorten leases (settings fixture
in-process, environment for worker processes).
"""

from config.conf import setting

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
    "BUILD_FP32_MAX_ABS": 1e-5,
    "BUILD_LOWP_MAX_AUC_LOSS": 0.001,
    "BUILD_INT_INPUT_HIGH": 1_000_000,  # seeded integer inputs are drawn from [0, this)
}


def get(name: str):
    return setting(name, DEFAULTS[name])


def bench_batches() -> list[int]:
    raw = get("BUILD_BENCH_BATCHES")
    if isinstance(raw, (list, tuple)):
        return [int(b) for b in raw]
    return [int(b) for b in str(raw).split(",") if b.strip()]
