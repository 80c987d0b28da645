"""Latency data for the judge's tests: histogram buckets from samples, per-tick windows."""

import math

import numpy as np

from monitoring.judge.evidence import ArmWindow
from tests.monitoring.conftest import BUCKETS

EDGES = (*BUCKETS, math.inf)


def bucketize(latencies_s) -> dict[float, float]:
    """Non-cumulative bucket counts, every bucket (empty ones at 0: each bucket's lower bound is known)."""
    counts = np.bincount(np.searchsorted(EDGES, latencies_s, side="left"), minlength=len(EDGES))
    return {edge: float(c) for edge, c in zip(EDGES, counts)}


def ticked(latencies_s, ticks: int) -> ArmWindow:
    """A window of `ticks` equal ticks (no errors), latency buckets per tick and in total."""
    parts = np.array_split(np.asarray(latencies_s), ticks)
    return ArmWindow(
        ticks=[(float(len(p)), 0.0) for p in parts],
        latency_buckets=bucketize(latencies_s),
        latency_ticks=[bucketize(p) for p in parts],
    )


def latencies(rng, n, scale=1.0):
    """Lognormal around 3 ms with a 1 % Pareto tail (heavy-tailed, like real serving)."""
    x = rng.lognormal(math.log(0.003), 0.4, n)
    tail = rng.random(n) < 0.01
    x[tail] = 0.003 * (1 + rng.pareto(1.5, tail.sum()))
    return x * scale
