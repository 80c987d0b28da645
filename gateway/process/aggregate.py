"""One gateway in /metrics however many workers serve it (gateway/process/workers.py).

Each worker keeps its own metrics (HotPath's plain ints, prometheus_client's registry) and
also answers its own exposition on a private Unix socket (`metrics-<row>.sock` in the
supervisor's 0700 run directory), from a thread of its own (control.py). A scrape of /metrics reaches one worker through the
shared port; that worker asks every sibling for its exposition over those sockets, parses
them with prometheus_client's parser and writes one exposition: counters, histograms and
summaries summed per series, gauges summed where they count things across the workers
(requests in flight, queue depths, memory, open files), the oldest where they are times
(start and route-table load times), the largest otherwise (a breaker open in any worker, the
stalest table) — plus `gateway_workers`, the number of workers that answered. Prometheus and
the platform's collector (monitoring/collection/gateway_samples.py) read it as one process's.
"""

from __future__ import annotations

import glob
import http.client
import logging
import os
import socket

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from gateway.telemetry import metrics

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
FETCH_TIMEOUT_S = 1.0


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


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("worker", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.unix_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def sibling_exposition(path: str) -> str | None:
    """One sibling worker's own exposition over its private socket (answered by that worker's
    control thread, control.py: never behind its event loop); None if it is gone."""
    connection = _UnixConnection(path, FETCH_TIMEOUT_S)
    try:
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        body = response.read()
        return body.decode() if response.status == 200 else None
    except (OSError, http.client.HTTPException):
        return None  # a worker that is gone or restarting: its counts come back with it
    finally:
        connection.close()


def all_workers(run_dir: str | None, own_socket: str | None) -> bytes:
    """Every worker's metrics as one exposition (merge), or this worker's alone. Blocking: call
    it from a thread (the control listener's, or the loop's executor)."""
    own, _ = metrics.exposition()
    if not run_dir:
        return own
    others = [p for p in sorted(glob.glob(os.path.join(run_dir, "metrics-*.sock"))) if p != own_socket]
    texts = [own.decode()] + [text for text in map(sibling_exposition, others) if text]
    return merge(texts)
