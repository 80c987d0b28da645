"""One gateway in /metrics however many workers serve it (gateway/workers.py).

Each worker keeps its own metrics (HotPath's plain ints, prometheus_client's registry) and
also answers its own exposition on a private Unix socket (`metrics-<row>.sock` in the
supervisor's 0700 run directory). A scrape of /metrics reaches one worker through the
shared port; that worker asks every sibling for its exposition over those sockets, parses
them with prometheus_client's parser and writes one exposition: counters, histograms and
summaries summed per series, gauges summed where they count things across the workers
(requests in flight, queue depths, memory, open files), the oldest where they are times
(start and route-table load times), the largest otherwise (a breaker open in any worker, the
stalest table) — plus `gateway_workers`, the number of workers that answered. Prometheus and
the platform's collector (monitoring/collect.py) read it as one process's.
"""

from __future__ import annotations

import asyncio
import glob
import logging
import os
import socket
from pathlib import Path

import aiohttp
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from . import metrics
from .httpserver import HttpServer

log = logging.getLogger("gateway")

SUM_GAUGES = frozenset(
    (
        "gateway_in_flight_requests",
        "gateway_llm_streams_in_flight",
        "gateway_shadow_queue_depth",
        "gateway_exposure_buffer",
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_open_fds",
    )
)
MIN_GAUGES = frozenset(("process_start_time_seconds", "gateway_route_table_loaded_timestamp_seconds"))
FETCH_TIMEOUT_S = 2.0


def merge(texts: list[str]) -> bytes:
    """Expositions of several workers as one (the rules above)."""
    families: dict[str, Metric] = {}
    values: dict[str, dict] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                values[family.name] = {}
            series = values[family.name]
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                old = series.get(key)
                series[key] = sample.value if old is None else _combine(family, sample.name, old, sample.value)
    for name, family in families.items():
        for (sample_name, labels), value in values[name].items():
            family.add_sample(sample_name, dict(labels), value)
    workers = Metric("gateway_workers", "Worker processes whose metrics this exposition adds up", "gauge")
    workers.add_sample("gateway_workers", {}, float(len(texts)))
    families["gateway_workers"] = workers
    return generate_latest(_Fixed(list(families.values())))


def _combine(family, sample_name: str, old: float, new: float) -> float:
    if family.type != "gauge" and family.type != "info" and family.type != "stateset":
        return old + new
    if family.name in SUM_GAUGES:
        return old + new
    if family.name in MIN_GAUGES:
        return min(old, new)
    return max(old, new)


class _Fixed:
    def __init__(self, families):
        self.families = families

    def collect(self):
        return self.families


class Siblings:
    """This worker's private metrics socket and the reading of its siblings'."""

    def __init__(self, run_dir: str, row: int):
        self.run_dir = run_dir
        self.path = os.path.join(run_dir, f"metrics-{row}.sock")
        self.server = None

    async def start(self) -> None:
        async def answer(request):
            body, content_type = metrics.exposition()
            return 200, {"Content-Type": content_type}, body

        Path(self.path).unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(self.path)
        sock.listen(16)
        self.server = HttpServer(answer)
        await self.server.start("", 0, sock=sock)

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close(0)
        Path(self.path).unlink(missing_ok=True)

    async def _fetch(self, path: str) -> str | None:
        try:
            connector = aiohttp.UnixConnector(path=path)
            async with aiohttp.ClientSession(connector=connector) as session:
                timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_S)
                async with session.get("http://worker/metrics", timeout=timeout) as response:
                    return await response.text() if response.status == 200 else None
        except (aiohttp.ClientError, OSError, TimeoutError):
            return None  # a worker that is gone or restarting: its counts come back with it

    async def exposition(self) -> tuple[bytes, str]:
        own, _ = metrics.exposition()
        others = [p for p in sorted(glob.glob(os.path.join(self.run_dir, "metrics-*.sock"))) if p != self.path]
        fetched = await asyncio.gather(*(self._fetch(p) for p in others))
        texts = [own.decode()] + [text for text in fetched if text]
        return merge(texts), CONTENT_TYPE_LATEST
