"""The tune's scratch tritonserver and its load generator's process, with what a trial
reads of them: the request bodies (single rows of the build's own inputs as KServe v2
JSON), the server group's CPU use from /proc, and the outputs of one request (for the
check that a tuned config answers like the default). measure.py runs trials on them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from registry import triton_config
from serving import tritonserver

ROOT = Path(__file__).resolve().parents[3]
KSERVE_JSON_TYPES = {"BOOL": bool, "FP16": float, "FP32": float, "FP64": float, "BYTES": str}


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
        from serving.triton import TritonError, TritonHTTP

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
        # A scratch server serves no one: no graceful exit (Triton's waits for the backlog an
        # overloaded window left, up to the whole stop timeout), a short SIGTERM then SIGKILL.
        self.server.stop(timeout=2.0)
        if self.server.process is not None:
            tritonserver.kill_group(self.server.process.pid)  # stubs the server left behind


# --- the load generator's process -------------------------------------------------------------------
class LoadClient:
    """`python -m harness.loadgen` in its own process, one JSON window at a time."""

    def __init__(self, url: str, bodies: list[bytes], work_dir: Path):
        work_dir.mkdir(parents=True, exist_ok=True)
        paths = []
        for i, body in enumerate(bodies):
            path = work_dir / f"body-{i}.json"
            path.write_bytes(body)
            paths.append(str(path))
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "harness.loadgen", url, *paths],
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


def outputs_of(url: str, body: bytes, timeout: float = 10.0) -> dict:
    """The output tensors of one request, by name (for comparing a tuned config's answers)."""
    import urllib.request

    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        reply = json.loads(response.read())
    return {o["name"]: np.asarray(o["data"], dtype=np.float64) for o in reply.get("outputs", [])}
