"""Circuit breakers per (Triton server, model): a replica is ejected after
`breaker_failures` consecutive backend failures, probed (GET /v2/models/{model}/ready)
once its cooldown has passed, closed on success, and its cooldown doubled (up to
`breaker_max_cooldown_s`) on failure. The state lives in routes.ReplicaState, kept across
route-table reloads."""

from __future__ import annotations

import asyncio
import logging
import time

from gateway.table.routes import ReplicaState
from gateway.telemetry import metrics
from gateway.wire.upstream import UpstreamError

log = logging.getLogger("gateway")


class Breakers:
    def __init__(self, settings, states: dict):
        self.failures_to_open = settings.breaker_failures
        self.cooldown_s = settings.breaker_cooldown_s
        self.max_cooldown_s = settings.breaker_max_cooldown_s
        self.states = states  # (base, model) -> ReplicaState, owned by the gateway

    def failed(self, state: ReplicaState, *, refused: bool = False) -> None:
        """One more consecutive backend failure of this replica's model."""
        state.failures += 1
        state.refused = refused
        if not state.broken and state.failures >= self.failures_to_open:
            state.broken = True
            state.cooldown = self.cooldown_s
            state.open_until = time.monotonic() + state.cooldown
            metrics.BREAKER_OPEN.labels(state.base, state.model).set(1)
            log.warning("circuit open for %s %s after %d consecutive failures", state.base, state.model, state.failures)

    def retry_wait(self, variant) -> float:
        """Seconds until a replica of `variant` may serve again: the soonest breaker probe
        (its cooldown), at least the base cooldown."""
        now = time.monotonic()
        waits = [entry[0].open_until - now for entry in variant.replicas if entry[0].broken]
        return max(self.cooldown_s, min(waits, default=0.0))

    async def probe_loop(self) -> None:
        """Probe ejected replicas after their cooldown; close the breaker on success,
        double the cooldown on failure."""
        while True:
            await asyncio.sleep(0.1)
            now = time.monotonic()
            due = [s for s in list(self.states.values()) if s.broken and s.open_until <= now]
            for state in due:
                await self._probe(state)

    async def _probe(self, state: ReplicaState) -> None:
        try:
            status, _, _ = await state.pool.request(state.ready_line, b"", 1.0)
            ok = status == 200
        except (TimeoutError, UpstreamError, OSError):
            ok = False
        if ok:
            state.broken = False
            state.failures = 0
            metrics.BREAKER_OPEN.labels(state.base, state.model).set(0)
            log.info("circuit closed for %s %s (probe ok)", state.base, state.model)
        else:
            state.cooldown = min(state.cooldown * 2, self.max_cooldown_s)
            state.open_until = time.monotonic() + state.cooldown
