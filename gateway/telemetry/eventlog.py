"""The gateway's writer of the durable log on NATS JetStream (gateway/contracts/log_contract.py).

`NatsLog.publish` sends a flush's messages with JetStream's acknowledgement awaited for each
(concurrently, one round trip for the lot): a message is on the log's disk when it returns,
and raises when any was not, so the caller keeps its records and tries again. Each message
carries a Nats-Msg-Id: a retry inside the stream's duplicate window is stored once.

Streams are created (or their limits updated) on first connect with the contract's
configuration, so a fresh nats-server needs no set-up. Without a NATS URL the gateway writes
Redis Streams instead (exposures.py), the zero-setup default.
"""

from __future__ import annotations

import asyncio

from gateway.contracts.log_contract import DEFAULT_PREFIX, ensure_streams


class NatsLog:
    def __init__(self, url: str, prefix: str = DEFAULT_PREFIX):
        self.url, self.prefix = url, prefix
        self.nc = self.js = None

    async def connect(self):
        if self.js is None:
            import nats

            self.nc = await nats.connect(
                self.url, connect_timeout=2, max_reconnect_attempts=-1, reconnect_time_wait=0.5
            )
            self.js = self.nc.jetstream(timeout=5)
            await ensure_streams(self.js, self.prefix)
        return self.js

    async def publish(self, messages: list[tuple[str, bytes, str]]) -> None:
        """(subject, payload, message id) each; raises unless every one was stored."""
        js = await self.connect()
        await asyncio.gather(*(js.publish(s, p, headers={"Nats-Msg-Id": m}) for s, p, m in messages))

    async def close(self) -> None:
        if self.nc is not None:
            await self.nc.drain()
            self.nc = self.js = None
