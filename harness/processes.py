"""Child processes, once: spawn (own session, log file), stop (the whole group, then SIGKILL),
wait for a condition or a log line, and a real `celery worker`."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from django.conf import settings

from serving.tritonserver import free_port  # noqa: F401 - the harness's one free-port helper


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


def wait_for_line(path: Path, needle: str, *, timeout: float, proc=None) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace") if path.exists() else ""
        if needle in text:
            return
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited ({proc.returncode}) before {needle!r}:\n{text[-3000:]}")
        time.sleep(0.1)
    raise TimeoutError(
        f"{needle!r} not seen in {path} after {timeout}s:\n{(path.read_text(errors='replace') if path.exists() else '')[-3000:]}"
    )


class CeleryWorker:
    """A real `celery worker` child process on the configured broker."""

    def __init__(
        self, env: dict, log_path: Path, queues: str = "control,build-cpu,build-gpu", extra: list[str] | None = None
    ):
        self.env, self.log_path, self.queues, self.extra = env, log_path, queues, extra or []
        self.proc = None

    def start(self, timeout: float = 60.0) -> CeleryWorker:
        import subprocess
        import sys

        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                "-Q",
                self.queues,
                "--concurrency=1",
                "--loglevel=INFO",
                "--without-gossip",
                "--without-mingle",
                *self.extra,
            ],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        wait_for_line(self.log_path, "ready.", timeout=timeout, proc=self.proc)
        return self

    def kill(self, sig=None) -> None:
        import signal as _signal

        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig or _signal.SIGKILL)
            self.proc.wait(15)

    def stop(self) -> None:
        import signal as _signal
        import subprocess

        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, _signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
