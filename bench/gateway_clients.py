"""The gateway as the field's clients see it, a section of `python -m bench gateway`:

- perf_analyzer, Triton's own load tester (the binary inside the tritonclient 2.40.0 wheel:
  `install_perf_analyzer` downloads that wheel with pip into var/cache/perf_analyzer/ and
  extracts only `bin/perf_analyzer`, so the project's pinned tritonclient stays as it is; the
  two libraries it links that this machine lacks, libb64 and libcudart, are the copies
  bundled in the nvidia-pytriton wheel, linked under their plain names in lib/), over HTTP
  and gRPC at concurrency 1/4/16, against Triton directly, nginx (HTTP) and the gateway:
  throughput, p50/p99, and the proxy's CPU per request (its /proc CPU time over the
  requests it counted);
- the gateway on 1..N workers (the cores it may use): capacity (wrk, closed loop) per
  worker count, and a key's rate limit held in total across the workers;
- what a shared admission costs on the hot path: the workers' shared-memory token bucket
  (gateway/keys/sharedlimits.py) against one Redis EVALSHA token bucket, per call.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import procstats

ROOT = Path(__file__).resolve().parents[1]
PA_VERSION = "2.40.0"
CACHE = ROOT / "var" / "cache" / "perf_analyzer"


def install_perf_analyzer() -> tuple[Path | None, str]:
    """(perf_analyzer binary or None, why not / LD_LIBRARY_PATH dir)."""
    binary, lib = CACHE / "bin" / "perf_analyzer", CACHE / "lib"
    if not binary.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        wheel = next(CACHE.glob(f"tritonclient-{PA_VERSION}-*.whl"), None)
        if wheel is None:
            got = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(CACHE)]
                + [f"tritonclient=={PA_VERSION}"],
                capture_output=True,
                text=True,
            )
            wheel = next(CACHE.glob(f"tritonclient-{PA_VERSION}-*.whl"), None)
            if wheel is None:
                return None, f"pip could not download tritonclient=={PA_VERSION}: {got.stderr[-300:]}"
        import zipfile

        (CACHE / "bin").mkdir(exist_ok=True)
        with zipfile.ZipFile(wheel) as archive:
            binary.write_bytes(archive.read(f"tritonclient-{PA_VERSION}.data/data/bin/perf_analyzer"))
        binary.chmod(0o755)
    link_perf_analyzer_libs(lib)
    check = subprocess.run([str(binary), "--version"], capture_output=True, text=True, env=_env(lib))
    if "error while loading shared libraries" in check.stderr:
        return None, f"perf_analyzer cannot start: {check.stderr.strip()[:300]}"
    return binary, str(lib)


def link_perf_analyzer_libs(lib: Path) -> Path:
    """`lib` holding the two shared libraries the wheels' perf_analyzer is linked against and does
    not ship (libb64, libcudart): nvidia-pytriton's copies, under their plain names."""
    import sysconfig

    lib.mkdir(parents=True, exist_ok=True)
    bundled = Path(sysconfig.get_paths()["purelib"]) / "nvidia_pytriton.libs"
    for plain, pattern in (("libb64.so.0d", "libb64-*.so.0d"), ("libcudart.so.12", "libcudart-*.so.12*")):
        found = next(bundled.glob(pattern), None)
        link = lib / plain
        if found is not None and not link.exists():
            link.symlink_to(found)
    return lib


def _env(lib) -> dict:
    return {**os.environ, "LD_LIBRARY_PATH": f"{lib}:{os.environ.get('LD_LIBRARY_PATH', '')}"}


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of these processes so far."""
    return sum(procstats.cpu_seconds(pids))


def run_perf_analyzer(
    binary, lib, url: str, protocol: str, model: str, concurrency: int, window_ms: int, rate: float | None = None
) -> dict:
    """One perf_analyzer run at one concurrency (or a fixed Poisson request rate): its CSV's
    throughput and latencies."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "pa.csv"
        cmd = [
            str(binary),
            "-m",
            model,
            "-u",
            url,
            "-i",
            protocol,
            *(
                ["--concurrency-range", f"{concurrency}:{concurrency}"]
                if rate is None
                else ["--request-rate-range", f"{rate:g}:{rate:g}", "--request-distribution", "poisson"]
            ),
            "--measurement-interval",
            str(window_ms),
            "--stability-percentage",
            "100",  # a shared 2-core machine: 3 windows within 100% of each other (its default 10% rarely holds)
            "--max-trials",
            "10",
            "-f",
            str(out),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(lib), timeout=180)
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
            return {"error": " | ".join(tail)[:400]}
        row = next(csv.DictReader(out.open()))
    return {
        "rps": round(float(row["Inferences/Second"]), 1),
        "p50_ms": round(float(row["p50 latency"]) / 1000, 3),
        "p99_ms": round(float(row["p99 latency"]) / 1000, 3),
    }


def requests_counted(metrics_url: str) -> float:
    import urllib.request

    text = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("gateway_requests_total{")
    )


def perf_analyzer_section(targets: list[dict], levels=(1, 4, 16), window_ms: int = 2000) -> dict:
    """targets: {name, url, protocol, model, pids (proxy processes, or []), metrics (gateway /metrics URL or None)}."""
    binary, lib = install_perf_analyzer()
    if binary is None:
        return {"skipped": lib}
    out = {"binary": f"perf_analyzer from tritonclient=={PA_VERSION} ({binary})", "runs": []}
    for target in targets:
        for concurrency in levels:
            print(f"  perf_analyzer {target['name']} c={concurrency} ...", file=sys.stderr, flush=True)
            cpu0 = cpu_seconds(target["pids"])
            count0 = requests_counted(target["metrics"]) if target.get("metrics") else None
            result = run_perf_analyzer(
                binary, lib, target["url"], target["protocol"], target["model"], concurrency, window_ms
            )
            cpu = cpu_seconds(target["pids"]) - cpu0
            if count0 is not None:
                counted = requests_counted(target["metrics"]) - count0
                if counted:
                    result["proxy_cpu_us_per_request"] = round(cpu / counted * 1e6, 1)
            out["runs"].append({"path": target["name"], "concurrency": concurrency, **result})
    return out


def light_rate_section(targets: list[dict], rate: float = 100.0, rounds: int = 4, window_ms: int = 2000) -> dict:
    """perf_analyzer at a fixed light Poisson rate, every target once per round in a shuffled
    order: each proxy's added p50/p99 (its run minus direct's of the same protocol in the same
    round), the median over rounds with a 95% bootstrap interval."""
    import random

    import numpy as np

    binary, lib = install_perf_analyzer()
    if binary is None:
        return {"skipped": lib}
    order = random.Random(5)
    runs: dict[str, list] = {t["name"]: [] for t in targets}
    for n in range(rounds):
        print(f"  perf_analyzer at {rate:g} req/s: round {n + 1}/{rounds}", file=sys.stderr, flush=True)
        for target in order.sample(targets, len(targets)):
            got = run_perf_analyzer(binary, lib, target["url"], target["protocol"], target["model"], 1, window_ms, rate)
            runs[target["name"]].append(got)
    out = {"rate": rate, "rounds": rounds, "added": {}}
    rng = np.random.default_rng(0)
    for name, results in runs.items():
        if name.startswith("direct"):
            continue
        base = runs["direct " + name.split()[-1]]
        for q in ("p50_ms", "p99_ms"):
            diffs = np.array([r[q] - b[q] for r, b in zip(results, base) if q in r and q in b])
            if not len(diffs):
                continue
            boot = np.median(rng.choice(diffs, size=(2000, len(diffs)), replace=True), axis=1)
            lo, hi = np.percentile(boot, [2.5, 97.5])
            out["added"].setdefault(name, {})[q] = {
                "ms": round(float(np.median(diffs)), 3),
                "ci95": [round(lo, 3), round(hi, 3)],
            }
    out["runs"] = runs
    return out


# --- workers ----------------------------------------------------------------------------------
def wrk_count(url: str, concurrency: int, seconds: float, lua: Path) -> dict:
    proc = subprocess.run(
        ["wrk", "-t2", f"-c{concurrency}", f"-d{max(1, round(seconds))}s", "-s", str(lua), url],
        capture_output=True,
        text=True,
        timeout=seconds + 30,
    )
    total = int(re.search(r"(\d+) requests in", proc.stdout).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", proc.stdout)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", proc.stdout)
    return {
        "requests": total,
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", proc.stdout).group(1)),
        "non_2xx": int(non2xx.group(1)) if non2xx else 0,
        "socket_errors": sum(int(x) for x in errors.groups()) if errors else 0,
    }


def start_gateway(work: Path, routes: dict, workers: int, port: int, grpc_port: int):

    (work / f"routes-{workers}.json").write_text(json.dumps(routes))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway",
            "--workers",
            str(workers),
            "--routes-file",
            str(work / f"routes-{workers}.json"),
        ]
        + ["--port", str(port), "--grpc-port", str(grpc_port), "--host", "127.0.0.1", "--log-level", "WARNING"],
        cwd=ROOT,
        stdout=open(work / f"gateway-{workers}.log", "wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    if not procstats.wait_http(f"http://127.0.0.1:{port}/v2/health/ready", proc):
        raise RuntimeError((work / f"gateway-{workers}.log").read_text()[-2000:])
    time.sleep(1.0 if workers > 1 else 0.2)  # every worker up (the first ready one answers /ready)
    return proc


def workers_section(work: Path, routes: dict, lua: Path, keyed_lua: Path, rate: float, burst: float, free_port) -> dict:
    from harness.processes import stop

    cores = len(os.sched_getaffinity(0))
    counts = sorted({1, cores})
    out = {"cores": cores, "capacity": [], "rate_limit": None}
    for workers in counts:
        port = free_port()
        proc = start_gateway(work, routes, workers, port, free_port())
        try:
            url = f"http://127.0.0.1:{port}/v2/models/ctr/infer"
            wrk_count(url, 16, 1, lua)  # warm
            best = None
            for _ in range(3):
                pids = procstats.process_tree(proc.pid)
                cpu0 = cpu_seconds(pids)
                got = wrk_count(url, 32, 2, lua)
                got["cpu_us_per_request"] = round((cpu_seconds(pids) - cpu0) / max(1, got["requests"]) * 1e6, 1)
                best = got if best is None or got["rps"] > best["rps"] else best
            out["capacity"].append({"workers": workers, **best})
            if workers == counts[-1]:
                keyed = f"http://127.0.0.1:{port}/v2/models/keyed/infer"
                time.sleep(burst / rate + 0.5)  # the bucket full
                t0 = time.monotonic()
                got = wrk_count(keyed, 32, 3, keyed_lua)
                elapsed = time.monotonic() - t0
                allowed = got["requests"] - got["non_2xx"]
                out["rate_limit"] = {
                    "workers": workers,
                    "rate_per_s": rate,
                    "burst": burst,
                    "seconds": round(elapsed, 2),
                    "served": allowed,
                    "refused_429_or_other": got["non_2xx"],
                    "at_most": round(burst + rate * elapsed, 1),
                    "held": allowed <= burst + rate * elapsed + 1,
                }
        finally:
            stop(proc)
    return out


def keyed_routes(routes: dict, secret: str, rate: float, burst: float) -> dict:
    doc = json.loads(json.dumps(routes))
    doc["keys"] = [
        {"id": "bench", "sha256": hashlib.sha256(secret.encode()).hexdigest(), "team": "bench", "rate_per_s": rate}
        | {"burst": burst}
    ]
    keyed = json.loads(json.dumps(doc["endpoints"][0]))
    keyed["name"], keyed["auth"] = "keyed", {"public": False, "keys": ["bench"]}
    doc["endpoints"].append(keyed)
    return doc


# --- admission cost ---------------------------------------------------------------------------
def limits_cost(redis_url: str | None, n: int = 20000) -> dict:
    """µs per admission: the shared-memory bucket and one Redis EVALSHA bucket (when a Redis answers)."""
    import asyncio

    from gateway.keys.sharedlimits import SharedLimits

    shared = SharedLimits(rows=2)
    slot = shared.slot("bench-key")
    t0 = time.process_time()
    for i in range(n):
        shared.admit(slot, i * 1e-4, 1e9, 1e9, None)
        shared.release(slot)
    out = {"shared_memory_us": round((time.process_time() - t0) / n * 1e6, 2)}
    if not redis_url:
        out["redis_evalsha_us"] = None
        return out
    script = """
    local b = redis.call('HMGET', KEYS[1], 't', 's')
    local rate, burst, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
    local t = tonumber(b[1]) or burst
    t = math.min(burst, t + (now - (tonumber(b[2]) or now)) * rate)
    if t < 1 then return 0 end
    redis.call('HSET', KEYS[1], 't', t - 1, 's', now)
    redis.call('INCR', KEYS[1] .. ':inflight')
    return 1
    """

    async def run():
        import redis.asyncio as redis

        client = redis.from_url(redis_url)
        try:
            sha = await client.script_load(script)
            calls = 2000
            t0 = time.process_time()
            for i in range(calls):
                await client.evalsha(sha, 1, "bench:limits:key", 1e9, 1e9, i * 1e-4)
                await client.decr("bench:limits:key:inflight")
            return (time.process_time() - t0) / calls * 1e6
        finally:
            await client.delete("bench:limits:key", "bench:limits:key:inflight")
            await client.aclose()

    try:
        out["redis_evalsha_us"] = round(asyncio.run(run()), 1)
    except Exception as exc:  # noqa: BLE001 - no Redis here: say so
        out["redis_evalsha_us"] = None
        out["redis_note"] = f"{type(exc).__name__}: {exc}"[:200]
    return out


# --- the section as a whole -------------------------------------------------------------------
def run_sections(
    *, work, triton, stable, nginx_port, nginx_pids, gw_port, gw_grpc_port, gw_pids, routes, lua, free_port
):
    """Every part above, on the processes bench/gateway.py started (the gateway on 1 worker)."""
    load_before = os.getloadavg()
    gw_metrics = f"http://127.0.0.1:{gw_port}/metrics"
    targets = [
        {"name": "direct http", "url": triton.http_url[7:], "protocol": "http", "model": stable, "pids": []},
        {"name": "direct grpc", "url": triton.grpc_url, "protocol": "grpc", "model": stable, "pids": []},
        {"name": "gateway http", "url": f"127.0.0.1:{gw_port}", "protocol": "http", "model": "ctr"}
        | {"pids": gw_pids, "metrics": gw_metrics},
        {"name": "gateway grpc", "url": f"127.0.0.1:{gw_grpc_port}", "protocol": "grpc", "model": "ctr"}
        | {"pids": gw_pids, "metrics": gw_metrics},
    ]
    if nginx_port:
        targets.insert(2, {"name": "nginx http", "url": f"127.0.0.1:{nginx_port}", "protocol": "http", "model": "ctr"})
        targets[2]["pids"] = nginx_pids
    print("perf_analyzer: direct, nginx and the gateway, HTTP and gRPC, c=1/4/16 ...", file=sys.stderr, flush=True)
    analyzer = perf_analyzer_section(targets)
    light = light_rate_section(targets)
    secret, rate, burst = "bench-secret-key-0123456789", 300.0, 30.0
    keyed_lua = work / "post-keyed.lua"
    keyed_lua.write_text(lua.read_text() + f'wrk.headers["Authorization"] = "Bearer {secret}"\n')
    print("workers: capacity on 1..N workers, a key's rate limit across them ...", file=sys.stderr, flush=True)
    workers = workers_section(work, keyed_routes(routes, secret, rate, burst), lua, keyed_lua, rate, burst, free_port)
    cost = limits_cost(
        os.environ.get("CELERY_BROKER_URL") if "redis" in os.environ.get("CELERY_BROKER_URL", "") else None
    )
    return {
        "perf_analyzer": analyzer,
        "perf_analyzer_light": light,
        "workers": workers,
        "admission_cost_us": cost,
        "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
    }


def print_sections(result: dict) -> None:
    from bench.common import print_table

    analyzer = result["perf_analyzer"]
    print()
    if "skipped" in analyzer:
        print(f"perf_analyzer skipped: {analyzer['skipped']}")
    else:
        by = {(r["path"], r["concurrency"]): r for r in analyzer["runs"]}
        rows = []
        for (path, concurrency), r in by.items():
            base = by.get(("direct " + path.split()[-1], concurrency), {})
            added = (
                f"{r['p50_ms'] - base['p50_ms']:+.3f} / {r['p99_ms'] - base['p99_ms']:+.3f}"
                if "p50_ms" in r and "p50_ms" in base and not path.startswith("direct")
                else "-"
            )
            rows.append(
                [path, concurrency, r.get("rps", r.get("error", "?")[-60:]), r.get("p50_ms", "-"), r.get("p99_ms", "-")]
                + [added, r.get("proxy_cpu_us_per_request", "-")]
            )
        print(f"perf_analyzer ({analyzer['binary']})")
        print_table(["path", "conc", "infer/s", "p50_ms", "p99_ms", "added p50/p99 ms", "proxy_cpu_us/req"], rows)
    light = result.get("perf_analyzer_light") or {}
    if light.get("added"):
        print(
            f"\nadded latency at a light {light['rate']:g} req/s (perf_analyzer, Poisson, {light['rounds']} interleaved rounds)"
        )
        print_table(
            ["path", "added p50 ms [95% CI]", "added p99 ms [95% CI]"],
            [
                [name]
                + [
                    f"{v[q]['ms']:+.3f} [{v[q]['ci95'][0]:+.3f}, {v[q]['ci95'][1]:+.3f}]" if q in v else "-"
                    for q in ("p50_ms", "p99_ms")
                ]
                for name, v in light["added"].items()
            ],
        )
    workers = result["workers"]
    print()
    print(f"gateway workers on {workers['cores']} cores (wrk c=32, best of 3 windows of 2 s)")
    print_table(
        ["workers", "req/s", "cpu_us/req", "errors"],
        [
            [w["workers"], w["rps"], w["cpu_us_per_request"], w["non_2xx"] + w["socket_errors"]]
            for w in workers["capacity"]
        ],
    )
    limit = workers["rate_limit"]
    if limit:
        print(
            f"a key of {limit['rate_per_s']:g}/s (burst {limit['burst']:g}) on {limit['workers']} workers: "
            f"{limit['served']} served in {limit['seconds']} s (at most {limit['at_most']}), "
            f"{'held' if limit['held'] else 'NOT HELD'} in total"
        )
    cost = result["admission_cost_us"]
    redis = f"{cost['redis_evalsha_us']} us" if cost.get("redis_evalsha_us") is not None else "n/a (no Redis)"
    print(f"admission + release per keyed request: shared memory {cost['shared_memory_us']} us, Redis EVALSHA {redis}")
    load = result["load_average"]
    print(f"load average {load['before'][0]:.1f} -> {load['after'][0]:.1f}")
