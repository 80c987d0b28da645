"""python -m bench gateway — what the gateway costs, against Triton directly and nginx.

One process tree on this machine, one run:
  upstream  a real tritonserver with two fast CTR models (ONNX Runtime adapter, python
            backend, several instances each) = the stable and canary of the split;
  paths     (a) direct to Triton, (b) nginx (Debian nginx-light, split_clients 90/10,
            keep-alive upstream, 1 worker like the 1-process gateway), (c) the gateway
            (`python -m gateway`, 90/10 route table from a file, each variant with its
            signature so every request is checked as in production; public endpoint).
Load, following perf_analyzer's method:
  capacity  closed loop with wrk (C, Lua script for the POST body) over a concurrency
            sweep; at each level windows are repeated until three in a row agree
            within 10% (max_rps = best stable level);
  latency   open loop, Poisson arrivals, from a separate load-generator process
            (bench/openloop.py: sends never wait for replies, so no coordinated
            omission). The three paths run at the same rate (50% of the gateway's
            capacity) and again at a light rate, in interleaved rounds (every path once
            per round, shuffled) so outside load hits them alike; "added" latency =
            path minus direct, pooled over the rounds, with a 95% interval from
            resampling whole rounds. Each path is also run at 50% of its own capacity.
Then bench/gateway_abuse.py's table, "abuse beside honest traffic" (var/bench/gateway_abuse.json).
Writes var/bench/gateway.json: added_p50_ms / added_p99_ms (gateway minus direct at the
same rate) and nginx's, each with `_ci95`, max_rps per path, rps_ratio_vs_nginx, the
proxies' CPU per request; with --profile also py-spy/perf summaries (bench/gateway_profile.py) of where the
gateway's time goes, the HTTP parser (llhttp via httptools) and the request checks
broken out.

Options: --quick (shorter windows, fewer rounds), --profile, --levels 1,4,16,32,
--instances N, --rounds N.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import gateway_abuse, gateway_clients, gateway_profile, gateway_report, openloop, procs
from bench.common import print_table, write_json
from harness.processes import stop
from harness.procstats import context_switches, cpu_seconds, process_tree, wait_http

ROOT = Path(__file__).resolve().parents[1]
# Goals: capacity at least 0.8 of nginx's; added latency at the same rate no more
# than nginx adds at p50, and no more than 1.5x what nginx adds at p99.
GOALS = {
    "rps_ratio_vs_nginx": ">= 0.8",
    "added_p50_ms": "<= nginx_added_p50_ms",
    "added_p99_ms": "<= 1.5 x nginx_added_p99_ms",
}
SIGNATURE = {
    "max_batch_size": 64,
    "inputs": [
        {"name": "dense", "datatype": "FP32", "shape": [-1, 13]},
        {"name": "sparse", "datatype": "INT64", "shape": [-1, 26]},
    ],
    "outputs": [{"name": "ctr", "datatype": "FP32", "shape": [-1, 1]}],
}
STABLE, CANARY = "ctr__v1__onnx", "ctr__v2__onnx"


# --- closed loop (wrk) --------------------------------------------------------------------
def wrk_window(url: str, concurrency: int, seconds: float, lua: Path) -> tuple[float, int]:
    proc = subprocess.run(
        ["wrk", "-t1", f"-c{concurrency}", f"-d{max(1, round(seconds))}s", "-s", str(lua), url],
        capture_output=True,
        text=True,
        timeout=seconds + 30,
    )
    out = proc.stdout
    found = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not found:
        raise RuntimeError(f"wrk failed on {url}: {out[-500:]} {proc.stderr[-500:]}")
    rps = float(found.group(1))
    wrk_window.requests = int(re.search(r"(\d+) requests in", out).group(1))
    errors = 0
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    if m:
        errors += int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        errors += sum(int(x) for x in m.groups())
    return rps, errors


def _agree(windows: list[float]) -> bool:
    last = windows[-3:]
    return len(last) == 3 and max(last) <= 1.10 * min(last)


def capacities(
    paths: dict[str, str], levels: list[int], seconds: float, lua: Path, pids: dict, max_windows: int = 8
) -> dict:
    """Closed-loop sweep. At each concurrency the paths take turns, one window each, so
    a burst of outside load hits all of them alike; a path stops once its last three
    windows agree within 10% (perf_analyzer's stability rule) or after max_windows."""
    sweeps = {name: [] for name in paths}
    cpu = {name: [0.0, 0.0] for name in paths}
    switches = dict.fromkeys(paths, 0)
    served = dict.fromkeys(paths, 0)
    for concurrency in levels:
        windows = {name: [] for name in paths}
        errors = dict.fromkeys(paths, 0)
        for _ in range(max_windows):
            todo = [name for name in paths if not _agree(windows[name])]
            if not todo:
                break
            for name in todo:
                before = cpu_seconds(pids.get(name, []))
                before_cs = context_switches(pids.get(name, []))
                rps, err = wrk_window(paths[name], concurrency, seconds, lua)
                switches[name] += context_switches(pids.get(name, [])) - before_cs
                after = cpu_seconds(pids.get(name, []))
                cpu[name][0] += after[0] - before[0]
                cpu[name][1] += after[1] - before[1]
                served[name] += wrk_window.requests
                windows[name].append(rps)
                errors[name] += err
        for name in paths:
            last = windows[name][-3:]
            sweeps[name].append(
                {
                    "concurrency": concurrency,
                    "rps": sum(last) / len(last),
                    "windows": len(windows[name]),
                    "stable": _agree(windows[name]),
                    "errors": errors[name],
                }
            )
        print(
            f"  c={concurrency}: " + ", ".join(f"{n} {sweeps[n][-1]['rps']:.0f}/s" for n in paths),
            file=sys.stderr,
            flush=True,
        )
    out = {}
    for name, sweep in sweeps.items():
        best = max(sweep, key=lambda s: s["rps"])
        out[name] = {
            "max_rps": best["rps"],
            "at_concurrency": best["concurrency"],
            "sweep": sweep,
            "proxy_cpu_us_per_request": (1e6 * sum(cpu[name]) / served[name])
            if name in pids and served[name]
            else None,
            "proxy_user_sys_us_per_request": [1e6 * c / served[name] for c in cpu[name]]
            if name in pids and served[name]
            else None,
            "proxy_context_switches_per_request": switches[name] / served[name]
            if name in pids and served[name]
            else None,
        }
    return out


def paired_ratio(gateway_url: str, nginx_url: str, concurrency: int, seconds: float, lua: Path, rounds: int) -> dict:
    """Gateway over nginx closed-loop throughput, one window each per round (shuffled
    order): the median of the per-round ratios and a 95% bootstrap interval for it."""
    import random

    import numpy as np

    rng = random.Random(4)
    ratios = []
    for _ in range(rounds):
        order = [("gateway", gateway_url), ("nginx", nginx_url)]
        rng.shuffle(order)
        rps = {name: wrk_window(url, concurrency, seconds, lua)[0] for name, url in order}
        ratios.append(rps["gateway"] / rps["nginx"] if rps["nginx"] else float("nan"))
    values = np.asarray(ratios)
    boot = np.random.default_rng(0).choice(values, size=(2000, len(values)), replace=True)
    lo, hi = np.percentile(np.median(boot, axis=1), [2.5, 97.5])
    return {
        "median": float(np.median(values)),
        "ci95": [float(lo), float(hi)],
        "ratios": [round(r, 4) for r in ratios],
        "concurrency": concurrency,
    }


# --- the system under test ----------------------------------------------------------------
NGINX_CONF = """
worker_processes 1;
daemon off;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {work}/tmp;
    proxy_temp_path {work}/tmp;
    fastcgi_temp_path {work}/tmp;
    uwsgi_temp_path {work}/tmp;
    scgi_temp_path {work}/tmp;
    upstream triton {{
        server 127.0.0.1:{triton_port};
        keepalive 256;
    }}
    split_clients "$request_id" $variant {{
        90% {stable};
        *   {canary};
    }}
    server {{
        listen 127.0.0.1:{port} backlog=2048;
        location ~ ^/v2/models/ctr/infer$ {{
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering on;
            add_header X-Model-Variant $variant always;
            proxy_pass http://triton/v2/models/$variant/infer;
        }}
        # the rest of Triton's surface as it is (perf_analyzer reads the model's name from its
        # metadata, which names the internal model through nginx, and calls that name after)
        location /v2 {{
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass http://triton;
        }}
        location ~ ^/v2/models/ctr(/config|/ready|/stats)?$ {{
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass http://triton/v2/models/{stable}$1;
        }}
    }}
}}
"""


def start_nginx(work: Path, triton_port: int, port: int):
    binary = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if not binary:
        return None, "nginx not installed (apt-get install -y nginx-light): nginx column skipped"
    (work / "tmp").mkdir(parents=True, exist_ok=True)
    conf = work / "nginx.conf"
    conf.write_text(NGINX_CONF.format(work=work, triton_port=triton_port, port=port, stable=STABLE, canary=CANARY))
    proc = subprocess.Popen(
        [binary, "-c", str(conf), "-p", str(work)],
        stdout=subprocess.DEVNULL,
        stderr=open(work / "nginx.out", "wb"),
        start_new_session=True,
    )
    if not wait_http(f"http://127.0.0.1:{port}/v2/models/ctr/infer", proc, post=True):
        proc.kill()
        return None, f"nginx did not start: {(work / 'nginx.out').read_text()[-500:]}"
    return proc, None


def main(argv: list[str]) -> int:
    status = measure(argv)
    if status == 0:  # on its own stack, once this one is down: the table "abuse beside honest traffic"
        gateway_abuse.run()
    return status


def _sweep_plan(args) -> tuple[list[int], float, float, int]:
    """(closed-loop levels, window s, open-loop s per round, open-loop rounds) for the run asked."""
    levels = (
        [int(x) for x in args.levels.split(",")] if args.levels else ([2, 8, 32] if args.quick else [1, 4, 8, 16, 32])
    )
    window = 1.0 if args.quick else 2.0
    open_duration = 1.5 if args.quick else 2.0
    rounds = args.rounds or (4 if args.quick else 12)
    return levels, window, open_duration, rounds


def _paired(paths: dict, results: dict, window: float, lua: Path, *, quick: bool) -> dict:
    """The sweep's best levels come from different moments of a shared machine; the ratio is
    also measured paired: gateway and nginx windows alternating at the gateway's best level,
    the median of the per-round ratios with a bootstrap CI."""
    level = results["gateway"]["capacity"]["at_concurrency"]
    paired_rounds = 4 if quick else 8
    print(
        f"paired capacity at c={level}: {paired_rounds} rounds of gateway and nginx windows ...",
        file=sys.stderr,
        flush=True,
    )
    return paired_ratio(paths["gateway"], paths["nginx"], level, window, lua, paired_rounds)


def _open_loop_paths(paths: dict, results: dict, gw_rate: float, light_rate: float) -> tuple[list, list, list]:
    """(same rate, light rate, each at 50 % of its own capacity): (label, url, rate) per path."""
    same = [("direct@gw-rate", paths["direct"], gw_rate), ("gateway", paths["gateway"], gw_rate)]
    light = [
        ("direct@light", paths["direct"], light_rate),
        ("gateway@light", paths["gateway"], light_rate),
    ]
    own = [("direct", paths["direct"], 0.5 * results["direct"]["capacity"]["max_rps"])]
    if "nginx" in paths:
        same.append(("nginx@gw-rate", paths["nginx"], gw_rate))
        light.append(("nginx@light", paths["nginx"], light_rate))
        own.append(("nginx", paths["nginx"], 0.5 * results["nginx"]["capacity"]["max_rps"]))
    return same, light, own


def _capacity_ratio(results: dict) -> float | None:
    """The gateway's best closed-loop rate over nginx's (None without nginx)."""
    if "nginx" not in results:
        return None
    return results["gateway"]["capacity"]["max_rps"] / results["nginx"]["capacity"]["max_rps"]


def _capacities(results: dict, paths: dict, pids: dict) -> dict:
    """The summary's closed-loop figures: each path's best rate, each proxy's CPU and context switches per request."""
    per_proxy = ("proxy_cpu_us_per_request", "proxy_user_sys_us_per_request", "proxy_context_switches_per_request")
    return {
        "max_rps": {name: results[name]["capacity"]["max_rps"] for name in paths},
        **{field: {name: results[name]["capacity"][field] for name in pids} for field in per_proxy},
    }


def _proxy_pids(gateway, nginx) -> dict[str, list[int]]:
    """The processes whose CPU and context switches are counted per request: the gateway's, nginx's tree."""
    pids = {"gateway": [gateway.pid]}
    if nginx is not None:
        pids["nginx"] = process_tree(nginx.pid)
    return pids


def _clients_section(work: Path, triton, nginx_at: tuple, gateway_at: tuple, routes: dict, lua: Path, free_port):
    """bench/gateway_clients.py's sections on the processes started here."""
    nginx, nginx_port = nginx_at
    gateway, gw_port, gw_grpc_port = gateway_at
    return gateway_clients.run_sections(
        work=work,
        triton=triton,
        stable=STABLE,
        nginx_port=nginx_port if nginx is not None else None,
        nginx_pids=process_tree(nginx.pid) if nginx is not None else [],
        gw_port=gw_port,
        gw_grpc_port=gw_grpc_port,
        gw_pids=[gateway.pid],
        routes=routes,
        lua=lua,
        free_port=free_port,
    )


def _nginx_path(work: Path, triton, nginx_port: int, paths: dict, notes: list):
    """(nginx or None, its port): nginx in front of Triton as the path to compare with, added to
    `paths`; when it cannot start, why goes to `notes`."""
    nginx, why = start_nginx(work / "nginx", triton.http_port, nginx_port)
    if nginx is not None:
        paths["nginx"] = f"http://127.0.0.1:{nginx_port}/v2/models/ctr/infer"
    else:
        notes.append(why)
        print(f"NOTE: {why}", file=sys.stderr)
    return nginx, nginx_port


def measure(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench gateway")
    parser.add_argument("--open-loop", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--duration", type=float, default=5.0, help=argparse.SUPPRESS)
    parser.add_argument("--warmup", type=float, default=1.0, help=argparse.SUPPRESS)
    parser.add_argument("--body", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="shorter windows and fewer levels")
    parser.add_argument("--profile", action="store_true", help="py-spy the gateway under closed-loop load")
    parser.add_argument(
        "--clients-only",
        action="store_true",
        help="only perf_analyzer (HTTP, gRPC), the workers and the admission cost (var/bench/gateway-clients.json)",
    )
    parser.add_argument("--levels", default=None, help="closed-loop concurrency levels, e.g. 1,4,16,32")
    parser.add_argument("--instances", type=int, default=2, help="Triton model instances per model")
    parser.add_argument("--light-rate", type=float, default=200.0, help="the light open-loop rate (req/s)")
    parser.add_argument(
        "--rounds", type=int, default=None, help="interleaved open-loop rounds at the same rate (12; quick 4)"
    )
    args = parser.parse_args(argv)
    if args.open_loop:
        return openloop.open_loop_main(args.open_loop, args.rate, args.duration, args.body, args.warmup)

    sys.path.insert(0, str(ROOT))
    from harness.triton_models import ctr_model, infer_body
    from serving.tritonserver import TritonNotAvailable, TritonProcess, free_port

    if not shutil.which("wrk"):
        print("wrk not installed (apt-get install -y wrk): cannot measure capacity", file=sys.stderr)
        return 2
    levels, window, open_duration, rounds = _sweep_plan(args)

    work = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    repo = work / "repo"
    ctr_model(repo, STABLE, instances=args.instances, seed=7)
    ctr_model(repo, CANARY, instances=args.instances, seed=8)
    body = infer_body()
    body_path = work / "body.json"
    body_path.write_bytes(body)
    lua = work / "post.lua"
    lua.write_text(
        f'local f = io.open("{body_path}", "rb")\nwrk.method = "POST"\nwrk.body = f:read("*a")\nf:close()\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
    )
    triton = nginx = gateway = None
    notes = []
    try:
        try:
            triton = TritonProcess(model_repository=repo, work_dir=work / "triton").start()
            triton.wait_live(60)
        except TritonNotAvailable as exc:
            print(f"tritonserver not available: {exc}", file=sys.stderr)
            return 2
        triton.load(STABLE)
        triton.load(CANARY)
        paths = {"direct": f"{triton.http_url}/v2/models/{STABLE}/infer"}

        nginx, nginx_port = _nginx_path(work, triton, free_port(), paths, notes)

        routes = {
            "version": "bench",
            "endpoints": [
                {
                    "name": "ctr",
                    "timeout_ms": 5000,
                    "auth": {"public": True},
                    "variants": [
                        {
                            "name": "stable",
                            "model_version": "1",
                            "triton_model": STABLE,
                            "role": "stable",
                            "weight_bp": 9000,
                            "replicas": [triton.http_url],
                            "grpc_replicas": [triton.grpc_url],
                            "signature": SIGNATURE,
                        },
                        {
                            "name": "canary",
                            "model_version": "2",
                            "triton_model": CANARY,
                            "role": "canary",
                            "weight_bp": 1000,
                            "replicas": [triton.http_url],
                            "grpc_replicas": [triton.grpc_url],
                            "signature": SIGNATURE,
                        },
                    ],
                }
            ],
        }
        (work / "routes.json").write_text(json.dumps(routes))
        gw_port, gw_grpc_port = free_port(), free_port()
        gateway = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gateway",
                "--workers",  # one process, as nginx runs one worker: per-worker figures
                "1",
                "--grpc-port",
                str(gw_grpc_port),
                "--routes-file",
                str(work / "routes.json"),
                "--port",
                str(gw_port),
                "--host",
                "127.0.0.1",
                "--log-level",
                "WARNING",
            ],
            cwd=ROOT,
            stdout=open(work / "gateway.log", "wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        if not wait_http(f"http://127.0.0.1:{gw_port}/v2/health/ready", gateway):
            print(f"gateway did not start:\n{(work / 'gateway.log').read_text()[-2000:]}", file=sys.stderr)
            return 1
        paths["gateway"] = f"http://127.0.0.1:{gw_port}/v2/models/ctr/infer"

        pinning = procs.bench_pinning()
        pinned = procs.pin_roles(
            pinning,
            {
                "proxy": [gateway.pid] + ([nginx.pid] if nginx is not None else []),
                "backend": [triton.process.pid],
            },
        )
        print(f"[gateway] {pinning.describe()}", file=sys.stderr, flush=True)
        for url in paths.values():  # warm every path (connections, model instances)
            wrk_window(url, 8, 1, lua)

        def clients_section():
            return _clients_section(
                work, triton, (nginx, nginx_port), (gateway, gw_port, gw_grpc_port), routes, lua, free_port
            )

        if args.clients_only:
            clients = clients_section()
            gateway_clients.print_sections(clients)
            print(f"\nwrote {write_json('gateway-clients', clients)}")
            return 0

        load_before = os.getloadavg()
        print(f"closed-loop sweep {levels}, {window:.0f}-s windows ...", file=sys.stderr, flush=True)
        pids = _proxy_pids(gateway, nginx)
        results = {name: {"capacity": cap} for name, cap in capacities(paths, levels, window, lua, pids).items()}
        paired = _paired(paths, results, window, lua, quick=args.quick) if "nginx" in paths else None

        # Open loop. Same rate for every path (50% of the gateway's capacity) and a light
        # rate, interleaved; then each other path at 50% of its own capacity.
        gw_rate = 0.5 * results["gateway"]["capacity"]["max_rps"]
        same, light, own = _open_loop_paths(paths, results, gw_rate, args.light_rate)

        def progress(label):
            return lambda r, n: print(f"  {label}: round {r}/{n}", file=sys.stderr, flush=True)

        print(
            f"open loop at {gw_rate:.0f} req/s (50% of the gateway's capacity), {rounds} interleaved rounds of "
            f"{open_duration:g} s per path ...",
            file=sys.stderr,
            flush=True,
        )
        measured = openloop.interleaved_rounds(
            same, rounds, open_duration, body_path, seed=1, progress=progress("same rate")
        )
        light_rounds = max(3, rounds // 2)
        print(
            f"open loop at a light {args.light_rate:.0f} req/s, {light_rounds} rounds ...", file=sys.stderr, flush=True
        )
        measured.update(
            openloop.interleaved_rounds(
                light, light_rounds, open_duration, body_path, seed=2, progress=progress("light")
            )
        )
        print("open loop, each other path at 50% of its own capacity, 2 rounds ...", file=sys.stderr, flush=True)
        measured.update(openloop.interleaved_rounds(own, 2, open_duration, body_path, seed=3))
        load_after = os.getloadavg()
        lat_all = {key: openloop.summary(m, open_duration) for key, m in measured.items()}
        for name in paths:
            results[name]["latency"] = lat_all[name]
        direct_same = lat_all["direct@gw-rate"]

        profile = None
        if args.profile:
            print("[gateway] py-spy under closed loop ...", file=sys.stderr, flush=True)
            profile = gateway_profile.profile_gateway(
                gateway.pid, lambda: wrk_window(paths["gateway"], max(levels), 5, lua), 5, work
            )

        def add(key, base, q):
            return openloop.added(measured[key], measured[base], q)

        print()
        print_table(
            ["path", "max_rps", "at_conc", "open_rps", "p50_ms", "p90_ms", "p99_ms", "errors", "proxy_cpu_us/req"],
            gateway_report.table_rows(paths, results, lat_all),
        )
        ratio = _capacity_ratio(results)
        gw50, gw99 = add("gateway", "direct@gw-rate", 0.5), add("gateway", "direct@gw-rate", 0.99)
        light50, light99 = add("gateway@light", "direct@light", 0.5), add("gateway@light", "direct@light", 0.99)
        summary = {
            "added_p50_ms": gw50["ms"],
            "added_p50_ms_ci95": gw50["ci95"],
            "added_p99_ms": gw99["ms"],
            "added_p99_ms_ci95": gw99["ci95"],
            "added_p50_ms_light": light50["ms"],
            "added_p50_ms_light_ci95": light50["ci95"],
            "added_p99_ms_light": light99["ms"],
            "added_p99_ms_light_ci95": light99["ci95"],
            "light_rate": args.light_rate,
            "same_rate": gw_rate,
            "added_p50_ms_vs_direct_at_its_own_50pct": lat_all["gateway"]["p50_ms"] - lat_all["direct"]["p50_ms"],
            "added_p99_ms_vs_direct_at_its_own_50pct": lat_all["gateway"]["p99_ms"] - lat_all["direct"]["p99_ms"],
            "rps_ratio_vs_nginx": ratio,
            **_capacities(results, paths, pids),
            "load_average": {"before": list(load_before), "after": list(load_after)},
            "pinning": {**pinning.as_dict(), "threads_pinned": pinned},
        }
        goals_met, nginx_added = {}, {}
        if "nginx" in results:  # then the paired ratio was measured too
            fields, goals_met, nginx_added = gateway_report.nginx_comparison(add, lat_all, ratio, paired, gw50, gw99)
            summary.update(fields)
        summary["goals_met"] = goals_met

        gateway_report.print_added(
            gw_rate, rounds, (load_before, load_after), args.light_rate, (gw50, gw99, light50, light99), nginx_added
        )
        print(f"  {pinning.describe()}")
        gateway_report.print_goals(ratio, paired, goals_met)
        gateway_report.print_proxies(pids, summary)
        gateway_report.print_profile(profile, max(levels))
        clients = clients_section()
        gateway_clients.print_sections(clients)
        if profile and profile.get("perf_on_cpu_by_library"):
            print(
                "on-CPU time by library (perf): "
                + ", ".join(f"{d} {p:.1f}%" for d, p in profile["perf_on_cpu_by_library"])
            )
        path = write_json(
            "gateway",
            {
                **summary,
                "goals": GOALS,
                "paths": results,
                "direct_at_gateway_rate": direct_same,
                "at_gateway_rate": {k.split("@")[0]: v for k, v in lat_all.items() if k.endswith("@gw-rate")}
                | {"gateway": lat_all["gateway"]},
                "light": {k.split("@")[0]: v for k, v in lat_all.items() if k.endswith("@light")},
                "profile": profile,
                "clients": clients,
                "notes": notes
                + [
                    "2 CPUs shared by the load generator, tritonserver, nginx/gateway and other work on the machine: figures are noisy",
                    "nginx runs 1 worker process, like the single-process gateway",
                    "added latency: pooled quantile minus direct's at the same rate; 95% CI by resampling whole interleaved rounds",
                ],
                "setup": {
                    "instances_per_model": args.instances,
                    "levels": levels,
                    "window_s": window,
                    "open_loop_s_per_round": open_duration,
                    "open_loop_rounds": rounds,
                    "cpus": os.cpu_count(),
                },
            },
        )
        print(f"\nwrote {path}")
        return 0
    finally:
        stop(gateway)
        stop(nginx)
        if triton is not None:
            triton.stop()
        shutil.rmtree(work, ignore_errors=True)
