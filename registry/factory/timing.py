"""Latency measurement shared by the build's benchmark stage and the benchmarks in bench/
(no Django imports: `python -m bench gpu` runs it on hosts without Django)."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np


def measure(
    call: Callable[[], object], batch: int, *, seconds: float, max_iters: int, raw: bool = False, warmup: int = 3
):
    """Latency p50/p99 (ms) and throughput (rows/s) of `call` in this thread (raw=True:
    the latencies in ms). `throughput_rps` is batch x calls / time spent in them;
    `throughput_p50_rps` is batch / p50 (robust to other processes' interference)."""
    for _ in range(warmup):
        call()
    times = []
    deadline = time.perf_counter() + seconds
    while len(times) < max_iters and (time.perf_counter() < deadline or len(times) < 5):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    lat = np.array(times) * 1000.0
    if raw:
        return lat
    return summary(lat, batch)


def summary(lat_ms: np.ndarray, batch: int) -> dict:
    p50 = float(np.percentile(lat_ms, 50))
    return {
        "p50_ms": p50,
        "p99_ms": float(np.percentile(lat_ms, 99)),
        "throughput_rps": float(batch * lat_ms.size / (lat_ms.sum() / 1000.0)),
        "throughput_p50_rps": float(batch / (p50 / 1000.0)) if p50 > 0 else float("inf"),
        "iterations": int(lat_ms.size),
    }
