"""python -m bench gateway — what the gateway costs, against Triton directly and nginx.

One process tree on this machine, one run:
  upstream  a real tritonserver with two fast CTR models (ONNX Runtime adapter, python
            backend, several instances each) = the stable and canary of the split;
  paths     (a) direct to Triton, (b) nginx (Debian nginx-light, split_clients 90/10,
            keep-alive upstream, 1 worker like the 1-process gateway), (c) the gateway
            (`python -m gateway`, 90/10 route table from a file).
Load, following perf_analyzer's method:
  capacity  closed loop with wrk (C, Lua script for the POST body) over a concurrency
            sweep; at each level windows are repeated until three in a row agree
            within 10% (max_rps = best stable level);
  latency   open loop, Poisson arrivals at 50% of each path's own capacity, from a
            separate load-generator process (asyncio + uvloop + the gateway's raw
            HTTP/1.1 client). Sends never wait for replies (no coordinated omission);
            latency is counted from the moment the request is written, because the
            event loop's timers have 1 ms granularity (the generator's lateness
            against the Poisson schedule is reported separately).
Writes var/bench/gateway.json: added_p50_ms / added_p99_ms (gateway minus direct, both
at the same Poisson rate = 50% of the gateway's capacity), max_rps per path,
rps_ratio_vs_nginx, the proxies' CPU per request; with --profile also the py-spy
summary of where the gateway's time goes.

Options: --quick (shorter windows), --profile, --levels 1,4,16,32, --instances N.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.common import print_table, write_json

ROOT = Path(__file__).resolve().parents[1]
GOALS = {"added_p50_ms": 0.3, "added_p99_ms": 1.0, "rps_ratio_vs_nginx": 0.5}
STABLE, CANARY = "ctr__v1__onnx", "ctr__v2__onnx"


# --- open-loop load generator (runs as its own process) ---------------------------------
async def _open_loop(url: str, rate: float, duration: float, body: bytes, warmup: float) -> dict:
    from gateway.upstream import Pool, UpstreamError

    parts = url.split("/", 3)
    pool = Pool(f"{parts[0]}//{parts[2]}", max_idle=1024)
    head = f"POST /{parts[3]} HTTP/1.1\r\nContent-Type: application/json\r\n".encode()
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    statuses: Counter = Counter()
    lateness: list[float] = []
    pending = set()
    rng = random.Random(1)

    clock = time.perf_counter  # uvloop's loop.time() has 1 ms resolution

    async def one(record: bool):
        sent = clock()
        try:
            status, _, _ = await pool.request(head, body)
        except UpstreamError as exc:
            status = exc.reason
        if record:
            latencies.append(clock() - sent)
            statuses[status] += 1

    start = clock() + 0.05
    t = start
    end = start + warmup + duration
    while t < end:
        now = clock()
        if t > now:
            await asyncio.sleep(t - now)
        lateness.append(clock() - t)
        task = loop.create_task(one(t >= start + warmup))
        pending.add(task)
        task.add_done_callback(pending.discard)
        t += rng.expovariate(rate)
    if pending:
        await asyncio.wait(pending, timeout=10)
    pool.close()
    lat = sorted(latencies)
    n = len(lat)

    def q(p):
        return lat[min(n - 1, int(p * n))] * 1000 if n else float("nan")

    late = sorted(lateness)
    return {
        "rate": rate, "sent": n, "statuses": {str(k): v for k, v in statuses.items()},
        "achieved_rps": n / duration, "p50_ms": q(0.50), "p90_ms": q(0.90), "p99_ms": q(0.99),
        "generator_late_p99_ms": late[int(0.99 * len(late))] * 1000 if late else 0.0,
        "latencies_ms": [round(x * 1000, 4) for x in latencies],
    }


def open_loop_main(args) -> int:
    body = Path(args.body).read_bytes()
    try:
        import uvloop
        result = uvloop.run(_open_loop(args.open_loop, args.rate, args.duration, body, args.warmup))
    except ImportError:
        result = asyncio.run(_open_loop(args.open_loop, args.rate, args.duration, body, args.warmup))
    print(json.dumps(result))
    return 0


def open_loop_rounds(runs: list[tuple[str, str, float]], rounds: int, duration: float, body_path: Path) -> dict:
    """Open-loop runs taking turns (run 1, 2, 3, 1, 2, 3, ...) so that outside load
    changing over time hits every path alike; latencies of all rounds are pooled."""
    pooled = {key: {"latencies": [], "statuses": Counter(), "late": [], "rate": rate} for key, _, rate in runs}
    for _ in range(rounds):
        for key, url, rate in runs:
            r = run_open_loop(url, rate, duration, body_path, warmup=0.5)
            pooled[key]["latencies"] += r.pop("latencies_ms")
            pooled[key]["statuses"].update(r["statuses"])
            pooled[key]["late"].append(r["generator_late_p99_ms"])
    out = {}
    for key, p in pooled.items():
        lat = sorted(p["latencies"])
        n = len(lat)

        def q(x):
            return lat[min(n - 1, int(x * n))] if n else float("nan")

        out[key] = {"rate": p["rate"], "sent": n, "statuses": dict(p["statuses"]), "p50_ms": q(0.5), "p90_ms": q(0.9),
                    "p99_ms": q(0.99), "generator_late_p99_ms": max(p["late"]), "rounds": rounds, "seconds_per_round": duration}
    return out


def run_open_loop(url: str, rate: float, duration: float, body_path: Path, warmup: float = 1.0) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "bench", "gateway", "--open-loop", url, "--rate", str(rate),
         "--duration", str(duration), "--warmup", str(warmup), "--body", str(body_path)],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=duration + warmup + 60,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


# --- closed loop (wrk) --------------------------------------------------------------------
def cpu_seconds(pids: list[int]) -> tuple[float, float]:
    """(user, system) CPU seconds of these processes so far (from /proc)."""
    user = system = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            user += int(fields[11])
            system += int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    tick = os.sysconf("SC_CLK_TCK")
    return user / tick, system / tick


def context_switches(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.endswith("ctxt_switches:") or "ctxt_switches:" in line:
                    total += int(line.split()[-1])
        except (OSError, ValueError):
            pass
    return total


def process_tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        try:
            todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except OSError:
            pass
    return pids


def wrk_window(url: str, concurrency: int, seconds: float, lua: Path) -> tuple[float, int]:
    proc = subprocess.run(
        ["wrk", "-t1", f"-c{concurrency}", f"-d{max(1, round(seconds))}s", "-s", str(lua), url],
        capture_output=True, text=True, timeout=seconds + 30,
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


def capacities(paths: dict[str, str], levels: list[int], seconds: float, lua: Path, pids: dict, max_windows: int = 8) -> dict:
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
            sweeps[name].append({"concurrency": concurrency, "rps": sum(last) / len(last), "windows": len(windows[name]),
                                 "stable": _agree(windows[name]), "errors": errors[name]})
        print(f"  c={concurrency}: " + ", ".join(f"{n} {sweeps[n][-1]['rps']:.0f}/s" for n in paths), file=sys.stderr, flush=True)
    out = {}
    for name, sweep in sweeps.items():
        best = max(sweep, key=lambda s: s["rps"])
        out[name] = {"max_rps": best["rps"], "at_concurrency": best["concurrency"], "sweep": sweep,
                     "proxy_cpu_us_per_request": (1e6 * sum(cpu[name]) / served[name]) if name in pids and served[name] else None,
                     "proxy_user_sys_us_per_request": [1e6 * c / served[name] for c in cpu[name]] if name in pids and served[name] else None,
                     "proxy_context_switches_per_request": switches[name] / served[name] if name in pids and served[name] else None}
    return out


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
    proc = subprocess.Popen([binary, "-c", str(conf), "-p", str(work)], stdout=subprocess.DEVNULL,
                            stderr=open(work / "nginx.out", "wb"), start_new_session=True)
    if not _wait_http(f"http://127.0.0.1:{port}/v2/models/ctr/infer", proc, post=True):
        proc.kill()
        return None, f"nginx did not start: {(work / 'nginx.out').read_text()[-500:]}"
    return proc, None


def _wait_http(url: str, proc, timeout: float = 20.0, post: bool = False) -> bool:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            req = urllib.request.Request(url, data=b'{"inputs": []}' if post else None, method="POST" if post else "GET")
            urllib.request.urlopen(req, timeout=1)
            return True
        except urllib.error.HTTPError:
            return True  # it answered
        except OSError:
            time.sleep(0.1)
    return False


def stop(proc) -> None:
    if proc is not None and proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


IDLE_FRAMES = ("epoll_pwait", "epoll_wait")


def _keep(path: Path) -> Path:
    """Copy a profile out of the temporary work dir into var/bench/."""
    from bench.common import out_dir

    target = out_dir() / f"gateway-{path.name}"
    shutil.copy2(path, target)
    return target


def profile_gateway(pid: int, url: str, concurrency: int, seconds: float, lua: Path, out: Path) -> dict:
    """Where the gateway's time goes under closed-loop load: py-spy (wall clock, Python
    and native frames; samples waiting in epoll are counted as idle and left out of the
    shares) and, when `perf` is installed, an on-CPU split by library (interpreter,
    kernel, uvloop, ...)."""
    result = {}
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    perf = shutil.which("perf")
    raw = out / "profile.txt"
    perf_data = out / "gateway-perf.data"
    procs = []
    if Path(spy).exists():
        procs.append(("py-spy", subprocess.Popen(
            [spy, "record", "-p", str(pid), "-d", str(int(seconds) + 1), "-r", "250", "-f", "raw", "-o", str(raw), "--native"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)))
    else:
        result["py_spy"] = "not installed (pip install py-spy)"
    if perf:
        procs.append(("perf", subprocess.Popen(
            [perf, "record", "-F", "999", "-p", str(pid), "-o", str(perf_data), "--", "sleep", str(int(seconds) + 1)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)))
    time.sleep(0.5)
    wrk_window(url, concurrency, seconds, lua)
    for name, proc in procs:
        _, err = proc.communicate(timeout=60)
        if proc.returncode not in (0, None) and name == "perf" and not perf_data.exists():
            result["perf"] = f"perf failed: {err.decode(errors='replace')[-200:]}"
    if raw.exists():
        self_time: Counter = Counter()
        inclusive: Counter = Counter()
        total = idle = 0
        for line in raw.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not count.isdigit():
                continue
            n = int(count)
            frames = stack.split(";")
            if frames[-1].split(" ")[0] in IDLE_FRAMES:
                idle += n
                continue
            total += n
            self_time[_frame(frames[-1])] += n
            for f in set(_frame(f) for f in frames):
                inclusive[f] += n
        total = total or 1
        result.update({
            "py_spy_samples_busy": total, "py_spy_samples_idle": idle,
            "self_top": [(f, round(100 * n / total, 1)) for f, n in self_time.most_common(15)],
            "inclusive_top": [(f, round(100 * n / total, 1)) for f, n in inclusive.most_common(40)
                              if not f.startswith(("0x", "_run_module_as_main", "_run_code", "<module>", "main ", "run ", "Runner.run",
                                                   "run_forever", "run_until_complete", "Loop__", "uv_run", "Py_DECREF",
                                                   "Py_XDECREF", "__libc", "_start", "Py_", "pymain", "run_", "_PyEval"))][:15],
            "raw": str(_keep(raw)),
        })
    if perf and perf_data.exists():
        report = subprocess.run([perf, "report", "-i", str(perf_data), "--stdio", "--sort", "dso"],
                                capture_output=True, text=True, timeout=120).stdout
        dsos = []
        for line in report.splitlines():
            m = re.match(r"\s+([\d.]+)%\s+(\S+)", line)
            if m:
                dsos.append((m.group(2), float(m.group(1))))
        result["perf_on_cpu_by_library"] = dsos[:8]
    return result


def _frame(frame: str) -> str:
    # "func (path/to/file.py:123)" -> "func (file.py)"
    m = re.match(r"(.*) \((.*?)(?::\d+)?\)$", frame)
    if not m:
        return frame
    return f"{m.group(1)} ({Path(m.group(2)).name})"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench gateway")
    parser.add_argument("--open-loop", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--duration", type=float, default=5.0, help=argparse.SUPPRESS)
    parser.add_argument("--warmup", type=float, default=1.0, help=argparse.SUPPRESS)
    parser.add_argument("--body", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="shorter windows and fewer levels")
    parser.add_argument("--profile", action="store_true", help="py-spy the gateway under closed-loop load")
    parser.add_argument("--levels", default=None, help="closed-loop concurrency levels, e.g. 1,4,16,32")
    parser.add_argument("--instances", type=int, default=2, help="Triton model instances per model")
    parser.add_argument("--light-rate", type=float, default=200.0, help="the light open-loop rate (req/s)")
    args = parser.parse_args(argv)
    if args.open_loop:
        return open_loop_main(args)

    sys.path.insert(0, str(ROOT))
    from deployments.tritonserver import TritonNotAvailable, TritonProcess, free_port
    from tests.gateway.triton_models import ctr_model, infer_body

    if not shutil.which("wrk"):
        print("wrk not installed (apt-get install -y wrk): cannot measure capacity", file=sys.stderr)
        return 2
    levels = [int(x) for x in args.levels.split(",")] if args.levels else ([2, 8, 32] if args.quick else [1, 4, 8, 16, 32])
    window = 1.0 if args.quick else 2.0
    open_duration = 2.0 if args.quick else 3.0
    rounds = 2 if args.quick else 4

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

        nginx_port = free_port()
        nginx, why = start_nginx(work / "nginx", triton.http_port, nginx_port)
        if nginx is not None:
            paths["nginx"] = f"http://127.0.0.1:{nginx_port}/v2/models/ctr/infer"
        else:
            notes.append(why)
            print(f"NOTE: {why}", file=sys.stderr)

        routes = {"version": "bench", "endpoints": [{"name": "ctr", "timeout_ms": 5000, "auth": {"public": True}, "variants": [
            {"name": "stable", "model_version": "1", "triton_model": STABLE, "role": "stable", "weight_bp": 9000, "replicas": [triton.http_url]},
            {"name": "canary", "model_version": "2", "triton_model": CANARY, "role": "canary", "weight_bp": 1000, "replicas": [triton.http_url]},
        ]}]}
        (work / "routes.json").write_text(json.dumps(routes))
        gw_port = free_port()
        gateway = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--routes-file", str(work / "routes.json"), "--port", str(gw_port),
             "--host", "127.0.0.1", "--log-level", "WARNING"],
            cwd=ROOT, stdout=open(work / "gateway.log", "wb"), stderr=subprocess.STDOUT, start_new_session=True,
        )
        if not _wait_http(f"http://127.0.0.1:{gw_port}/v2/health/ready", gateway):
            print(f"gateway did not start:\n{(work / 'gateway.log').read_text()[-2000:]}", file=sys.stderr)
            return 1
        paths["gateway"] = f"http://127.0.0.1:{gw_port}/v2/models/ctr/infer"

        for url in paths.values():  # warm every path (connections, model instances)
            wrk_window(url, 8, 1, lua)

        print(f"closed-loop sweep {levels}, {window:.0f}-s windows ...", file=sys.stderr, flush=True)
        pids = {"gateway": [gateway.pid]}
        if nginx is not None:
            pids["nginx"] = process_tree(nginx.pid)
        results = {name: {"capacity": cap} for name, cap in capacities(paths, levels, window, lua, pids).items()}
        # Each path at 50% of its own capacity, plus the direct path at the gateway's
        # rate: the same arrival rate, so that difference is what the gateway adds and
        # not what a higher load does to Triton.
        runs = [(name, url, 0.5 * results[name]["capacity"]["max_rps"]) for name, url in paths.items()]
        runs.append(("direct@gw-rate", paths["direct"], runs[-1][2]))
        # And both at a light rate, where queueing (and a busy machine's run queue) matter
        # least: the closest to the gateway's own cost per request.
        runs += [("direct@light", paths["direct"], args.light_rate), ("gateway@light", paths["gateway"], args.light_rate)]
        if "nginx" in paths:
            runs.append(("nginx@light", paths["nginx"], args.light_rate))
        print("open loop (Poisson), rounds of " + ", ".join(f"{k} {r:.0f}/s" for k, _, r in runs) + " ...", file=sys.stderr, flush=True)
        lat_all = open_loop_rounds(runs, rounds, open_duration, body_path)
        for name in paths:
            results[name]["latency"] = lat_all[name]
        direct_same = lat_all["direct@gw-rate"]

        profile = None
        if args.profile:
            print("[gateway] py-spy under closed loop ...", file=sys.stderr, flush=True)
            profile = profile_gateway(gateway.pid, paths["gateway"], max(levels), 5, lua, work)

        def lat(name, key):
            return results[name]["latency"][key]

        # "Added" latency compares the same arrival rate (50% of the gateway's capacity)
        # on both paths: at each path's own 50% the direct path would run Triton at a
        # higher load, and the difference would mix Triton's queueing into the figure.
        added_p50 = lat("gateway", "p50_ms") - direct_same["p50_ms"]
        added_p99 = lat("gateway", "p99_ms") - direct_same["p99_ms"]
        rows = []
        for name in paths:
            r = results[name]
            rows.append([name, r["capacity"]["max_rps"], r["capacity"]["at_concurrency"], r["latency"]["rate"],
                         r["latency"]["p50_ms"], r["latency"]["p90_ms"], r["latency"]["p99_ms"],
                         sum(v for k, v in r["latency"]["statuses"].items() if k != "200") + sum(s["errors"] for s in r["capacity"]["sweep"]),
                         r["capacity"]["proxy_cpu_us_per_request"] if r["capacity"]["proxy_cpu_us_per_request"] is not None else "-"])
        for key in ("direct@gw-rate", "direct@light", "nginx@light", "gateway@light"):
            if key not in lat_all:
                continue
            r = lat_all[key]
            rows.append([key, float("nan"), "-", r["rate"], r["p50_ms"], r["p90_ms"], r["p99_ms"],
                         sum(v for k, v in r["statuses"].items() if k != "200"), "-"])
        print()
        print_table(["path", "max_rps", "at_conc", "open_rps", "p50_ms", "p90_ms", "p99_ms", "errors", "proxy_cpu_us/req"], rows)
        ratio = (results["gateway"]["capacity"]["max_rps"] / results["nginx"]["capacity"]["max_rps"]) if "nginx" in results else None
        summary = {
            "added_p50_ms": added_p50,
            "added_p99_ms": added_p99,
            "added_p50_ms_light": lat_all["gateway@light"]["p50_ms"] - lat_all["direct@light"]["p50_ms"],
            "added_p99_ms_light": lat_all["gateway@light"]["p99_ms"] - lat_all["direct@light"]["p99_ms"],
            "light_rate": args.light_rate,
            "added_p50_ms_vs_direct_at_its_own_50pct": lat("gateway", "p50_ms") - lat("direct", "p50_ms"),
            "added_p99_ms_vs_direct_at_its_own_50pct": lat("gateway", "p99_ms") - lat("direct", "p99_ms"),
            "max_rps": {name: results[name]["capacity"]["max_rps"] for name in paths},
            "rps_ratio_vs_nginx": ratio,
            "proxy_cpu_us_per_request": {name: results[name]["capacity"]["proxy_cpu_us_per_request"] for name in pids},
            "proxy_user_sys_us_per_request": {name: results[name]["capacity"]["proxy_user_sys_us_per_request"] for name in pids},
            "proxy_context_switches_per_request": {name: results[name]["capacity"]["proxy_context_switches_per_request"] for name in pids},
        }
        if "nginx" in results:
            summary["nginx_p50_ms_at_its_own_50pct"] = lat("nginx", "p50_ms")
            summary["nginx_p99_ms_at_its_own_50pct"] = lat("nginx", "p99_ms")
        print()
        for key, goal in GOALS.items():
            value = summary[key]
            if value is None:
                print(f"{key}: n/a (no nginx)")
                continue
            ok = value >= goal if key == "rps_ratio_vs_nginx" else value <= goal
            print(f"{key}: {value:.3f} (goal {'>=' if key == 'rps_ratio_vs_nginx' else '<='} {goal}) {'met' if ok else 'MISSED'}")
        print(f"(added = gateway minus direct, both at {direct_same['rate']:.0f} req/s = 50% of the gateway's capacity; "
              f"against direct at its own 50%: p50 {summary['added_p50_ms_vs_direct_at_its_own_50pct']:+.3f} ms, "
              f"p99 {summary['added_p99_ms_vs_direct_at_its_own_50pct']:+.3f} ms)")
        for name in pids:
            us = summary["proxy_user_sys_us_per_request"][name]
            cs = summary["proxy_context_switches_per_request"][name]
            if us is not None:
                print(f"{name}: {us[0]:.1f} us user + {us[1]:.1f} us system CPU and {cs:.2f} context switches per request (closed loop)")
        light_nginx = ""
        if "nginx@light" in lat_all:
            summary["nginx_added_p50_ms_light"] = lat_all["nginx@light"]["p50_ms"] - lat_all["direct@light"]["p50_ms"]
            summary["nginx_added_p99_ms_light"] = lat_all["nginx@light"]["p99_ms"] - lat_all["direct@light"]["p99_ms"]
            light_nginx = (f" (nginx adds p50 {summary['nginx_added_p50_ms_light']:+.3f} ms, "
                           f"p99 {summary['nginx_added_p99_ms_light']:+.3f} ms)")
        print(f"at a light {args.light_rate:.0f} req/s: the gateway adds p50 {summary['added_p50_ms_light']:+.3f} ms, "
              f"p99 {summary['added_p99_ms_light']:+.3f} ms{light_nginx}")
        if profile and "self_top" in profile:
            busy, idle = profile["py_spy_samples_busy"], profile["py_spy_samples_idle"]
            print(f"\ngateway under closed-loop load at c={max(levels)}: py-spy wall-clock samples, "
                  f"{100 * idle / max(1, busy + idle):.0f}% idle in epoll; shares of the busy ones (self | inclusive):")
            for (frame, pct), (iframe, ipct) in zip(profile["self_top"], profile["inclusive_top"]):
                print(f"  {pct:5.1f}%  {frame:55s} | {ipct:5.1f}%  {iframe}")
        if profile and profile.get("perf_on_cpu_by_library"):
            print("on-CPU time by library (perf): " + ", ".join(f"{d} {p:.1f}%" for d, p in profile["perf_on_cpu_by_library"]))
        path = write_json("gateway", {
            **summary,
            "goals": GOALS,
            "paths": results,
            "direct_at_gateway_rate": direct_same,
            "light": {k.split("@")[0]: v for k, v in lat_all.items() if k.endswith("@light")},
            "profile": profile,
            "notes": notes + [
                "2 CPUs shared by the load generator, tritonserver, nginx/gateway and other work on the machine: figures are noisy",
                "nginx runs 1 worker process, like the single-process gateway",
            ],
            "setup": {"instances_per_model": args.instances, "levels": levels, "window_s": window, "open_loop_s_per_round": open_duration, "open_loop_rounds": rounds,
                      "cpus": os.cpu_count()},
        })
        print(f"\nwrote {path}")
        return 0
    finally:
        stop(gateway)
        stop(nginx)
        if triton is not None:
            triton.stop()
        shutil.rmtree(work, ignore_errors=True)
