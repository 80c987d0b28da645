"""The collector's HTTP side: every scrape of a tick in flight at once on one asyncio loop.

Why one loop and not a thread per scrape: a thread pool of N threads lets N hung targets
(a replica that accepts and never answers) hold the whole pool for the timeout, so 100 of
them among 1,000 targets cost 100/N timeouts of wall time; on one loop every target waits
at the same time and a tick takes about one timeout. Why the loop outlives the tick: its
aiohttp session keeps each target's connection open from one tick to the next, as
Prometheus does, which halves the CPU a scrape costs here (a new TCP connection and
session per scrape: make bench-collector measures both).

The loop runs in a daemon thread of the process that scrapes (a Celery worker), started on
first use and again after a fork. Replies are bounded (MONITORING_SCRAPE_MAX_BYTES) and
decoded as UTF-8 with replacement; anything else a target does wrong is that target's
error, never the tick's.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
import time
from dataclasses import dataclass

import aiohttp

from monitoring import conf
from monitoring.collection.targets import ScrapeTarget

try:  # the gateway's loop too (gateway/__main__.py); plain asyncio where it is missing
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None


@dataclass
class Fetched:
    url: str
    fetched_at: float  # time.time() when the reply (or the error) came
    text: str | None = None
    error: str = ""


class TooLarge(Exception):
    pass


class Scraper:
    """One event loop in a daemon thread and one aiohttp session (connections kept alive)."""

    def __init__(self, *, keep_alive: bool = True):
        self.keep_alive = keep_alive
        self.loop = uvloop.new_event_loop() if uvloop else asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="metrics-scraper", daemon=True)
        self.thread.start()
        self.session: aiohttp.ClientSession | None = None
        self.session_limit = 0

    async def _session(self, concurrency: int) -> aiohttp.ClientSession:
        if self.session is None or self.session.closed or self.session_limit != concurrency or not self.keep_alive:
            if self.session is not None and not self.session.closed:
                await self.session.close()
            # an idle connection is closed past a few ticks
            reuse = {"keepalive_timeout": 30.0} if self.keep_alive else {"force_close": True}
            connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0, ttl_dns_cache=30, **reuse)
            self.session = aiohttp.ClientSession(
                connector=connector, cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=True, trust_env=False
            )
            self.session_limit = concurrency
        return self.session

    async def _get(self, session, url: str, headers: dict, timeouts: aiohttp.ClientTimeout, max_bytes: int) -> Fetched:
        try:
            async with session.get(url, headers=headers, allow_redirects=False, timeout=timeouts) as response:
                if response.status != 200:
                    raise OSError(f"HTTP {response.status}")
                if (response.content_length or 0) > max_bytes:
                    raise TooLarge(f"reply of {response.content_length} bytes, over {max_bytes} bytes")
                chunks, size = [], 0
                async for chunk in response.content.iter_any():
                    size += len(chunk)
                    if size > max_bytes:
                        raise TooLarge(f"reply over {max_bytes} bytes (no length said)")
                    chunks.append(chunk)
            return Fetched(url=url, fetched_at=time.time(), text=b"".join(chunks).decode("utf-8", errors="replace"))
        except TimeoutError:
            return Fetched(url=url, fetched_at=time.time(), error=f"TimeoutError: silent for {timeouts.sock_read:g} s")
        except aiohttp.ClientConnectorError as exc:  # say why in words: "Connection refused", not the call
            errno = getattr(exc.os_error, "errno", None)
            reason = os.strerror(errno) if errno else str(exc.os_error)
            return Fetched(url=url, fetched_at=time.time(), error=f"cannot connect to {exc.host}:{exc.port}: {reason}")
        except (aiohttp.ClientError, OSError, ValueError, TooLarge) as exc:
            return Fetched(url=url, fetched_at=time.time(), error=f"{type(exc).__name__}: {exc}"[:2000])

    async def _fetch_all(self, requests, timeout, deadline, concurrency, max_bytes) -> list[Fetched]:
        session = await self._session(concurrency)
        # `timeout` without progress (connecting, or between bytes: a wedged target) and
        # `deadline` for the whole scrape (a target that trickles, or more targets than
        # connections on a slow machine)
        timeouts = aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout)
        try:
            return await asyncio.gather(
                *(self._get_by(session, url, h, timeouts, deadline, max_bytes) for url, h in requests)
            )
        finally:
            if not self.keep_alive:
                await session.close()

    async def _get_by(self, session, url, headers, timeouts, deadline: float, max_bytes: int) -> Fetched:
        try:
            async with asyncio.timeout(deadline):
                return await self._get(session, url, headers, timeouts, max_bytes)
        except TimeoutError:
            return Fetched(url=url, fetched_at=time.time(), error=f"TimeoutError: reply not complete in {deadline:g} s")

    def fetch_all(
        self,
        requests: list[tuple[str, dict]],
        *,
        timeout: float,
        deadline: float,
        concurrency: int,
        max_bytes: int,
    ) -> list[Fetched]:
        """GET every (url, headers) at once (at most `concurrency` connections open); one
        Fetched per request, in order, within about `deadline` seconds."""
        future = asyncio.run_coroutine_threadsafe(
            self._fetch_all(requests, timeout, deadline, concurrency, max_bytes), self.loop
        )
        return future.result()

    def close(self) -> None:
        if self.loop.is_closed():
            return
        if self.session is not None and not self.session.closed:
            asyncio.run_coroutine_threadsafe(self.session.close(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


_lock = threading.Lock()
_scrapers: dict[tuple[int, bool], Scraper] = {}


def scraper(*, keep_alive: bool = True) -> Scraper:
    """This process's scraper (a new one after a fork: threads do not survive it)."""
    key = (os.getpid(), keep_alive)
    with _lock:
        if key not in _scrapers:
            _scrapers[key] = Scraper(keep_alive=keep_alive)
        return _scrapers[key]


@atexit.register
def _close_all() -> None:
    for key, instance in list(_scrapers.items()):
        if key[0] == os.getpid():
            instance.close()


# --- the collector's reads, with its settings ------------------------------------------------
def scrape_headers(target: ScrapeTarget | None = None, token: str | None = None) -> dict:
    headers = {"Accept": "text/plain;version=0.0.4", "Accept-Encoding": "identity"}
    if target is not None and target.kind == "gateway":
        # the gateway's /metrics is behind GATEWAY_METRICS_TOKEN when that is set
        token = conf.get("GATEWAY_METRICS_TOKEN")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def fetch_all(requests: list[tuple[str, dict]], *, timeout: float | None = None) -> list[Fetched]:
    """Every (url, headers) at once on the collector's loop, bounded by the MONITORING_SCRAPE_ settings."""
    return scraper(keep_alive=conf.get("MONITORING_SCRAPE_KEEP_ALIVE")).fetch_all(
        requests,
        timeout=timeout or conf.get("MONITORING_SCRAPE_TIMEOUT_S"),
        deadline=conf.get("MONITORING_SCRAPE_DEADLINE_S"),
        concurrency=conf.get("MONITORING_SCRAPE_CONCURRENCY"),
        max_bytes=conf.get("MONITORING_SCRAPE_MAX_BYTES"),
    )


def fetch_metrics(url: str, timeout: float, token: str | None = None) -> str:
    """One /metrics read now, on the collector's loop (the keys page's live counters): the
    text, or OSError saying why not."""
    (reply,) = fetch_all([(url, scrape_headers(token=token))], timeout=timeout)
    if reply.text is None:
        raise OSError(reply.error)
    return reply.text
