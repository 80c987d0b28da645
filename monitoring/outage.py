"""Shared outages: ticks in which the pool serving both arms failed, judged for nobody.

A tick is a shared outage when the candidate's failed attempts mostly failed on the stable
too (its `shared_failures`, the gateway's gateway_failovers_failed: at least
`outage_min_failures` of them and at least as many as the candidate's own errors, so a
broken candidate beside a stable with a few errors of its own is not one), or, where the
source does not count failed failovers, when both the candidate and its control failed at
least half their requests in the tick (each at least `outage_min_failures`). Such ticks are
taken out of every check of both arms (errors, the SLO guardrails, the latency windows); a
verdict whose latest tick is one says "shared outage: not judged" and holds the step
(monitoring/judge.py), and the alert names the pool (monitoring/services/canary.py).

The selection looks at both arms' failures in the same tick, so it is not independent of the
candidate's errors: it removes only ticks where the control failed as much or more, which
can only lower the evidence against the candidate (the error tests stay conservative).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from monitoring.evidence import ArmWindow, JudgeConfig

NOT_JUDGED = "shared outage: not judged"  # how a verdict held by one starts (services match it)


def _pairs(ticks) -> np.ndarray:
    return np.asarray(ticks, dtype=float).reshape(-1, 2)


def outage_ticks(control: ArmWindow, candidate: ArmWindow, config: JudgeConfig) -> np.ndarray:
    """Per tick of the candidate's window: whether it was a shared outage."""
    cand = _pairs(candidate.ticks)
    mask = np.zeros(len(cand), dtype=bool)
    if len(candidate.shared_failures) == len(cand) and len(cand):
        shared = np.asarray(candidate.shared_failures, dtype=float)
        mask |= (shared >= config.outage_min_failures) & (shared >= cand[:, 1])
    ctrl = _pairs(control.ticks)
    if len(ctrl) == len(cand) and len(cand):
        floor = config.outage_min_failures
        both = (
            (ctrl[:, 1] >= floor)
            & (cand[:, 1] >= floor)
            & (2 * ctrl[:, 1] >= ctrl[:, 0])
            & (2 * cand[:, 1] >= cand[:, 0])
        )
        mask |= both
    return mask


def without(arm: ArmWindow, mask: np.ndarray) -> ArmWindow:
    """The arm with the masked ticks emptied (kept as ticks with nothing in them, so the
    windows stay aligned); its latency totals lose those ticks' histograms."""
    if not mask.any() or len(arm.ticks) != len(mask):
        return arm
    ticks = [(0.0, 0.0) if m else t for t, m in zip(arm.ticks, mask)]
    latency_ticks, buckets = arm.latency_ticks, arm.latency_buckets
    if len(arm.latency_ticks) == len(mask):
        latency_ticks = [({} if m else h) for h, m in zip(arm.latency_ticks, mask)]
        buckets = {}
        for h in latency_ticks:
            for le, n in h.items():
                buckets[le] = buckets.get(le, 0.0) + n
    shared = [0.0 if m else x for x, m in zip(arm.shared_failures, mask)] if arm.shared_failures else []
    return replace(arm, ticks=ticks, latency_ticks=latency_ticks, latency_buckets=buckets, shared_failures=shared)


def latest(mask: np.ndarray, ticks: int = 1) -> bool:
    """Whether one of the last `ticks` ticks was a shared outage."""
    return bool(len(mask) and mask[-ticks:].any())


def summary(control: ArmWindow, candidate: ArmWindow, mask: np.ndarray) -> dict:
    """The shared-outage check's evidence: ticks set aside and what failed in them."""
    cand = _pairs(candidate.ticks)
    ctrl = _pairs(control.ticks)
    shared = np.asarray(candidate.shared_failures or [0.0] * len(cand), dtype=float)
    pick = mask if len(mask) == len(cand) else np.zeros(len(cand), dtype=bool)
    return {
        "ticks_set_aside": int(pick.sum()),
        "ticks": len(cand),
        "shared_failures": float(shared[pick].sum()) if len(shared) == len(pick) else 0.0,
        "control_errors": float(ctrl[pick, 1].sum()) if len(ctrl) == len(pick) else None,
        "ongoing": latest(pick),
    }
