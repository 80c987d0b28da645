"""A recorded trace replayed as an endpoint's traffic at any rate, with a fault injected into
the candidate, into the gateway's counters (bench/judge/adapter.py) second by second.

Resampling. Replay second t reads recorded second r(t): a block bootstrap of the recording
in blocks of `block_s` seconds (each block starts at a random recorded second), so load
spikes keep their length, and every variant's requests of second t are drawn from the SAME
recorded second: what the host did to both arms at one moment stays shared, and what one
process did differently stays its own. Each variant gets Poisson(rate x share) requests a
second, each one a recorded request of the arm that plays it (drawn with replacement), so a
trace recorded at 150 req/s stands for 20, 200 or 2,000 req/s with its own noise (what a
higher rate would add in queueing is not in it). Which recorded arm plays the stable, the
baseline and the candidate is drawn per seed.

The gateway's semantics (gateway/v2/infer.py, gateway/v2/failover.py): a canary or baseline
attempt that fails (a recorded failover, an injected error, latency past the attempt
timeout of 500 ms, an outage) is failed over to the stable: the gateway counts it under the
stable with the whole request's time (or the stable's own error when it fails too) and adds
one to gateway_failovers_total{from_variant}; scores are sampled at the gateway's rates (the
candidate and baseline every reply, the stable at max(5 %, the candidate's weight over its own)).
"""

from __future__ import annotations

import numpy as np

from bench.judge.adapter import CANDIDATE, STABLE, VARIANTS, GatewayCounters, shares
from bench.judge.faults import Fault
from bench.judge.traces import Trace
from deployments.rollout_machine import Split

ATTEMPT_TIMEOUT_S = 0.5  # gateway/table/routes.py: a canary's or baseline's attempt timeout is half the endpoint's 1 s
OUTAGE_LATENCY_S = 0.0005  # a refused connection answers at once
STABLE_SCORE_RATE = 0.05  # gateway/telemetry/scores.py GATEWAY_SCORE_SAMPLE_RATE's default


class Traffic:
    def __init__(self, trace: Trace, *, rate: float, fault: Fault, seed: int, block_s: int = 10, arm_of=None):
        self.trace, self.rate, self.fault, self.block_s = trace, rate, fault, block_s
        self.rng = np.random.default_rng(seed)
        arms = self.rng.permutation(3)
        # which recorded arm plays each variant (`arm_of`: given, e.g. one process for two variants)
        self.arm_of = dict(arm_of) if arm_of else dict(zip(VARIANTS, arms.tolist()))
        self._blocks: list[int] = []
        ok = trace.status == 200
        arm_latency = trace.latency_s[ok & (trace.arm == self.arm_of[CANDIDATE])]
        self.threshold_s = (
            float(np.quantile(arm_latency, fault.at)) if fault.kind == "latency" and fault.at > 0 else 0.0
        )

    def recorded_second(self, t: int) -> int:
        block = t // self.block_s
        while len(self._blocks) <= block:
            self._blocks.append(int(self.rng.integers(0, max(self.trace.seconds - self.block_s, 1))))
        return self._blocks[block] + t % self.block_s

    def second(self, t: int, split: Split, counters: GatewayCounters) -> None:
        """The requests of replay second [t, t + 1) (t from the candidate's first traffic) into `counters`."""
        rng, trace, fault = self.rng, self.trace, self.fault
        recorded = self.recorded_second(t)
        share = shares(split)
        stable_score_rate = STABLE_SCORE_RATE
        if split.stable_bp > 0:
            stable_score_rate = max(
                STABLE_SCORE_RATE, min(1.0, max(split.baseline_bp, split.candidate_bp) / split.stable_bp)
            )
        outage = fault.outage(t)
        for variant in VARIANTS:
            n = int(rng.poisson(self.rate * share[variant]))
            if n == 0:
                continue
            rows = trace.draw(rng, self.arm_of[variant], np.full(n, recorded))
            latency = trace.latency_s[rows]
            status = trace.status[rows].astype(int)
            scores = trace.score[rows]
            if variant == STABLE:
                failed = np.full(n, outage)
            else:
                failed = trace.failover[rows].copy()
                if variant == CANDIDATE:
                    latency = np.where(failed, latency, fault.latency(latency, self.threshold_s, t, rng))
                    scores = fault.scores(scores)
                    failed |= fault.attempt_errors(n, rng)
                timed_out = ~failed & (latency > ATTEMPT_TIMEOUT_S)
                failed |= timed_out | outage
                # the whole request's time when it fails over: the failed attempt, then the stable's answer
                attempt = np.where(timed_out, ATTEMPT_TIMEOUT_S, latency)
            if outage:
                latency = np.full(n, OUTAGE_LATENCY_S)
            served = ~failed
            counters.answered(variant, latency[served], status[served])
            keep = served & (rng.random(n) < (stable_score_rate if variant == STABLE else 1.0))
            counters.scored(variant, scores[keep])
            moved = int(failed.sum())
            if not moved:
                continue
            if variant == STABLE:  # one replica: nothing to retry on
                counters.answered(STABLE, latency[failed], np.full(moved, 503))
                continue
            slow = int((failed & timed_out).sum())
            if outage:  # the stable fails too: the gateway's 503 under the stable
                counters.failed_over(variant, moved - slow, "5xx", retry_failed=moved - slow)
                counters.failed_over(variant, slow, "timeout", retry_failed=slow)
                counters.answered(STABLE, np.full(moved, 2 * OUTAGE_LATENCY_S), np.full(moved, 503))
                continue
            counters.failed_over(variant, moved - slow, "5xx")
            counters.failed_over(variant, slow, "timeout")
            recorded_failover = trace.failover[rows][failed]
            retry = trace.draw(rng, self.arm_of[STABLE], np.full(moved, recorded))
            total = np.where(recorded_failover, latency[failed], attempt[failed] + trace.latency_s[retry])
            counters.answered(STABLE, total, np.where(recorded_failover, status[failed], trace.status[retry]))
            sampled = rng.random(moved) < stable_score_rate
            counters.scored(STABLE, trace.score[retry][sampled & ~recorded_failover])
