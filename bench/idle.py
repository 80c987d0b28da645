"""python -m bench idle — what an idle `make run` costs with the demo loaded.

Starts `manage.py run_platform` as `make run` does (SQLite and the local MLflow store under a
fresh VAR_DIR of its own, Redis as the broker when it answers, NATS for the event log when it
answers), waits for /healthz and the demo experiment, lets it settle, then reads every
process of the tree twice, `--seconds` apart (120 by default): CPU from each process's own
counters (/proc/PID/stat, so other work on a shared host does not count) and PSS
(/proc/PID/smaps_rollup). Prints CPU seconds, % of one core and PSS per component (web,
worker, beat, gateway, pools, tritonserver, ...) with the load average, and writes
var/bench/idle.json. Goals: idle <= 5 % of one core, <= 2 GiB PSS.

Options: --seconds N, --settle N, --label TEXT (kept in the JSON, e.g. "before")."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from bench import procs
from bench.common import print_table, write_json

ROOT = Path(__file__).resolve().parents[1]
GOALS = {"cpu_pct_of_one_core": "<= 5", "pss_mib": "<= 2048"}

# the component a process belongs to, by a word of its command line (first match wins)
ROLES = (
    ("triton_python_backend_stub", "triton-stub"),
    ("tritonserver", "tritonserver"),
    ("gunicorn", "web"),
    ("--hostname=worker@", "worker"),
    ("--hostname=builder@", "builder"),
    ("beat", "beat"),
    ("run_pools", "pools"),
    ("run_experiment_data", "experiment-data"),
    ("gateway", "gateway"),
    ("run_platform", "supervisor"),
)


def role_of(argv: list[str]) -> str:
    joined = " ".join(argv)
    for word, role in ROLES:
        if word in joined:
            return role
    return Path(argv[0]).name if argv else "?"


def snapshot(root_pid: int) -> dict[int, dict]:
    """{pid: {role, user+system CPU ticks, pss_kib}} of the tree now."""
    out = {}
    for pid in procs.process_tree(root_pid):
        ticks = procs.cpu_ticks(pid)
        if ticks is None:
            continue
        out[pid] = {"role": role_of(procs.cmdline(pid)), "ticks": sum(ticks), "pss_kib": procs.pss_kib(pid) or 0}
    return out


def summarize(before: dict[int, dict], after: dict[int, dict], seconds: float, tick_hz: int) -> dict:
    """Per role: processes, CPU seconds spent between the snapshots (processes present in
    both; one that started meanwhile counts from 0), % of one core, PSS MiB (at the end)."""
    roles: dict[str, dict] = {}
    for pid, now in after.items():
        spent = now["ticks"] - before.get(pid, {"ticks": 0})["ticks"]
        row = roles.setdefault(now["role"], {"processes": 0, "cpu_s": 0.0, "pss_mib": 0.0})
        row["processes"] += 1
        row["cpu_s"] += spent / tick_hz
        row["pss_mib"] += now["pss_kib"] / 1024
    for row in roles.values():
        row["cpu_pct_of_one_core"] = round(100 * row["cpu_s"] / seconds, 2)
        row["cpu_s"] = round(row["cpu_s"], 2)
        row["pss_mib"] = round(row["pss_mib"], 1)
    total_cpu = sum(r["cpu_s"] for r in roles.values())
    return {
        "seconds": seconds,
        "roles": dict(sorted(roles.items(), key=lambda kv: -kv[1]["cpu_s"])),
        "cpu_s": round(total_cpu, 2),
        "cpu_pct_of_one_core": round(100 * total_cpu / seconds, 2),
        "pss_mib": round(sum(r["pss_mib"] for r in roles.values()), 1),
        "processes": len(after),
    }


def _free_port() -> int:
    from harness.processes import free_port

    return free_port()


def _port_answers(port: int) -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def _env(var_dir: Path, port: int) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "MLFLOW_TRACKING_URI", "ARTIFACT_ROOT", "POOLS_DIR", "HEALTHZ_TOKEN"}
    }
    env.update(
        VAR_DIR=str(var_dir),
        PORT=str(port),
        GATEWAY_PORT=str(_free_port()),
        GATEWAY_GRPC_PORT=str(_free_port()),
        GATEWAY_CONTROL_PORT=str(_free_port()),
        PYTHONUNBUFFERED="1",
    )
    if "CELERY_BROKER_URL" not in env and _port_answers(6379):
        env["CELERY_BROKER_URL"] = "redis://127.0.0.1:6379/1"  # as the Makefile picks it
    if "EVENT_LOG_URL" not in env and _port_answers(4222):
        env["EVENT_LOG_URL"] = "nats://127.0.0.1:4222"
        env.setdefault("EVENT_LOG_PREFIX", f"mp-idle-{os.getpid()}")
    return env


def _wait_ready(proc, port: int, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"run_platform exited:\n{log.read_text()[-3000:]}")
        try:
            up = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
        except requests.RequestException:
            up = False
        text = log.read_text(errors="replace")
        if up and ("demo experiment ready" in text or "demo experiment not prepared" in text):
            return
        time.sleep(2)
    raise RuntimeError(f"not up within {timeout_s:.0f} s:\n{log.read_text()[-3000:]}")


def _delete_streams(env: dict) -> None:
    """The run's own JetStream streams (its prefix): each reserves its retention's bytes on the
    server, and a server whose reservations are full refuses every new stream (every other run's)."""
    if env.get("EVENT_LOG_URL") and env.get("EVENT_LOG_PREFIX", "").startswith("mp-idle-"):
        from experiments.eventlog.reader import NatsReader

        reader = NatsReader(env["EVENT_LOG_URL"], env["EVENT_LOG_PREFIX"])
        try:
            reader.delete_streams()
        finally:
            reader.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench idle")
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--settle", type=float, default=30.0, help="seconds after the demo is ready")
    parser.add_argument("--label", default="")
    parser.add_argument("--start-timeout", type=float, default=600.0)
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="bench-idle-"))
    port = _free_port()
    log = work / "run.log"
    print(f"[idle] make run under {work} (port {port}) ...", file=sys.stderr, flush=True)
    env = _env(work / "var", port)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "run_platform", f"--port={port}"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_ready(proc, port, log, args.start_timeout)
        print(f"[idle] up; settling {args.settle:.0f} s, then {args.seconds:.0f} s measured", file=sys.stderr)
        time.sleep(args.settle)
        load0 = procs.load_average()
        before, t0 = snapshot(proc.pid), time.monotonic()
        time.sleep(args.seconds)
        after, elapsed = snapshot(proc.pid), time.monotonic() - t0
        load1 = procs.load_average()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        _delete_streams(env)
    summary = summarize(before, after, elapsed, os.sysconf("SC_CLK_TCK"))
    rows = [
        [role, r["processes"], r["cpu_s"], r["cpu_pct_of_one_core"], r["pss_mib"]]
        for role, r in summary["roles"].items()
    ]
    rows.append(["total", summary["processes"], summary["cpu_s"], summary["cpu_pct_of_one_core"], summary["pss_mib"]])
    print(f"\nidle make run with the demo loaded, {elapsed:.0f} s; load average {load0} -> {load1}")
    print_table(["component", "procs", "cpu_s", "% of one core", "pss_mib"], rows)
    path = write_json(
        "idle",
        {
            "label": args.label,
            "goals": GOALS,
            "load_average": {"start": load0, "end": load1},
            "cores": len(os.sched_getaffinity(0)),
            **summary,
        },
    )
    print(f"\nwrote {path}")
    return 0
