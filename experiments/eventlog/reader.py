"""A synchronous reader of the NATS JetStream log for the ingest (Django code is synchronous).

nats-py is asyncio: the reader runs its own event loop in a thread and each method waits for
its coroutine there, so the ingest reads like the Redis one (fetch, store, acknowledge).

Consumers are durable and explicit-ack: what was fetched and not acknowledged (the store was
down, the process died) is delivered again, so nothing is lost; `nak(delay)` hands a message
back at once to be redelivered after the delay. Exposures: one consumer over every team's
exposure subjects. Feedback: one consumer per source subject, so the ingest takes a fair share
from each (experiments/services/log_ingest.py) and knows each source's backlog.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading

from experiments.eventlog import contract

EXPOSURE_CONSUMER = "ingest-exposures"
ACK_WAIT_S = 60.0  # a fetched message not acknowledged within this is delivered again


class NatsReader:
    def __init__(self, url: str, prefix: str):
        self.url, self.prefix = url, prefix
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="nats-reader", daemon=True)
        self.thread.start()
        self.subs: dict[str, object] = {}
        self.nc = self.js = None
        self._call(self._connect())

    def _call(self, coro, timeout: float = 30.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _connect(self):
        import nats

        self.nc = await nats.connect(self.url, connect_timeout=2, max_reconnect_attempts=-1, reconnect_time_wait=0.5)
        self.js = self.nc.jetstream(timeout=10)
        await contract.ensure_streams(self.js, self.prefix)

    @property
    def exposure_stream(self) -> str:
        return contract.stream_name(self.prefix, contract.EXPOSURES)

    @property
    def feedback_stream(self) -> str:
        return contract.stream_name(self.prefix, contract.FEEDBACK)

    async def _sub(self, key: str, subject: str, stream: str):
        if key not in self.subs:
            from nats.js.api import AckPolicy, ConsumerConfig

            config = ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=ACK_WAIT_S, max_ack_pending=-1)
            self.subs[key] = await self.js.pull_subscribe(subject, durable=key, stream=stream, config=config)
        return self.subs[key]

    @staticmethod
    def durable(subject: str) -> str:
        return "fb-" + hashlib.sha1(subject.encode()).hexdigest()[:24]

    async def _fetch(self, key, subject, stream, batch: int, timeout: float):
        import nats.errors

        sub = await self._sub(key, subject, stream)
        try:
            return await sub.fetch(batch, timeout=timeout)
        except (TimeoutError, nats.errors.TimeoutError):
            return []

    def exposures(self, batch: int, timeout: float = 0.2) -> list:
        return self._call(
            self._fetch(
                EXPOSURE_CONSUMER, f"{self.prefix}.{contract.EXPOSURES}.>", self.exposure_stream, batch, timeout
            )
        )

    def feedback(self, subject: str, batch: int, timeout: float = 0.2) -> list:
        return self._call(self._fetch(self.durable(subject), subject, self.feedback_stream, batch, timeout))

    def feedback_subjects(self) -> list[str]:
        async def go():
            info = await self.js.stream_info(
                self.feedback_stream, subjects_filter=f"{self.prefix}.{contract.FEEDBACK}.>"
            )
            return sorted((info.state.subjects or {}).keys())

        return self._call(go())

    def waiting(self, subject: str) -> int:
        """Messages of a feedback subject not yet acknowledged (its backlog)."""

        async def go():
            await self._sub(self.durable(subject), subject, self.feedback_stream)
            info = await self.js.consumer_info(self.feedback_stream, self.durable(subject))
            return int(info.num_pending) + int(info.num_ack_pending)

        return self._call(go())

    def exposures_waiting(self) -> tuple[int, float | None]:
        """(messages not yet acknowledged, unix time of the oldest of them or None)."""

        async def go():
            await self._sub(EXPOSURE_CONSUMER, f"{self.prefix}.{contract.EXPOSURES}.>", self.exposure_stream)
            info = await self.js.consumer_info(self.exposure_stream, EXPOSURE_CONSUMER)
            waiting = int(info.num_pending) + int(info.num_ack_pending)
            if not waiting:
                return 0, None
            try:
                msg = await self.js.get_msg(self.exposure_stream, seq=int(info.ack_floor.stream_seq) + 1)
            except Exception:  # noqa: BLE001 - aged out or deleted: no floor to keep
                return waiting, None
            return waiting, msg.time.timestamp() if getattr(msg, "time", None) else None

        return self._call(go())

    def ack(self, msgs: list) -> None:
        async def go():
            await asyncio.gather(*(m.ack_sync() for m in msgs))

        if msgs:
            self._call(go())

    def nak(self, msgs: list, delay_s: float = 1.0) -> None:
        async def go():
            await asyncio.gather(*(m.nak(delay=delay_s) for m in msgs))

        if msgs:
            self._call(go())

    def delete_streams(self) -> None:
        """Both streams of this prefix and their consumers (tests' and benchmarks' own prefixes)."""

        async def go():
            for name in (self.exposure_stream, self.feedback_stream):
                try:
                    await self.js.delete_stream(name)
                except Exception:  # noqa: BLE001 - already gone
                    pass

        self._call(go())

    def close(self) -> None:
        async def go():
            if self.nc is not None:
                await self.nc.close()

        try:
            self._call(go(), timeout=5)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
