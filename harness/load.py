"""A steady load against a gateway endpoint, recording every reply."""

from __future__ import annotations

import itertools
import json
import threading
import time

import numpy as np
import requests


class Load:
    """About `rate` requests/s against a gateway endpoint from a few threads; records
    (time, status, variant, latency) of every reply. With `users`, each request carries one of
    that many users in the sticky header (X-User-Id), as an experiment's traffic does, and
    `exposed` records (request id, variant) of each 200 (what a client's feedback cites)."""

    def __init__(self, url: str, rate: float = 120.0, threads: int = 4, body: str | None = None, users: int = 0):
        self.url, self.interval, self.threads = url, threads / rate, threads
        self.records: list[tuple[float, int, str, float]] = []
        self.users, self.sent = users, itertools.count()
        self.exposed: list[tuple[str, str]] = []
        self.stop_event = threading.Event()
        rng = np.random.default_rng(0)
        self.body = (
            json.dumps(
                {
                    "inputs": [
                        {
                            "name": "dense",
                            "shape": [1, 13],
                            "datatype": "FP32",
                            "data": rng.normal(size=13).round(4).tolist(),
                        },
                        {
                            "name": "sparse",
                            "shape": [1, 26],
                            "datatype": "INT64",
                            "data": rng.integers(0, 5000, size=26).tolist(),
                        },
                    ]
                }
            )
            if body is None
            else body
        )

    @property
    def statuses(self) -> list[int]:
        return [r[1] for r in self.records]

    @property
    def variants(self) -> list[str]:
        return [r[2] for r in self.records]

    def errors_since(self, t: float) -> int:
        return sum(1 for at, status, _, _ in self.records if at >= t and status != 200)

    def error_statuses_since(self, t: float) -> dict[str, int]:
        """Non-200 replies by status ("0" = no reply: connection error or client timeout)."""
        counts: dict[str, int] = {}
        for at, status, _, _ in self.records:
            if at >= t and status != 200:
                counts[str(status)] = counts.get(str(status), 0) + 1
        return counts

    def error_times_since(self, t: float) -> list[float]:
        """Seconds after `t` at which non-200 replies arrived (where in a rollout they fall)."""
        return [round(at - t, 2) for at, status, _, _ in self.records if at >= t and status != 200]

    def _run(self):
        session = requests.Session()
        next_at = time.monotonic()
        while not self.stop_event.is_set():
            started = time.monotonic()
            headers = {"Content-Type": "application/json"}
            if self.users:
                headers["X-User-Id"] = f"u{next(self.sent) % self.users}"
            try:
                response = session.post(self.url, data=self.body, headers=headers, timeout=5)
                if self.users and response.status_code == 200:
                    self.exposed.append((response.headers["X-Request-Id"], response.headers["X-Model-Variant"]))
                self.records.append(
                    (
                        time.time(),
                        response.status_code,
                        response.headers.get("X-Model-Variant", ""),
                        time.monotonic() - started,
                    )
                )
            except requests.RequestException:
                self.records.append((time.time(), 0, "", time.monotonic() - started))
            next_at += self.interval
            time.sleep(max(0.0, next_at - time.monotonic()))

    def start(self) -> Load:
        self.workers = [threading.Thread(target=self._run, daemon=True) for _ in range(self.threads)]
        for worker in self.workers:
            worker.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        for worker in self.workers:
            worker.join(10)
