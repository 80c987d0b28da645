"""Recorded per-request traces: the noise the judge's benchmark replays.

One trace is one recording (bench/judge/record.py) of the real gateway in front of real
tritonserver model processes, every request of it as one CSV row (gzip):

    t_s        seconds since the recording started (when the request was sent)
    arm        the variant the request was meant for: stable, baseline or canary (its sticky
               key pins it there, so a reply from another variant is a failover)
    served     the variant that answered (X-Model-Variant), "" when none did
    status     the HTTP status the client got (0: no reply)
    latency_ms the client's wall time for the request
    failover   1 when the meant variant's attempt failed and another variant answered
    timeout    1 when that failed attempt was a timeout (the attempt timeout passed)
    score      the model's first output value (empty when there is none)

The three arms serve one model (the same weights) in three python-backend processes of one
tritonserver, as a rollout's stable, fair baseline and candidate do on one replica: any
difference between them is the host's and the process', never the model's. `Trace` keeps
them as arrays with a per-arm index by whole second, so a replay draws "a request of this arm
in this recorded second" with one `integers` call (bench/judge/replay.py).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ARMS = ("stable", "baseline", "canary")
COLUMNS = ("t_s", "arm", "served", "status", "latency_ms", "failover", "timeout", "score")
DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "judge"
MANIFEST = "manifest.json"


@dataclass
class Trace:
    name: str
    t_s: np.ndarray  # float, seconds since the start
    arm: np.ndarray  # int8 index into ARMS
    served: np.ndarray  # int8 index into ARMS, -1 when nothing answered
    status: np.ndarray  # int16
    latency_s: np.ndarray  # float
    failover: np.ndarray  # bool
    timeout: np.ndarray  # bool
    score: np.ndarray  # float, nan when none
    meta: dict = field(default_factory=dict)
    # per arm: row indices sorted by second, and offsets[s]..offsets[s+1] the rows of second s
    _rows: list[np.ndarray] = field(default_factory=list, repr=False)
    _offsets: list[np.ndarray] = field(default_factory=list, repr=False)

    def __post_init__(self):
        self.seconds = int(np.floor(self.t_s.max())) + 1 if len(self.t_s) else 0
        second = np.floor(self.t_s).astype(int)
        for index in range(len(ARMS)):
            rows = np.flatnonzero(self.arm == index)
            rows = rows[np.argsort(second[rows], kind="stable")]
            counts = np.bincount(second[rows], minlength=self.seconds)
            self._rows.append(rows)
            self._offsets.append(np.concatenate([[0], np.cumsum(counts)]))

    def __len__(self) -> int:
        return len(self.t_s)

    def draw(self, rng: np.random.Generator, arm: int, seconds: np.ndarray) -> np.ndarray:
        """Row indices: one request of `arm` from each recorded second in `seconds` (a
        second in which the arm had no request borrows one from the arm's whole trace)."""
        offsets, rows = self._offsets[arm], self._rows[arm]
        seconds = np.asarray(seconds, dtype=int) % self.seconds
        lo, hi = offsets[seconds], offsets[seconds + 1]
        empty = hi <= lo
        lo = np.where(empty, 0, lo)
        hi = np.where(empty, len(rows), hi)
        return rows[lo + (rng.random(len(seconds)) * (hi - lo)).astype(int)]

    def summary(self) -> dict:
        """Per arm: requests, p50/p99 (ms), errors, failovers and timeouts; what a manifest shows."""
        out = {"requests": len(self), "seconds": self.seconds}
        for index, name in enumerate(ARMS):
            mine = self.arm == index
            ok = mine & (self.status == 200)
            lat = self.latency_s[ok] * 1000
            out[name] = {
                "requests": int(mine.sum()),
                "p50_ms": round(float(np.percentile(lat, 50)), 3) if len(lat) else None,
                "p99_ms": round(float(np.percentile(lat, 99)), 3) if len(lat) else None,
                "errors": int((mine & (self.status != 200)).sum()),
                "failovers": int((mine & self.failover).sum()),
                "timeouts": int((mine & self.timeout).sum()),
            }
        return out


def write(path: Path, rows: list[tuple]) -> None:
    """Rows in COLUMNS' order to a gzip CSV (fixed precision: small files, exact round trip)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for t_s, arm, served, status, latency_ms, failover, timeout, score in rows:
        writer.writerow(
            [
                f"{t_s:.3f}",
                arm,
                served,
                int(status),
                f"{latency_ms:.3f}",
                int(failover),
                int(timeout),
                "" if score is None else f"{score:.4f}",
            ]
        )
    with gzip.open(path, "wt", compresslevel=9) as handle:
        handle.write(buffer.getvalue())


def load(path: Path, meta: dict | None = None) -> Trace:
    """A trace from its gzip CSV; a row with an unknown arm or a bad number is an error that names the row."""
    index = {name: i for i, name in enumerate(ARMS)}
    columns: dict[str, list] = {name: [] for name in COLUMNS}
    with gzip.open(path, "rt") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise ValueError(f"{path.name}: columns {reader.fieldnames}, expected {list(COLUMNS)}")
        for number, row in enumerate(reader, start=2):
            try:
                columns["t_s"].append(float(row["t_s"]))
                columns["arm"].append(index[row["arm"]])
                columns["served"].append(index[row["served"]] if row["served"] else -1)
                columns["status"].append(int(row["status"]))
                columns["latency_ms"].append(float(row["latency_ms"]))
                columns["failover"].append(row["failover"] == "1")
                columns["timeout"].append(row["timeout"] == "1")
                columns["score"].append(float(row["score"]) if row["score"] else np.nan)
            except (KeyError, ValueError) as exc:
                raise ValueError(f"{path.name} line {number}: {exc!r}") from None
    return Trace(
        name=path.name.removesuffix(".csv.gz"),
        t_s=np.asarray(columns["t_s"], dtype=float),
        arm=np.asarray(columns["arm"], dtype=np.int8),
        served=np.asarray(columns["served"], dtype=np.int8),
        status=np.asarray(columns["status"], dtype=np.int16),
        latency_s=np.asarray(columns["latency_ms"], dtype=float) / 1000.0,
        failover=np.asarray(columns["failover"], dtype=bool),
        timeout=np.asarray(columns["timeout"], dtype=bool),
        score=np.asarray(columns["score"], dtype=float),
        meta=meta or {},
    )


def manifest(directory: Path = DATA_DIR) -> dict:
    path = directory / MANIFEST
    return json.loads(path.read_text()) if path.exists() else {"traces": {}}


def load_all(directory: Path = DATA_DIR) -> dict[str, Trace]:
    """Every trace the manifest lists, by name (the manifest says each one's host load)."""
    listed = manifest(directory)["traces"]
    return {name: load(directory / entry["file"], entry) for name, entry in sorted(listed.items())}
