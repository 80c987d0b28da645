"""`python -m bench judge record`: per-request traces of the real gateway in front of real
tritonserver model processes, on this host as it is (quiet) or with CPU hogs beside it (busy).

What runs: one tritonserver with the CTR model loaded three times under three names (three
python-backend processes of one model, as a rollout's stable, fair baseline and candidate
share a replica), the gateway (one worker) with one endpoint splitting 1/3 each
(stable, baseline, canary; the canary and baseline with the gateway's own attempt timeout,
half the endpoint's 1 s), and an open-loop Poisson client in this process. Every request
carries a sticky key found beforehand to land on the arm it was drawn for, so a reply from
another variant is a failover. `--hogs N` starts N busy-looping processes beside them
(the loaded host of the issue: two busy cores).

Writes bench/data/judge/<name>.csv.gz (bench/judge/traces.py) and its entry in the
manifest: the command, rate, seconds, hogs, the load average before and after, the host's
cores and per-arm figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

from bench.judge import traces

ENDPOINT = "judge-trace"
ATTEMPT_TIMEOUT_S = 0.5  # the gateway's default for a canary or baseline: half the endpoint's 1 s timeout


def _route_table(triton_url: str, models: dict[str, str]) -> dict:
    from harness.triton_models import SIGNATURE

    weights = {"stable": 3334, "baseline": 3333, "canary": 3333}
    return {
        "version": "judge-trace-1",
        "endpoints": [
            {
                "name": ENDPOINT,
                "auth": {"public": True},
                "timeout_ms": 1000,
                "variants": [
                    {
                        "name": arm,
                        "model_version": "1",
                        "triton_model": models[arm],
                        "role": arm,  # the arms are named by their route roles
                        "weight_bp": weights[arm],
                        "replicas": [triton_url],
                        "signature": SIGNATURE,
                    }
                    for arm in traces.ARMS
                ],
            }
        ],
    }


def _bodies(count: int, seed: int) -> list[bytes]:
    """Distinct request rows (so the scores vary as real traffic's do)."""
    from harness.onnx import N_DENSE, N_SPARSE, VOCAB

    rng = np.random.default_rng(seed)
    return [
        orjson.dumps(
            {
                "inputs": [
                    {
                        "name": "dense",
                        "shape": [1, N_DENSE],
                        "datatype": "FP32",
                        "data": rng.normal(size=N_DENSE).round(4).tolist(),
                    },
                    {
                        "name": "sparse",
                        "shape": [1, N_SPARSE],
                        "datatype": "INT64",
                        "data": rng.integers(0, VOCAB * 10, N_SPARSE).tolist(),
                    },
                ]
            }
        )
        for _ in range(count)
    ]


class Client:
    """The open-loop client: one request per Poisson arrival, each timed and recorded."""

    def __init__(self, url: str, bodies: list[bytes]):
        from gateway.wire.upstream import Pool

        host = url.partition("//")[2]
        self.pool = Pool(f"http://{host}", max_idle=512)
        self.bodies = bodies
        self.rows: list[tuple] = []

    def _head(self, key: str) -> bytes:
        return (
            f"POST /v2/models/{ENDPOINT}/infer HTTP/1.1\r\nContent-Type: application/json\r\nX-User-Id: {key}\r\n"
        ).encode()

    async def one(self, key: str, body: bytes) -> tuple[int, str, float | None, float]:
        sent = time.perf_counter()
        try:
            status, headers, data = await self.pool.request(self._head(key), body, timeout=5.0)
        except Exception:  # noqa: BLE001 - a connection error or the client's timeout is a status 0 reply
            return 0, "", None, time.perf_counter() - sent
        latency = time.perf_counter() - sent
        score = None
        if status == 200:
            try:
                score = float(orjson.loads(data)["outputs"][0]["data"][0])
            except (ValueError, KeyError, IndexError, TypeError):
                score = None
        return status, headers.get("x-model-variant", ""), score, latency

    async def keys_by_arm(self, per_arm: int) -> dict[str, list[str]]:
        """Sticky keys that land on each arm (the gateway's rendezvous hash decides; asked, not recomputed)."""
        found: dict[str, list[str]] = {arm: [] for arm in traces.ARMS}
        for n in range(per_arm * 60):
            key = f"k{n:05d}"
            status, served, _, _ = await self.one(key, self.bodies[0])
            if status == 200 and served in found and len(found[served]) < per_arm:
                found[served].append(key)
            if all(len(keys) >= per_arm for keys in found.values()):
                return found
        raise RuntimeError(f"could not find {per_arm} sticky keys per arm: {found}")

    async def run(self, keys: dict[str, list[str]], rate: float, seconds: float, seed: int, record: bool) -> None:
        rng = random.Random(seed)
        loop = asyncio.get_running_loop()
        pending: set = set()
        start = time.perf_counter() + 0.05
        t = start
        while t < start + seconds:
            now = time.perf_counter()
            if t > now:
                await asyncio.sleep(t - now)
            arm = rng.choice(traces.ARMS)
            task = loop.create_task(self._timed(arm, rng.choice(keys[arm]), rng.choice(self.bodies), t - start, record))
            pending.add(task)
            task.add_done_callback(pending.discard)
            t += rng.expovariate(rate)
        if pending:
            await asyncio.wait(pending, timeout=10)

    async def _timed(self, arm: str, key: str, body: bytes, at: float, record: bool) -> None:
        status, served, score, latency = await self.one(key, body)
        if record:
            failover = bool(served) and served != arm
            timeout = failover and latency >= ATTEMPT_TIMEOUT_S
            self.rows.append(
                (at, arm, served if served in traces.ARMS else "", status, latency * 1000, failover, timeout, score)
            )


def _hogs(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True) for _ in range(count)]


def record(name: str, *, rate: float, seconds: float, hogs: int, seed: int, out_dir: Path, argv: list[str]) -> dict:
    from harness.gateway import start_gateway, start_triton, stop_gateway
    from harness.triton_models import ctr_model

    scratch = Path(os.environ.get("VAR_DIR", "var")) / "bench"
    scratch.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="judge-trace-", dir=scratch))
    models = {arm: f"jt_{arm}" for arm in traces.ARMS}
    for model in models.values():
        ctr_model(work / "repo", model, seed=7)  # the same weights: an A/A by construction
    load_before = os.getloadavg()
    triton = start_triton(work / "triton", work / "repo", list(models.values()))
    gateway, hog_procs = None, []
    try:
        routes = work / "routes.json"
        routes.write_text(json.dumps(_route_table(triton.http_url, models)))
        gateway, port = start_gateway(routes, work)
        client = Client(f"http://127.0.0.1:{port}", _bodies(256, seed))

        async def session():  # one event loop: the client's connection pool belongs to it
            keys = await client.keys_by_arm(16)
            hog_procs.extend(_hogs(hogs))
            await client.run(keys, rate, 5.0, seed + 1, record=False)  # warm-up
            during = os.getloadavg()
            await client.run(keys, rate, seconds, seed, record=True)
            return during

        load_during = asyncio.run(session())
        load_after = os.getloadavg()
    finally:
        for proc in hog_procs:
            proc.kill()
            proc.wait(5)
        if gateway is not None:
            stop_gateway(gateway)
        triton.stop()
    shutil.rmtree(work, ignore_errors=True)  # model copies and logs; kept only when the recording failed
    rows = sorted(client.rows)
    path = out_dir / f"{name}.csv.gz"
    traces.write(path, rows)
    entry = {
        "file": path.name,
        "command": "python -m bench judge record " + " ".join(argv),
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "rate_rps": rate,
        "seconds": seconds,
        "hogs": hogs,
        "host": {
            "cpus": os.cpu_count(),
            "loadavg_before": load_before,
            "loadavg_warm": load_during,
            "loadavg_after": load_after,
        },
        "setup": "one tritonserver (CTR model, python backend, 3 processes of one model), gateway 1 worker, open-loop Poisson client",
        "bytes": path.stat().st_size,
    }
    entry["summary"] = traces.load(path).summary()
    manifest = traces.manifest(out_dir)
    manifest["traces"][name] = entry
    (out_dir / traces.MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return entry


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench judge record", description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="the trace's name, e.g. quiet or busy")
    parser.add_argument("--rate", type=float, default=150.0, help="requests/s over the three arms (150)")
    parser.add_argument("--seconds", type=float, default=120.0, help="recorded seconds after a 5 s warm-up (120)")
    parser.add_argument(
        "--hogs", type=int, default=0, help="busy-looping processes beside Triton (0: the host as it is)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out-dir", type=Path, default=traces.DATA_DIR)
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    entry = record(
        args.name, rate=args.rate, seconds=args.seconds, hogs=args.hogs, seed=args.seed, out_dir=args.out_dir, argv=argv
    )
    print(json.dumps(entry, indent=2))
    return 0
