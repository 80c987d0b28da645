"""A real Prometheus (Debian's `prometheus` package) for tests and benchmarks: started on a
free loopback port with a scrape config and the platform's recording rules, stopped with
its process group. One helper, so no test copies the start/stop/wait."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import requests
import yaml

from serving.tritonserver import free_port

RULES = Path(__file__).resolve().parents[2] / "platform" / "prometheus" / "modelplane.rules.yml"


def require_prometheus() -> str:
    path = shutil.which("prometheus")
    if path is None:
        message = "Debian's prometheus is not installed (make system-deps installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


class PrometheusProcess:
    def __init__(self, work: Path, scrape_configs: list[dict], *, interval_s: float = 1.0):
        self.binary = require_prometheus()
        self.work = work
        self.port = free_port()
        self.config = work / "prometheus.yml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": f"{interval_s:g}s", "evaluation_interval": f"{interval_s:g}s"},
                    "rule_files": [str(RULES)],
                    "scrape_configs": scrape_configs,
                }
            )
        )
        self.proc = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> PrometheusProcess:
        log = open(self.work / "prometheus.log", "ab")
        self.proc = subprocess.Popen(
            [
                self.binary,
                f"--config.file={self.config}",
                f"--storage.tsdb.path={self.work / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {(self.work / 'prometheus.log').read_text()[-2000:]}")
            try:
                if requests.get(f"{self.url}/-/ready", timeout=0.5).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.1)
        self.stop()
        raise TimeoutError("prometheus not ready")

    def query(self, promql: str) -> list[dict]:
        body = requests.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5).json()
        assert body["status"] == "success", body
        return body["data"]["result"]

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
