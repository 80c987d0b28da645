"""make bench-experiments: what online experiments cost and what they buy.

1. Exposure logging on the gateway: one gateway process in front of a real tritonserver,
   two endpoints in one route table, identical except that one serves an experiment
   (every reply recorded and flushed to a Redis Stream). A closed-loop client alternates
   phases on the two endpoints (A B A B …); per phase: p50/p99 latency and the gateway
   process' CPU time per request (from /proc). The difference is the exposure log's cost.
2. Feedback ingest (bench/experiments_scale.py): the same batches of 1 000 events through
   the stream door (the gateway's Redis entries drained by the ingest task's code) and the
   API door (POST /api/v1/feedback/ with the team's key), against PostgreSQL (COPY and one
   attributing INSERT per read); events/s with the load average.
4. The analysis tick at `--tick-experiments` (1 000) running experiments: seconds per tick
   and per experiment (bench/experiments_scale.py), with the load average.
3. Time to decision: simulated traffic (true +5 % CTR lift), the sequential test peeked at
   every look vs a fixed-horizon z-test at the same alpha and power (its planned n);
   median units per arm to a decision and the fraction that shipped.

6. The experiment data path with its parts running (bench/experiments_e2e.py, in processes of
   its own): the whole tick at 10 000 experiments on chdb; gateway → NATS JetStream → the
   experiment-data process's chdb end to end, the API door, the store stopped under 20 000
   exposures/s (`--outage-s`), each id counted once.

Prints a table per part and writes var/bench/experiments.json. Not a test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import experiments_scale
from bench.common import print_table, write_json

ROOT = Path(__file__).resolve().parent.parent


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def gateway_cost(phase_requests: int, phases: int) -> dict:
    import redis
    import requests
    from django.conf import settings

    from harness.triton_models import SIGNATURE, ctr_model, infer_body
    from serving.tritonserver import TritonProcess, free_port

    stream_url = settings.EXPOSURE_STREAM_URL or "redis://127.0.0.1:6379/0"
    work = Path(tempfile.mkdtemp(prefix="bench-exp-"))
    ctr_model(work / "repo", "m1", seed=7)
    triton = TritonProcess(model_repository=work / "repo", work_dir=work / "triton").start()
    gateway = None
    try:
        triton.wait_live(60)
        triton.load("m1")
        variant = {
            "name": "v1",
            "model_version": "1",
            "triton_model": "m1",
            "role": "stable",
            "weight_bp": 10000,
            "replicas": [triton.http_url],
            "signature": SIGNATURE,
        }
        routes = work / "routes.json"
        routes.write_text(
            json.dumps(
                {
                    "version": "b1",
                    "endpoints": [
                        {"name": "plain", "auth": {"public": True}, "variants": [variant]},
                        {
                            "name": "experiment",
                            "auth": {"public": True},
                            "experiment": "exp-bench",
                            "salt": "s",
                            "variants": [variant],
                        },
                    ],
                }
            )
        )
        port = free_port()
        gateway = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gateway",
                "--workers",
                "1",
                "--routes-file",
                str(routes),
                "--port",
                str(port),
                "--host",
                "127.0.0.1",
            ],
            cwd=ROOT,
            stdout=open(work / "gateway.log", "wb"),
            stderr=subprocess.STDOUT,
            env={**os.environ, "GATEWAY_EXPOSURE_STREAM_URL": stream_url},
        )
        url = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                if requests.get(f"{url}/v2/health/ready", timeout=0.5).status_code == 200:
                    break
            except requests.RequestException:
                time.sleep(0.1)
        body = infer_body()
        results = {"plain": {"lat": [], "cpu": 0.0, "n": 0}, "experiment": {"lat": [], "cpu": 0.0, "n": 0}}
        with requests.Session() as s:
            for _ in range(50):  # warm-up
                s.post(f"{url}/v2/models/plain/infer", data=body)
            for phase in range(phases * 2):
                name = ("plain", "experiment")[phase % 2]
                c0 = _cpu(gateway.pid)
                for i in range(phase_requests):
                    t0 = time.perf_counter()
                    r = s.post(f"{url}/v2/models/{name}/infer", data=body, headers={"X-User-Id": f"u{i % 997}"})
                    results[name]["lat"].append(time.perf_counter() - t0)
                    assert r.status_code == 200, r.text
                time.sleep(1.3)  # let the flusher's work of this phase (1 s interval) land in this phase
                results[name]["cpu"] += _cpu(gateway.pid) - c0
                results[name]["n"] += phase_requests
        stream_len = redis.Redis.from_url(stream_url).xlen("modelplane:exposures")
        out = {}
        for name, r in results.items():
            lat = np.array(r["lat"]) * 1e6
            out[name] = {
                "requests": r["n"],
                "p50_us": float(np.percentile(lat, 50)),
                "p99_us": float(np.percentile(lat, 99)),
                "gateway_cpu_us_per_request": r["cpu"] / r["n"] * 1e6,
                "throughput_rps": r["n"] / (lat.sum() / 1e6),
            }
        out["added"] = {
            k: out["experiment"][k] - out["plain"][k] for k in ("p50_us", "p99_us", "gateway_cpu_us_per_request")
        }
        out["capacity_change"] = out["experiment"]["throughput_rps"] / out["plain"]["throughput_rps"] - 1
        out["exposure_stream_length"] = stream_len
        return out
    finally:
        if gateway is not None:
            gateway.terminate()
            gateway.wait(10)
        triton.stop()


def exposure_log_cpu(records: int = 20_000) -> dict:
    """In-process: CPU per exposure on the request path (record) and in the flusher (score
    read from a gzip reply, JSON packing, the XADD), batches of 5 000 and of 50."""
    import asyncio
    import gzip

    from django.conf import settings

    from gateway.telemetry.exposures import ExposureLog

    body = gzip.compress(
        json.dumps(
            {
                "model_name": "m1",
                "model_version": "1",
                "outputs": [{"name": "ctr", "datatype": "FP32", "shape": [1, 1], "data": [0.4284308254718781]}],
            }
        ).encode()
    )
    url = settings.EXPOSURE_STREAM_URL or "redis://127.0.0.1:6379/0"
    out = {}

    async def run(batch: int) -> tuple[float, float]:
        log = ExposureLog(url, batch=batch, capacity=records + 1)
        c0 = time.process_time()
        for i in range(records):
            log.record(f"{i:032x}", "exp-bench", "bench", "v2-onnx-fp32", f"user-{i % 5000}", body, "gzip")
        c1 = time.process_time()
        while log.buffer:
            await log.flush()
        c2 = time.process_time()
        await log.close()
        return (c1 - c0) / records * 1e6, (c2 - c1) / records * 1e6

    for batch in (5000, 50):
        record_us, flush_us = asyncio.run(run(batch))
        out[f"batch_{batch}"] = {
            "record_us": record_us,
            "flush_us_per_exposure": flush_us,
            "total_us": record_us + flush_us,
        }
    return out


def time_to_decision(sims: int) -> dict:
    from scipy import stats

    from experiments import analysis as A
    from experiments import simulate as S

    base, mde, alpha, power, m, looks = 0.2, 0.05, 0.05, 0.8, 4.0, 100
    plan = A.plan_sample(baseline=base, mde=mde, alpha=alpha, power=power, exposures_per_unit=m)
    rng = np.random.default_rng(42)
    per_look = int(np.ceil(2 * plan.units_per_arm / looks))
    arms = S.simulate(
        rng,
        sims=sims,
        looks=looks,
        units_per_look=per_look,
        rates={"c": base, "t": base * (1 + mde)},
        allocation={"c": 0.5, "t": 0.5},
        exposures_per_unit=m,
        heterogeneity=0,
    )
    lf = A.lift(arms["c"], arms["t"], alpha=alpha, mde=mde)
    first, look = S.first_decision(A.decide(lower=lf["lower"], upper=lf["upper"], mde=mde, srm_flagged=False))
    units = arms["c"]["units"]
    seq_units = np.where(look >= 0, units[np.arange(sims), np.maximum(look, 0)], units[:, -1])
    # Fixed horizon: one look at its planned n (the look whose units first reach it).
    fixed_look = int(np.argmax(units.mean(axis=0) >= plan.fixed_units_per_arm))
    z = lf["theta"][:, fixed_look] / np.sqrt(lf["var"][:, fixed_look])
    fixed_ship = z > stats.norm.ppf(1 - alpha / 2)
    return {
        "true_lift": mde,
        "alpha": alpha,
        "power": power,
        "sims": sims,
        "looks": looks,
        "planned_units_per_arm_sequential": plan.units_per_arm,
        "planned_units_per_arm_fixed": plan.fixed_units_per_arm,
        "sequential_median_units_to_decision": float(np.median(seq_units)),
        "sequential_mean_units_to_decision": float(np.mean(seq_units)),
        "sequential_shipped": float((first == A.ArmDecision.SHIP).mean()),
        "fixed_units_to_decision": float(units[:, fixed_look].mean()),
        "fixed_shipped": float(fixed_ship.mean()),
    }


def experiments_e2e_parts(tick_experiments: int, outage_s: float) -> dict:
    """Part 6 (bench/experiments_e2e.py) in processes of its own: chdb opens one store per process."""
    out = {}
    for name, extra in (
        ("tick", ["--skip-data-path", f"--tick-experiments={tick_experiments}"]),
        ("e2e", ["--tick-experiments=0", f"--outage-s={outage_s}"]),
    ):
        with tempfile.NamedTemporaryFile(suffix=".json") as fh:
            done = subprocess.run(
                [sys.executable, "-m", "bench", "experiments_e2e", f"--json={fh.name}", *extra], cwd=ROOT
            )
            out[name] = (
                json.loads(Path(fh.name).read_text() or "{}") if done.returncode == 0 else {"failed": done.returncode}
            )
    return out


def main(argv: list[str]) -> int:
    import argparse

    import django

    parser = argparse.ArgumentParser(prog="python -m bench experiments")
    parser.add_argument("--phase-requests", type=int, default=500)
    parser.add_argument("--phases", type=int, default=4)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--sims", type=int, default=400)
    parser.add_argument("--tick-experiments", type=int, default=1000)
    parser.add_argument("--tick-experiments-scale", type=int, default=10_000, help="Part 6's whole tick (chdb).")
    parser.add_argument("--outage-s", type=float, default=90.0, help="Part 6: how long the store is stopped.")
    args = parser.parse_args(argv)
    os.environ.setdefault("EXPERIMENT_STORE", "postgres")  # parts 2 and 4 measure the relational store
    django.setup()
    payload = {}
    print("1/3 exposure logging on the gateway (tritonserver upstream, alternating phases) ...", flush=True)
    try:
        payload["gateway"] = gateway_cost(args.phase_requests, args.phases)
        g = payload["gateway"]
        print_table(
            ["endpoint", "requests", "p50 µs", "p99 µs", "gateway CPU µs/req", "req/s"],
            [
                [
                    k,
                    g[k]["requests"],
                    g[k]["p50_us"],
                    g[k]["p99_us"],
                    g[k]["gateway_cpu_us_per_request"],
                    g[k]["throughput_rps"],
                ]
                for k in ("plain", "experiment")
            ]
            + [
                [
                    "added",
                    "",
                    g["added"]["p50_us"],
                    g["added"]["p99_us"],
                    g["added"]["gateway_cpu_us_per_request"],
                    f"{100 * g['capacity_change']:+.1f} %",
                ]
            ],
        )
    except Exception as exc:  # noqa: BLE001 - no tritonserver/Redis here: say so, run the rest
        payload["gateway"] = {"skipped": f"{type(exc).__name__}: {exc}"}
        print(f"  skipped: {exc}")
    payload["exposure_log_cpu"] = x = exposure_log_cpu()
    print_table(
        ["flush batch", "record µs (request path)", "flush µs per exposure", "total µs"],
        [[k, v["record_us"], v["flush_us_per_exposure"], v["total_us"]] for k, v in x.items()],
    )
    print("2/4 feedback ingest, stream door and API door (PostgreSQL COPY + one attributing INSERT) ...", flush=True)
    payload["feedback"] = f = experiments_scale.feedback_ingest(args.batches, args.batch_size)
    if "skipped" in f:
        print(f"  skipped: {f['skipped']}")
    else:
        print_table(
            ["door", "events", "batch", "seconds", "events/s", "load avg (1 min) before/after"],
            [
                [
                    door,
                    f["events"],
                    f["batch_size"],
                    f[door]["seconds"],
                    f[door]["events_per_s"],
                    f"{f['load_avg_before'][0]:.1f} / {f['load_avg_after'][0]:.1f}",
                ]
                for door in ("stream", "api")
            ],
        )
    print("3/4 time to decision, sequential vs fixed horizon (simulated, +5 % true lift) ...", flush=True)
    payload["decision"] = d = time_to_decision(args.sims)
    print_table(
        ["test", "planned units/arm", "units/arm to decision", "shipped"],
        [
            [
                "sequential (mSPRT, peeking every look)",
                d["planned_units_per_arm_sequential"],
                d["sequential_median_units_to_decision"],
                d["sequential_shipped"],
            ],
            [
                "fixed horizon (one look)",
                d["planned_units_per_arm_fixed"],
                d["fixed_units_to_decision"],
                d["fixed_shipped"],
            ],
        ],
    )
    print(f"4/4 the analysis tick at {args.tick_experiments} running experiments ...", flush=True)
    payload["analysis_tick"] = t = experiments_scale.analysis_tick(args.tick_experiments)
    print_table(
        ["running experiments", "tick s", "ms per experiment", "analysed", "failed", "load avg (1 min)"],
        [
            [
                t["experiments"] + t["other_running"],
                t["tick_seconds"],
                t["ms_per_experiment"],
                t["tick"]["analysed"],
                t["tick"]["failed"],
                t["load_avg"][0],
            ]
        ],
    )
    print("5/5 the columnar store (chdb): writes per second and the tick's statistics pass at 10 000 experiments ...")
    payload["columnar_store"] = c = experiments_scale.columnar_store()
    print_table(
        ["store", "exposures/s", "feedback events/s", "stats pass s (experiments)", "load avg (1 min)"],
        [["chdb", c["exposures_per_s"], c["feedback_events_per_s"], f"{c['stats_query_s']:.2f} ({c['experiments']})",
          c["load_avg"][0]]],
    )  # fmt: skip
    print("6/6 the experiment data path with its parts running: the whole tick at 10 000 experiments (chdb), then "
          "gateway → NATS JetStream → the experiment-data process's chdb, the API door, the store stopped ...", flush=True)  # fmt: skip
    payload["data_path"] = experiments_e2e_parts(args.tick_experiments_scale, args.outage_s)
    payload["notes"] = (
        "2 shared CPUs: the client, tritonserver, Redis and the gateway share them; figures are noisy. "
        "Decision units are medians over simulations."
    )
    print(f"wrote {write_json('experiments', payload)}")
    return 0
