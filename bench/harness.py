"""Pieces the closed-loop benchmark and the closed-loop integration test share: packaged
candidate artifacts (healthy, failing a share of requests, or slower), child processes,
and a steady load generator against the gateway."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import requests
from django.conf import settings

INJECT = """

# --- injected: behave like a bad model version (errors and/or extra latency) ---
import random as _random
import time as _time

_serve = TritonPythonModel.execute


def _injected_execute(self, requests):
    if {delay_s} > 0:
        _time.sleep({delay_s})
    responses = _serve(self, requests)
    return [pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError("injected failure"))
            if _random.random() < {error_rate} else r for r in responses]


TritonPythonModel.execute = _injected_execute
"""


def package_artifact(
    team,
    onnx_path: Path,
    work: Path,
    *,
    model_name: str = "ctr",
    error_rate: float = 0.0,
    delay_s: float = 0.0,
    write_dir=None,
):
    """A servable Artifact over a Triton model dir in the artifact factory's layout, whose
    model optionally fails `error_rate` of requests or sleeps `delay_s` per batch.
    `write_dir(parent, name, onnx_path)`: how to write the directory (default: the demo
    model's, tests/deployments/packaging.py)."""
    from registry import storage
    from registry.models import (
        Artifact,
        ArtifactStatus,
        Build,
        BuildStatus,
        ModelVersion,
        RegisteredModel,
        VersionSource,
    )
    from registry.names import triton_model_name
    from tests.deployments.packaging import write_model_dir

    model = RegisteredModel.objects.filter(name=model_name).first() or RegisteredModel.objects.create(
        name=model_name, team=team
    )
    version = ModelVersion.objects.create(
        model=model,
        version=model.versions.count() + 1,
        source=VersionSource.UPLOAD,
        file_sha256="0" * 64,
        file_path="x.onnx",
    )
    build = Build.objects.create(version=version, targets=["onnx-fp32"], status=BuildStatus.SUCCEEDED)
    name = triton_model_name(model_name, version.version, "onnx-fp32")
    staged = (write_dir or write_model_dir)(work / "staging", name, onnx_path)
    if error_rate or delay_s:
        with open(staged / "1" / "model.py", "a") as fh:
            fh.write(INJECT.replace("{error_rate}", repr(float(error_rate))).replace("{delay_s}", repr(float(delay_s))))
    rel, sha = storage.put_dir(staged)
    shutil.rmtree(work / "staging", ignore_errors=True)
    return Artifact.objects.create(
        version=version,
        build=build,
        variant="onnx-fp32",
        status=ArtifactStatus.SERVABLE,
        triton_model_name=name,
        path=rel,
        sha256=sha,
    )


def spawn(args: list[str], env: dict, log_path: Path) -> subprocess.Popen:
    log = open(log_path, "ab")
    proc = subprocess.Popen(
        args, cwd=settings.BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    log.close()
    return proc


def stop(proc: subprocess.Popen | None, sig=signal.SIGTERM) -> None:
    if proc and proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def wait_for(check, *, timeout: float, what: str, interval: float = 0.25):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


class Load:
    """About `rate` requests/s against a gateway endpoint from a few threads; records
    (time, status, variant, latency) of every reply."""

    def __init__(self, url: str, rate: float = 120.0, threads: int = 4, body: str | None = None):
        self.url, self.interval, self.threads = url, threads / rate, threads
        self.records: list[tuple[float, int, str, float]] = []
        self.stop_event = threading.Event()
        rng = np.random.default_rng(0)
        self.body = (
            json.dumps(
                {
                    "inputs": [
                        {
                            "name": "dense",
                            "shape": [1, 13],
                            "datatype": "FP32",
                            "data": rng.normal(size=13).round(4).tolist(),
                        },
                        {
                            "name": "sparse",
                            "shape": [1, 26],
                            "datatype": "INT64",
                            "data": rng.integers(0, 5000, size=26).tolist(),
                        },
                    ]
                }
            )
            if body is None
            else body
        )

    @property
    def statuses(self) -> list[int]:
        return [r[1] for r in self.records]

    @property
    def variants(self) -> list[str]:
        return [r[2] for r in self.records]

    def errors_since(self, t: float) -> int:
        return sum(1 for at, status, _, _ in self.records if at >= t and status != 200)

    def error_statuses_since(self, t: float) -> dict[str, int]:
        """Non-200 replies by status ("0" = no reply: connection error or client timeout)."""
        counts: dict[str, int] = {}
        for at, status, _, _ in self.records:
            if at >= t and status != 200:
                counts[str(status)] = counts.get(str(status), 0) + 1
        return counts

    def error_times_since(self, t: float) -> list[float]:
        """Seconds after `t` at which non-200 replies arrived (where in a rollout they fall)."""
        return [round(at - t, 2) for at, status, _, _ in self.records if at >= t and status != 200]

    def _run(self):
        session = requests.Session()
        next_at = time.monotonic()
        while not self.stop_event.is_set():
            started = time.monotonic()
            try:
                response = session.post(
                    self.url, data=self.body, headers={"Content-Type": "application/json"}, timeout=5
                )
                self.records.append(
                    (
                        time.time(),
                        response.status_code,
                        response.headers.get("X-Model-Variant", ""),
                        time.monotonic() - started,
                    )
                )
            except requests.RequestException:
                self.records.append((time.time(), 0, "", time.monotonic() - started))
            next_at += self.interval
            time.sleep(max(0.0, next_at - time.monotonic()))

    def start(self) -> Load:
        self.workers = [threading.Thread(target=self._run, daemon=True) for _ in range(self.threads)]
        for worker in self.workers:
            worker.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        for worker in self.workers:
            worker.join(10)
