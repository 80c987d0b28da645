"""The control plane's writer of the durable log: the API's feedback door publishes what it
admitted on the same subjects, in the same message shape, as the gateway's door
(gateway/telemetry/feedback_stream.py `_publish`): `{"e": endpoint, "k": source, "b": [events]}` in
entries of at most ENTRY_EVENTS, each with a Nats-Msg-Id, JetStream's acknowledgement awaited.
The reader (experiments/services/log_ingest.py) checks each batch by the door's rules again
and stores it, so both doors' feedback takes one path into the store.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import zlib

from django.conf import settings

from experiments.eventlog import contract, log_url

ENTRY_EVENTS = 500  # events per message, as the gateway's door cuts them
_WRITERS: dict[tuple[str, str], NatsWriter] = {}
_LOCK = threading.Lock()


class NatsWriter:
    def __init__(self, url: str, prefix: str):
        self.url, self.prefix = url, prefix
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="nats-writer", daemon=True)
        self.thread.start()
        self.nc = self.js = None
        self._call(self._connect())

    def _call(self, coro, timeout: float = 10.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _connect(self):
        import nats

        self.nc = await nats.connect(self.url, connect_timeout=2, max_reconnect_attempts=-1, reconnect_time_wait=0.5)
        self.js = self.nc.jetstream(timeout=5)
        await contract.ensure_streams(self.js, self.prefix)

    def publish_feedback(self, *, team: str, endpoint: str, source: str | None, events: list[dict]) -> int:
        """Publish one admitted batch; raises unless every message is on the log. Messages published."""
        subject = contract.subject(self.prefix, contract.FEEDBACK, team, endpoint, source)
        now_ms = int(time.time() * 1000)
        messages = []
        for i in range(0, len(events), ENTRY_EVENTS):
            body = json.dumps(
                {"e": endpoint, "k": source or "", "b": events[i : i + ENTRY_EVENTS]}, separators=(",", ":")
            ).encode()
            messages.append((subject, body, f"a-{zlib.crc32(body):08x}-{len(body)}-{now_ms}"))

        async def go():
            await asyncio.gather(*(self.js.publish(s, p, headers={"Nats-Msg-Id": m}) for s, p, m in messages))

        self._call(go())
        return len(messages)

    def close(self) -> None:
        async def go():
            if self.nc is not None:
                await self.nc.drain()

        try:
            self._call(go())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)


def log_writer() -> NatsWriter | None:
    """This process's writer of the log EVENT_LOG_URL names when it answers, else None."""
    url = log_url()
    if not url:
        return None
    key = (url, settings.EVENT_LOG_PREFIX)
    with _LOCK:
        if key not in _WRITERS:
            _WRITERS[key] = NatsWriter(*key)
        return _WRITERS[key]
