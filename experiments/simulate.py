"""Vectorised simulation of continuously monitored experiments (tests and the benchmark).

Units arrive in `looks` batches; each unit sees 1 + Poisson(m - 1) exposures and clicks
each with its own CTR drawn from a Beta around the arm's rate (users differ, which is why
CTR is analysed as a per-unit ratio metric). Returns per-look *cumulative* sufficient
statistics, shape [sims, looks], for every arm — what a store's GROUP BY would return.
"""

from __future__ import annotations

import numpy as np

from experiments import analysis


def simulate(
    rng: np.random.Generator,
    *,
    sims: int,
    looks: int,
    units_per_look: int,
    rates: dict[str, float],
    allocation: dict[str, float],
    exposures_per_unit: float = 3.0,
    heterogeneity: float = 50.0,
    batch: int = 50,
) -> dict[str, dict[str, np.ndarray]]:
    names = list(rates)
    p = np.array([allocation[a] for a in names], dtype=float)
    out = {a: {k: np.zeros((sims, looks)) for k in analysis.SUMS} for a in names}
    for lo in range(0, sims, batch):
        hi = min(sims, lo + batch)
        # Units per arm per look: a multinomial split of each look's arrivals.
        split = rng.multinomial(units_per_look, p, size=(hi - lo, looks))  # [b, looks, arms]
        for i, a in enumerate(names):
            size = int(split[..., i].max())
            mask = np.arange(size) < split[..., i][..., None]  # [b, looks, size]
            n = (1 + rng.poisson(exposures_per_unit - 1, size=mask.shape)) * mask
            if heterogeneity:
                r = rates[a]
                pu = rng.beta(r * heterogeneity, (1 - r) * heterogeneity, size=mask.shape)
            else:
                pu = rates[a]
            c = rng.binomial(n, pu)
            s = analysis.sums_from_units(n, c)
            for k in analysis.SUMS:
                out[a][k][lo:hi] = np.cumsum(s[k], axis=-1)
    return out


def first_decision(decisions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per simulation: the first non-'continue' decision and the look it came at (-1 if none)."""
    decided = decisions != analysis.ArmDecision.CONTINUE
    any_ = decided.any(axis=-1)
    look = np.where(any_, decided.argmax(axis=-1), -1)
    first = np.where(any_, decisions[np.arange(len(look)), np.maximum(look, 0)], analysis.ArmDecision.CONTINUE)
    return first, look
