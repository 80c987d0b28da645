"""What `make run` says while it starts (config/management/commands/run_platform.py): a
line when a step begins, one at least every PROGRESS_EVERY_S while it runs (what it is
doing and for how long: migrating, seeding, the seed's current part), and, once the
children are started, what /healthz still waits for, until everything answers and the
URLs are printed. Lines carry the same timestamp as the platform's log lines, so a
newcomer (and tests/test_make_run.py) sees the platform is alive, not hung. The demo's seed
runs beside the children's start (SeedThread), its lines passed through as they come."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager

from django.conf import settings

PROGRESS_EVERY_S = 5.0  # well inside the 10 s a newcomer waits before thinking it is stuck
HEALTH_POLL_S = 1.0
STARTUP_WAIT_S = 900.0  # after this the URLs are printed anyway, with what is still down


class Progress:
    """Prints `<time> make run: <what>` lines through `write` (thread-safe)."""

    def __init__(self, write):
        self._write, self._lock = write, threading.Lock()
        self.detail = ""  # the current step's part, when the step tells (the seed's current line)

    def say(self, message: str) -> None:
        with self._lock:
            self._write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} make run: {message}")

    @contextmanager
    def step(self, what: str):
        """Say `what…` now, `still what` every PROGRESS_EVERY_S until it ends, then how long it took."""
        started = time.monotonic()
        self.detail = ""
        self.say(f"{what}…")
        done = threading.Event()

        def tick() -> None:
            while not done.wait(PROGRESS_EVERY_S):
                part = f": {self.detail}" if self.detail else ""
                self.say(f"still {what}{part} ({time.monotonic() - started:.0f} s)")

        ticker = threading.Thread(target=tick, name="make-run-progress", daemon=True)
        ticker.start()
        try:
            yield self
        finally:
            done.set()
            ticker.join()
        self.say(f"{what}: done in {time.monotonic() - started:.1f} s")


class SeedOutput:
    """The seed command's stdout: passed through, and its latest "seed: …" line kept as the
    progress ticker's detail (which part of the seed is running)."""

    def __init__(self, stdout, progress: Progress):
        self.stdout, self.progress = stdout, progress

    def write(self, text: str, *args, **kwargs) -> None:
        self.stdout.write(text, *args, **kwargs)
        line = text.strip().splitlines()[-1] if text.strip() else ""
        if line.startswith("seed: "):
            self.progress.detail = line.removeprefix("seed: ").rstrip("…. ")[:160]

    def flush(self) -> None:
        self.stdout.flush()


def components_down(url: str, token: str, timeout: float = 2.0) -> list[str] | None:
    """The /healthz components not up yet (names, with a short why), [] when all are, None
    while the web server does not answer at all."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            body = json.loads(exc.read())
        except ValueError:
            return [f"web (HTTP {exc.code})"]
    except (OSError, ValueError):
        return None
    return sorted(name for name, c in (body.get("components") or {}).items() if c.get("state") != "up")


class HealthWait(threading.Thread):
    """Polls /healthz beside the supervising loop (which must stay quick to restart a child)
    and says what it waits for every PROGRESS_EVERY_S; `ready` is set once all is up or the
    wait gave up (`down` then names what is not)."""

    def __init__(self, progress: Progress, url: str, token: str, names: list[str]):
        super().__init__(name="make-run-health", daemon=True)
        self.progress, self.url, self.token, self.names = progress, url, token, names
        self.ready, self.stopping = threading.Event(), threading.Event()
        self.web_up = threading.Event()  # the web server answers: what reads the route table is there
        self.down: list[str] = list(names)
        self.started = time.monotonic()

    def run(self) -> None:
        # what it waits for is said by a ticker of its own: a slow /healthz answer (its probes
        # time out after a second or two each) never stretches the gap between two lines
        ticker = threading.Thread(target=self._tick, name="make-run-waiting", daemon=True)
        ticker.start()
        while not self.stopping.is_set() and time.monotonic() - self.started < STARTUP_WAIT_S:
            down = components_down(self.url, self.token)
            if down is not None:
                self.web_up.set()
            if down == []:
                self.down = []
                break
            self.down = ["web"] if down is None else down
            self.stopping.wait(HEALTH_POLL_S)
        self.web_up.set()
        self.ready.set()
        ticker.join()

    def _tick(self) -> None:
        while not self.ready.wait(PROGRESS_EVERY_S):
            self.progress.say(
                f"waiting for {', '.join(self.down)} to come up ({time.monotonic() - self.started:.0f} s)"
            )


class SeedThread(threading.Thread):
    """`manage.py seed_demo` in a process of its own (its torch, ~0.4 GiB, must not stay in the
    supervisor for as long as the platform runs), beside the platform's start, under the
    progress step "seeding the demo…" (the seed's lines pass through as they come, its current
    part said every few seconds). `done` once it ended; `failed` its error (make run then stops
    everything and says why); `stop` ends it with the platform."""

    def __init__(self, stdout, progress: Progress, no_experiment: bool, no_llm: bool, *, skip: bool):
        super().__init__(name="make-run-seed", daemon=True)
        self.stdout, self.progress, self.skip = stdout, progress, skip
        self.command = [sys.executable, str(settings.BASE_DIR / "manage.py"), "seed_demo"]
        self.command += ["--no-experiment"] * no_experiment + ["--no-llm"] * no_llm
        self.child: subprocess.Popen | None = None
        self.lock, self.stopped = threading.Lock(), False
        self.done = threading.Event()
        self.failed: str | None = None

    def run(self) -> None:
        try:
            if not self.skip:
                with self.progress.step("seeding the demo"):
                    self._seed(SeedOutput(self.stdout, self.progress))
        except Exception as exc:  # the child could not even start: said, and make run stops
            self.failed = f"seeding the demo failed: {exc}"
        finally:
            self.done.set()

    def _seed(self, out: SeedOutput) -> None:
        with self.lock:  # a stop before the child exists: no child is started after it
            if self.stopped:
                return
            self.child = subprocess.Popen(
                self.command, cwd=settings.BASE_DIR, stdout=subprocess.PIPE, text=True, bufsize=1
            )
        with self.child:
            for line in self.child.stdout:
                out.write(line.rstrip("\n"))
        if self.child.returncode and not self.stopped:
            self.failed = f"seeding the demo failed (seed_demo exited {self.child.returncode}; its output is above)"

    def stop(self) -> None:
        """Ctrl-C while it seeds: the seed's process ends with the platform's."""
        with self.lock:
            self.stopped = True
            child = self.child
        if child is not None and child.poll() is None:
            child.terminate()
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
        self.join(15)
