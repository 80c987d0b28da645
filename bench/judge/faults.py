"""The graded faults the judge's benchmark injects into the candidate (bench/judge/replay.py
applies them), each with its ground truth: whether rolling the candidate back is right
(`harmful`) and whether it is one of the goals' critical faults (>= 5 % errors, >= +50 % p50,
an SLO breach: recall 100 %, precision >= 95 %).

latency at pQ +x %   the candidate's latency distribution moved by x % at quantile Q: at p50
                     every request is x % slower; at p75 the requests above the arm's
                     recorded p50 are (so p75 moves by x %, p50 does not); at p99 those
                     above its p98. Harmful: the candidate is slower (the judge's margin
                     decides from what size it acts; the table shows where it does).
errors x %           x % of the candidate's attempts fail (Triton 5xx); the gateway fails
                     each over to the stable, so clients see a 200 (a broken model all the same).
tail                 2 % of the candidate's requests 100 ms slower: its p99 over the 50 ms
                     SLO while its p50 and p75 hold (the int8 candidate of the issue). Critical.
score drift          the candidate's prediction scores shifted by +1 on the logit scale
                     (PSI ~0.5 on the recorded scores, over the 0.25 threshold).
cold cache           the candidate starts 3x slower and warms (time constant 15 s): healthy,
                     a rollback is a false one.
shared outage        every variant fails for 15 s (the pool's only replica down), from 20 s
                     after the candidate's first request: nobody's fault, a rollback is a
                     false one (the goal: never blamed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Fault:
    name: str
    kind: str  # none | latency | errors | tail | drift | cold | outage
    size: float = 0.0  # relative slowdown, error probability, logit shift, ...
    at: float = 0.0  # latency: the recorded quantile above which requests slow down
    harmful: bool = True  # a rollback is right
    critical: bool = False
    start_s: float = 0.0  # outage: when, from the candidate's first request
    end_s: float = 0.0

    def latency(self, latency_s: np.ndarray, threshold_s: float, t_s: float, rng: np.random.Generator) -> np.ndarray:
        """The candidate's latencies under this fault (requests of second `t_s`)."""
        if self.kind == "latency":
            return np.where(latency_s >= threshold_s, latency_s * (1 + self.size), latency_s)
        if self.kind == "tail":
            return latency_s + np.where(rng.random(len(latency_s)) < self.size, 0.100, 0.0)
        if self.kind == "cold":
            return latency_s * (1 + 2.0 * np.exp(-t_s / 15.0))
        return latency_s

    def scores(self, scores: np.ndarray) -> np.ndarray:
        if self.kind != "drift":
            return scores
        clipped = np.clip(scores, 1e-6, 1 - 1e-6)
        return 1 / (1 + np.exp(-(np.log(clipped / (1 - clipped)) + self.size)))

    def attempt_errors(self, count: int, rng: np.random.Generator) -> np.ndarray:
        return rng.random(count) < self.size if self.kind == "errors" else np.zeros(count, dtype=bool)

    def outage(self, t_s: float) -> bool:
        return self.kind == "outage" and self.start_s <= t_s < self.end_s


HEALTHY = Fault("A/A", "none", harmful=False)
QUANTILE_AT = {"p50": 0.0, "p75": 0.50, "p99": 0.98}


def catalogue() -> list[Fault]:
    """Every fault class the benchmark injects (A/A apart)."""
    faults = [
        Fault(
            f"latency {where} +{size:g}%",
            "latency",
            size / 100,
            QUANTILE_AT[where],
            critical=where == "p50" and size >= 50,
        )
        for where in QUANTILE_AT
        for size in (1, 5, 20, 50)
    ]
    faults += [Fault(f"errors {size:g}%", "errors", size / 100, critical=size >= 5) for size in (0.5, 1, 5)]
    faults += [
        Fault("tail 2% +100ms (SLO breach)", "tail", 0.02, critical=True),
        Fault("score drift (logit +1)", "drift", 1.0),
        Fault("cold cache (3x, warms in ~15 s)", "cold", harmful=False),
        Fault("shared outage 15 s", "outage", harmful=False, start_s=20.0, end_s=35.0),
    ]
    return faults


def by_name(name: str) -> Fault:
    if name == HEALTHY.name:
        return HEALTHY
    for fault in catalogue():
        if fault.name == name:
            return fault
    raise KeyError(f"no fault class {name!r}")
