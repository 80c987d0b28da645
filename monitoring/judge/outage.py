"""Shared outages: ticks in which the pool serving both arms failed, judged for nobody.

A tick is a shared outage when the candidate's failed attempts mostly failed on the stable
too (its `shared_failures`, the gateway's gateway_failovers_failed: at least
`outage_min_failures` of them and at least as many as the candidate's own errors, so a
broken candidate beside a stable with a few errors of its own is not one), or, where the
source does not count failed failovers, when both the candidate and its control failed at
least half their requests in the tick (each at least `outage_min_failures`). Such ticks are
taken out of every check of both arms (errors, the SLO guardrails, the latency windows); a
verdict whose latest tick is one says "shared outage: not judged" and holds the step
(monitoring/judge/verdict.py), and the alert names the pool (monitoring/services/canary.py).

Its recovery is set aside too. When the pool's replica comes back, each model is served again
only once it is loaded and the gateway's breaker for it has probed it ready (its backoff
doubles up to 8 s while the replica is down, each model's on its own schedule), so for a
few ticks one arm can be served while the other is still refused: the candidate's attempts
fail over to a stable that answers, and read as the candidate's errors (on real processes,
after the restart every request of the candidate and of its baseline failed over with reason
"unavailable" for two ticks while the stable answered; the candidate's breaker may close
ticks after its control's). So a tick right after a shared-outage tick (or after one of its recovery
ticks) in which the candidate's unreached errors (`unreached_errors`: attempts that never
reached its model, gateway reasons connect, not_loaded, unavailable) are at least
`outage_min_failures` and at least half its errors is a recovery tick, set aside like the
outage, for at most `outage_recovery_ticks` ticks. A candidate that fails after the outage
with errors that reached its model (5xx, timeouts) ends the recovery at once and is judged;
one whose model never gets served again is judged after the cap.

The selection looks at both arms' failures in the same tick, so it is not independent of the
candidate's errors: it removes only ticks where the control failed as much or more, or where
the candidate's errors were mostly attempts that never reached its model right after such a
tick, which can only lower the evidence against the candidate (the error tests stay conservative).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from monitoring.judge.evidence import ArmWindow, JudgeConfig

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
    return _with_recovery(mask, cand, candidate.unreached_errors, config)


def _with_recovery(mask: np.ndarray, cand: np.ndarray, unreached: list[float], config: JudgeConfig) -> np.ndarray:
    """The outage ticks plus, after each run of them, its recovery ticks (the module's docstring)."""
    if len(unreached) != len(cand) or not mask.any():
        return mask
    out, run = mask.copy(), None  # run: recovery ticks so far after the last outage tick
    for i in range(len(cand)):
        if mask[i]:
            run = 0
            continue
        lost = unreached[i]
        if run is None or run >= config.outage_recovery_ticks:
            run = None
        elif lost >= config.outage_min_failures and 2 * lost >= cand[i, 1]:
            out[i], run = True, run + 1
        else:
            run = None
    return out


def recovery_ticks(outage: np.ndarray, control: ArmWindow, candidate: ArmWindow, config: JudgeConfig) -> int:
    """How many of the ticks set aside are an outage's recovery rather than the outage itself."""
    return int(outage.sum() - _outage_only(control, candidate, config).sum())


def _outage_only(control: ArmWindow, candidate: ArmWindow, config: JudgeConfig) -> np.ndarray:
    return outage_ticks(control, replace(candidate, unreached_errors=[]), config)


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
    unreached = [0.0 if m else x for x, m in zip(arm.unreached_errors, mask)] if arm.unreached_errors else []
    return replace(
        arm,
        ticks=ticks,
        latency_ticks=latency_ticks,
        latency_buckets=buckets,
        shared_failures=shared,
        unreached_errors=unreached,
    )


def latest(mask: np.ndarray, ticks: int = 1) -> bool:
    """Whether one of the last `ticks` ticks was a shared outage."""
    return bool(len(mask) and mask[-ticks:].any())


def summary(control: ArmWindow, candidate: ArmWindow, mask: np.ndarray, config: JudgeConfig) -> dict:
    """The shared-outage check's evidence: ticks set aside (of them, the recovery's) and what
    failed in them."""
    cand = _pairs(candidate.ticks)
    ctrl = _pairs(control.ticks)
    shared = np.asarray(candidate.shared_failures or [0.0] * len(cand), dtype=float)
    pick = mask if len(mask) == len(cand) else np.zeros(len(cand), dtype=bool)
    return {
        "ticks_set_aside": int(pick.sum()),
        "ticks": len(cand),
        "shared_failures": float(shared[pick].sum()) if len(shared) == len(pick) else 0.0,
        "control_errors": float(ctrl[pick, 1].sum()) if len(ctrl) == len(pick) else None,
        "recovery_ticks": recovery_ticks(pick, control, candidate, config) if pick.any() else 0,
        "unreached_errors": float(np.asarray(candidate.unreached_errors)[pick].sum())
        if len(candidate.unreached_errors) == len(pick)
        else 0.0,
        "ongoing": latest(pick),
    }
