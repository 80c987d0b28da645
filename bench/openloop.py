"""Open-loop latency for `python -m bench gateway`: a Poisson load generator in its own
process, rounds in which the paths take turns, and added-latency figures with a
confidence interval.

Why rounds, and why a cluster bootstrap: on a shared machine the outside load changes
from second to second, so one long run per path compares the paths under different
conditions (four runs once gave the gateway's added p99 as +9.9, +25 and -22 ms). Here
every path runs once per round, in a shuffled order, for a few seconds; over many
rounds each path sees the same mix of quiet and busy moments. "Added" latency is the
pooled quantile of a path minus that of the direct path, and its 95% interval comes from
resampling whole rounds (the same round indices for both paths, since a round is one
stretch of time): samples within a round are not independent, rounds nearly are.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
QUANTILES = {"p50_ms": 0.50, "p90_ms": 0.90, "p99_ms": 0.99}


# --- the generator (runs as its own process: `python -m bench gateway --open-loop URL`) ---------
async def _open_loop(url: str, rate: float, duration: float, body: bytes, warmup: float) -> dict:
    """One open-loop window of the platform's load generator (harness/loadgen.py), in the
    shape this benchmark always wrote: statuses, achieved rate, the generator's lateness and
    every answered request's latency."""
    from harness.loadgen import Generator

    generator = Generator(url, [body])
    try:
        result = await generator.open_loop(rate, duration, warmup)
    finally:
        generator.close()
    return {
        "rate": rate,
        "sent": result["sent"],
        "statuses": {"200": result["ok"], **result["errors"]} if result["ok"] else dict(result["errors"]),
        "achieved_rps": result["achieved_rps"],
        "generator_late_p99_ms": result["late_p99_ms"],
        "latencies_ms": [round(x * 1000, 4) for x in result["_latencies"]],
    }


def open_loop_main(url: str, rate: float, duration: float, body_path: str, warmup: float) -> int:
    body = Path(body_path).read_bytes()
    try:
        import uvloop

        result = uvloop.run(_open_loop(url, rate, duration, body, warmup))
    except ImportError:
        result = asyncio.run(_open_loop(url, rate, duration, body, warmup))
    print(json.dumps(result))
    return 0


def run_open_loop(url: str, rate: float, duration: float, body_path: Path, warmup: float = 0.5) -> dict:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "gateway",
            "--open-loop",
            url,
            "--rate",
            str(rate),
            "--duration",
            str(duration),
            "--warmup",
            str(warmup),
            "--body",
            str(body_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=duration + warmup + 60,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


# --- rounds -------------------------------------------------------------------------------------------
def interleaved_rounds(
    runs: list[tuple[str, str, float]], rounds: int, duration: float, body_path: Path, seed: int = 0, progress=None
) -> dict:
    """Every run once per round, in a shuffled order; returns per key its latencies per
    round (ms), statuses, rate and the generator's worst lateness."""
    rng = random.Random(seed)
    out = {key: {"rounds": [], "statuses": Counter(), "late": [], "rate": rate} for key, _, rate in runs}
    for r in range(rounds):
        order = list(runs)
        rng.shuffle(order)
        for key, url, rate in order:
            result = run_open_loop(url, rate, duration, body_path)
            out[key]["rounds"].append(np.asarray(result.pop("latencies_ms"), dtype=float))
            out[key]["statuses"].update(result["statuses"])
            out[key]["late"].append(result["generator_late_p99_ms"])
        if progress:
            progress(r + 1, rounds)
    return out


def summary(measured: dict, duration: float) -> dict:
    """Pooled quantiles of one key of `interleaved_rounds` (the keys the JSON always had)."""
    pooled = np.concatenate(measured["rounds"]) if measured["rounds"] else np.array([])
    out = {
        "rate": measured["rate"],
        "sent": int(pooled.size),
        "statuses": dict(measured["statuses"]),
        "generator_late_p99_ms": max(measured["late"], default=0.0),
        "rounds": len(measured["rounds"]),
        "seconds_per_round": duration,
    }
    for name, q in QUANTILES.items():
        out[name] = float(np.quantile(pooled, q)) if pooled.size else float("nan")
    return out


def added(path: dict, direct: dict, q: float, resamples: int = 1000, seed: int = 0) -> dict:
    """Pooled quantile `q` of `path` minus that of `direct` (ms), with a 95% interval from
    resampling whole rounds (paired: the same round indices for both)."""
    a, b = path["rounds"], direct["rounds"]
    n = min(len(a), len(b))
    point = float(np.quantile(np.concatenate(a[:n]), q) - np.quantile(np.concatenate(b[:n]), q))
    rng = np.random.default_rng(seed)
    stats = np.empty(resamples)
    for i in range(resamples):
        idx = rng.integers(0, n, n)
        stats[i] = np.quantile(np.concatenate([a[j] for j in idx]), q) - np.quantile(
            np.concatenate([b[j] for j in idx]), q
        )
    lo, hi = np.percentile(stats, [2.5, 97.5])
    per_round = [float(np.quantile(a[j], q) - np.quantile(b[j], q)) for j in range(n)]
    return {"ms": point, "ci95": [float(lo), float(hi)], "per_round_median": float(np.median(per_round)), "rounds": n}
