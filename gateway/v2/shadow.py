"""Shadow traffic: a copy of a served request sent to each shadow variant of the endpoint
(sampled at the endpoint's `shadow_sample_rate`), from a bounded queue drained by a fixed
number of workers. A full queue drops the copy (counted); a shadow never slows or fails the
primary request, and its replies only feed metrics and prediction scores."""

from __future__ import annotations

import asyncio
import logging
from time import perf_counter

from gateway.kserve.tensors import Parsed
from gateway.table.breaker import Breakers
from gateway.telemetry import metrics
from gateway.telemetry.scores import ScoreSampler
from gateway.v2.failover import UNAVAILABLE_STATUSES
from gateway.wire.upstream import UpstreamError

log = logging.getLogger("gateway")


class Shadows:
    def __init__(self, max_queue: int, breakers: Breakers, scores: ScoreSampler):
        self.queue: asyncio.Queue | None = None
        self.max_queue = max_queue
        self.breakers = breakers
        self.scores = scores

    def start(self) -> None:
        self.queue = asyncio.Queue(maxsize=self.max_queue)
        metrics.SHADOW_QUEUE.set_function(self.queue.qsize)

    def offer(self, ep, payload, parsed: Parsed, send=None) -> None:
        """Queue a copy for each shadow that can take this request. `payload` is what
        `send(ep_name, shadow, entry, payload, timeout) -> result label` sends (default:
        HTTP, payload (body, forwarded headers); the gRPC service passes its own)."""
        send = send or self._send
        queue = self.queue
        for shadow in ep.shadows:
            if shadow.signature is not None and shadow.signature.check(parsed) is not None:
                # the primary took this request and the shadow's model cannot: the shadow's failure
                metrics.SHADOW_REQUESTS.labels(ep.name, shadow.name, "incompatible").inc()
                continue
            try:
                queue.put_nowait((ep.name, shadow, payload, ep.timeout_s, send))
            except asyncio.QueueFull:
                metrics.SHADOW_DROPPED.labels(ep.name, shadow.name).inc()

    async def worker(self) -> None:
        queue = self.queue
        while True:
            ep_name, shadow, payload, timeout, send = await queue.get()
            entry = shadow.pick()
            if entry is None:
                metrics.SHADOW_REQUESTS.labels(ep_name, shadow.name, "unavailable").inc()
                continue
            t0 = perf_counter()
            try:
                result = await send(ep_name, shadow, entry, payload, shadow.attempt_timeout_s or timeout)
            except Exception:  # a shadow never takes the worker down
                log.exception("shadow copy failed")
                result = "error"
            metrics.SHADOW_REQUESTS.labels(ep_name, shadow.name, result).inc()
            metrics.SHADOW_LATENCY.labels(ep_name, shadow.name).observe(perf_counter() - t0)

    async def _send(self, ep_name: str, shadow, entry, payload: tuple, timeout: float) -> str:
        state, line = entry[0], entry[1]
        body, up_headers = payload
        state.outstanding += 1
        try:
            status, rheaders, reply = await state.pool.request(line + up_headers, body, timeout)
            if status == 200:
                self.scores.maybe_observe(ep_name, shadow.name, rheaders, reply, candidate=True)
            if status in UNAVAILABLE_STATUSES:
                self.breakers.failed(state)
            else:
                state.failures = 0
            return str(status)
        except TimeoutError:
            self.breakers.failed(state)
            return "timeout"
        except (UpstreamError, OSError):
            self.breakers.failed(state)
            return "error"
        except Exception:  # a shadow never takes the worker down
            log.exception("shadow copy failed")
            return "error"
        finally:
            state.outstanding -= 1
