"""Measure one candidate config on a real tritonserver: the tune stage's trial.

A scratch server of the tune's own (kernel/tritonserver.py: the same binary, backend and
environment as a local pool's replica) holds the variant's packaged directory; each trial
reloads it with the candidate config as Triton's load-time override, with the pool's
queue limits applied exactly as a pool applies them (registry/triton_config.override_json),
so what is measured is what a pool would serve. The load comes from the platform's load
generator (gateway/loadgen.py) in its own process, batch-1 requests built from the
build's own inputs (the version's data or inputs derived from the graph).

A trial, in a few seconds of wall time:
1. a closed-loop sweep over concurrency 1, 2, 4, ... (each level one short window) that
   ends when throughput stops growing or the p99 is far past the SLO: the capacity;
2. open-loop (Poisson) windows that look for the highest rate whose p99 meets the SLO
   with every request answered: starting at 90 % of the capacity within the SLO, up by
   20 % after a pass, down by 30 % after a miss;
3. the trial's objective is that rate's achieved throughput ("throughput within the SLO",
   0 when no rate met it); its p50/p99 and the server's CPU use (every process of its
   group: tritonserver and the python stubs, from /proc) are the config's row in the table.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kernel import tritonserver
from registry import triton_config

ROOT = Path(__file__).resolve().parents[3]
KSERVE_JSON_TYPES = {"BOOL": bool, "FP16": float, "FP32": float, "FP64": float, "BYTES": str}


@dataclass(frozen=True)
class Plan:
    """How long a trial measures (tests shrink it; the bench may grow it)."""

    window_s: float = 0.8
    open_window_s: float = 1.2
    levels: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    open_windows: int = 4
    warmup_s: float = 0.3
    min_flat_level: int = 8  # the sweep may call throughput flat only from this concurrency on


class TrialFailed(Exception):
    """The candidate config did not load or did not answer."""


# --- request bodies ---------------------------------------------------------------------------------
def request_bodies(config, feeds: dict[str, np.ndarray], count: int) -> list[bytes]:
    """KServe v2 JSON bodies of single-row requests (one row each, `count` distinct rows,
    cycled when there are fewer), as a client sends them to the endpoint."""
    signature = triton_config.kserve_signature(config)
    if signature is None:
        raise TrialFailed("the config has a datatype KServe JSON cannot carry")
    batched = config.max_batch_size > 0
    rows = len(next(iter(feeds.values())))
    bodies = []
    for i in range(count):
        inputs = []
        for spec in signature["inputs"]:
            array = feeds[spec["name"]]
            value = array[i % rows : i % rows + 1] if batched else array
            caster = KSERVE_JSON_TYPES.get(spec["datatype"], int)
            inputs.append(
                {
                    "name": spec["name"],
                    "shape": list(value.shape),
                    "datatype": spec["datatype"],
                    "data": [caster(x) for x in value.reshape(-1).tolist()],
                }
            )
        bodies.append(json.dumps({"inputs": inputs}).encode())
    return bodies


# --- CPU use of a process group --------------------------------------------------------------------------
def cpu_ticks(pids: list[int]) -> dict[int, float]:
    """CPU seconds (user + system) each process has used so far, from /proc."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = (int(fields[11]) + int(fields[12])) / tick
    return out


def cpu_between(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds used between two readings by the processes alive at the second (a
    process started in between counts from 0; one that ended takes its share with it)."""
    return sum(max(0.0, used - before.get(pid, 0.0)) for pid, used in after.items())


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover (not Linux)
        return os.cpu_count() or 1


# --- the scratch server --------------------------------------------------------------------------
class ScratchTriton:
    """One tritonserver serving one packaged variant under `name`, reloaded per trial."""

    def __init__(self, package_dir: Path, work_dir: Path, name: str, *, max_queue_size: int, queue_timeout_ms: int):
        self.name = name
        self.work_dir = work_dir
        self.repo = work_dir / "repo"
        self.repo.mkdir(parents=True, exist_ok=True)
        shutil.copytree(package_dir, self.repo / name, symlinks=True, dirs_exist_ok=True)
        self.limits = {"max_queue_size": max_queue_size, "queue_timeout_ms": queue_timeout_ms}
        self.server = tritonserver.TritonProcess(model_repository=self.repo, work_dir=work_dir / "server")

    def start(self, timeout: float = 90.0) -> ScratchTriton:
        self.server.start()
        self.server.wait_live(timeout)
        return self

    @property
    def infer_url(self) -> str:
        return f"{self.server.http_url}/v2/models/{self.name}/infer"

    def load(self, config, timeout: float = 120.0) -> None:
        """(Re)load the model with `config` as the pool would load it (queue limits included)."""
        text = triton_config.to_text(config)
        override = triton_config.override_json(text, name=self.name, **self.limits)
        try:
            self.server.load(self.name, timeout=timeout, config=override)
        except Exception as exc:  # Triton's own message (a bad config, a model that fails to load)
            raise TrialFailed(f"the config did not load: {str(exc).splitlines()[0][:300]}") from None
        if not self.server.is_model_ready(self.name):
            raise TrialFailed("the config loaded but the model is not ready")

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until Triton has no request of the model pending (what an overloaded window
        left queued: the load generator gave up on it, Triton computes it anyway), so the
        next window starts on an empty queue. False when it did not drain in time."""
        from kernel.triton import TritonError, TritonHTTP

        client = TritonHTTP(self.server.http_url, self.server.metrics_url)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                pending = client.metric_samples("nv_inference_pending_request_count")
            except TritonError:
                return False
            if not any(value > 0 for (model, _), value in pending.items() if model == self.name):
                return True
            time.sleep(0.05)
        return False

    def cpu_ticks(self) -> dict[int, float]:
        """Per process of the server's group (tritonserver and its python stubs)."""
        if not self.server.process:
            return {}
        return cpu_ticks(tritonserver.process_group(self.server.process.pid))

    def log_tail(self) -> str:
        return self.server.log_tail(20)

    def stop(self) -> None:
        self.server.stop()
        if self.server.process is not None:
            tritonserver.kill_group(self.server.process.pid)  # stubs the server left behind


# --- the load generator's process -------------------------------------------------------------------
class LoadClient:
    """`python -m gateway.loadgen` in its own process, one JSON window at a time."""

    def __init__(self, url: str, bodies: list[bytes], work_dir: Path):
        work_dir.mkdir(parents=True, exist_ok=True)
        paths = []
        for i, body in enumerate(bodies):
            path = work_dir / f"body-{i}.json"
            path.write_bytes(body)
            paths.append(str(path))
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.loadgen", url, *paths],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )

    def window(self, **command) -> dict:
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise TrialFailed("the load generator exited")
        reply = json.loads(line)
        if "error" in reply:
            raise TrialFailed(f"load generator: {reply['error']}")
        return reply

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# --- one trial -------------------------------------------------------------------------------------------
def _within(window: dict, slo_ms: float) -> bool:
    return window["ok"] > 0 and not window["errors"] and window["p99_ms"] is not None and window["p99_ms"] <= slo_ms


def _row(window: dict, cpu_s: float, machine_cores: int, elapsed_s: float) -> dict:
    keep = ("mode", "rate", "concurrency", "sent", "ok", "errors", "achieved_rps", "p50_ms", "p99_ms", "max_ms")
    row = {k: window[k] for k in keep if k in window}
    # Shares of the machine over the wall time the server's CPU was read across (a window that
    # drains late is longer than asked); clock ticks are 10 ms, so a short window is capped at 1.
    span = max(elapsed_s, window["seconds"])
    row["cpu_util"] = round(min(1.0, cpu_s / span / machine_cores), 3)
    row["loadgen_cpu_util"] = round(min(1.0, window.get("cpu_s", 0.0) / span / machine_cores), 3)
    return row


def _measured(server: ScratchTriton, load: LoadClient, machine_cores: int, slo_ms: float, **command) -> dict:
    server.wait_idle()
    before, started = server.cpu_ticks(), time.monotonic()
    # A request 10x past the SLO is a miss whatever it becomes: it need not hold the window up.
    window = load.window(timeout=max(1.0, 10 * slo_ms / 1000), **command)
    elapsed = time.monotonic() - started
    return _row(window, cpu_between(before, server.cpu_ticks()), machine_cores, elapsed)


def _sweep(
    server: ScratchTriton, load: LoadClient, slo_ms: float, plan: Plan, machine_cores: int, deadline: float
) -> list[dict]:
    """Closed-loop levels until throughput stops growing (two levels within 5 % of the best,
    from `plan.min_flat_level` on), the p99 is 4x the SLO, requests fail, or time is up."""
    rows, best, flat = [], 0.0, 0
    for level in plan.levels:
        if rows and time.monotonic() > deadline:
            break
        row = _measured(
            server, load, machine_cores, slo_ms, mode="closed", concurrency=level, seconds=plan.window_s, warmup=0.1
        )
        rows.append(row)
        if row["achieved_rps"] > best * 1.05:
            best, flat = row["achieved_rps"], 0
        elif level >= plan.min_flat_level:
            flat += 1
        if flat >= 2 or (row["p99_ms"] or 0) > 4 * slo_ms or row["errors"]:
            break
    return rows


def _open_search(
    server: ScratchTriton,
    load: LoadClient,
    slo_ms: float,
    sweep: list[dict],
    plan: Plan,
    machine_cores: int,
    deadline: float,
) -> tuple[list[dict], dict | None]:
    """Open-loop windows: start at 90 % of the best closed-loop rate within the SLO (half the
    peak when none was), up 20 % after a pass, down 30 % after a miss; the highest pass wins."""
    inside = [r["achieved_rps"] for r in sweep if _within(r, slo_ms)]
    peak = max((r["achieved_rps"] for r in sweep), default=0.0)
    rate = 0.9 * max(inside) if inside else 0.5 * peak
    rows, passed = [], None
    for _ in range(plan.open_windows):
        if rate < 1.0 or (rows and time.monotonic() > deadline):
            break
        row = _measured(
            server,
            load,
            machine_cores,
            slo_ms,
            mode="open",
            rate=round(rate, 1),
            seconds=plan.open_window_s,
            warmup=0.2,
        )
        rows.append(row)
        if _within(row, slo_ms) and row["achieved_rps"] >= 0.95 * rate:
            if passed is None or row["achieved_rps"] > passed["achieved_rps"]:
                passed = row
            if rate >= 1.1 * peak:
                break
            rate *= 1.2
        else:
            if passed is not None:
                break  # the last pass is the highest rate that met the SLO
            rate *= 0.7
    return rows, passed


def measure_config(
    server: ScratchTriton, load: LoadClient, config, *, slo_ms: float, plan: Plan, deadline: float | None = None
) -> dict:
    """One trial: load `config`, sweep, search the rate; past `deadline` (monotonic) it
    finishes the window it is in and uses what it has (at least one window of each kind).
    Returns the trial's row (see the module docstring); a config that fails to load or
    answer is a row with `error` and an objective of 0, never an exception."""
    started = time.monotonic()
    deadline = deadline if deadline is not None else float("inf")
    machine_cores = cores()
    try:
        server.load(config)
        warm = load.window(mode="closed", concurrency=2, seconds=plan.warmup_s, warmup=0.0, timeout=5.0)
        if not warm["ok"]:
            raise TrialFailed(f"no request answered ({warm['errors']})")
        sweep = _sweep(server, load, slo_ms, plan, machine_cores, deadline)
        open_rows, passed = _open_search(server, load, slo_ms, sweep, plan, machine_cores, deadline)
    except TrialFailed as exc:
        return {"error": str(exc), "throughput_rps": 0.0, "seconds": round(time.monotonic() - started, 2)}
    point = passed or min(open_rows or sweep, key=lambda r: (r["p99_ms"] is None, r["p99_ms"] or 0))
    return {
        "throughput_rps": passed["achieved_rps"] if passed else 0.0,
        "feasible": passed is not None,
        "p50_ms": point["p50_ms"],
        "p99_ms": point["p99_ms"],
        "cpu_util": point["cpu_util"],
        "loadgen_cpu_util": point["loadgen_cpu_util"],
        "capacity_rps": max((r["achieved_rps"] for r in sweep), default=0.0),
        "sweep": sweep,
        "open": open_rows,
        "seconds": round(time.monotonic() - started, 2),
    }


def outputs_of(url: str, body: bytes, timeout: float = 10.0) -> dict:
    """The output tensors of one request, by name (for comparing a tuned config's answers)."""
    import urllib.request

    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        reply = json.loads(response.read())
    return {o["name"]: np.asarray(o["data"], dtype=np.float64) for o in reply.get("outputs", [])}
