"""The process supervisor behind `make run`: starts each child in its own session,
restarts one that dies (with capped exponential backoff, reset after it stayed up a
while), says why in the log and in a status dict that `/healthz` shows as component
"supervisor", and stops everything on request.

A dead child never takes the others down: the gateway and the Triton replicas keep
serving while the worker, beat or web restart. Leftovers of a dead child (gunicorn or
Celery pool processes that lost their parent) are killed with its process group before
the restart, so a new child never competes with orphans for ports or queues. The one
exception is a child whose leftovers serve on by themselves (`linger_s`): the gateway's
workers outlive their killed parent for GATEWAY_SHUTDOWN_GRACE_S, answering on the port
(SO_REUSEPORT) while the restarted gateway starts beside them, then stop; their group is
killed only `linger_s` later (a backstop), or at stop().
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

BACKOFF_MAX_S = 30.0
STABLE_AFTER_S = 60.0  # up this long: the crash streak (and so the backoff) resets
STOP_GRACE_S = 20.0


def backoff_s(streak: int, cap: float = BACKOFF_MAX_S) -> float:
    """Delay before restart number `streak` of a crash streak: 0, 1, 2, 4, ... cap s."""
    return 0.0 if streak <= 1 else min(cap, 2.0 ** (streak - 2))


def exit_reason(returncode: int) -> str:
    """`-9` -> "killed by SIGKILL", `3` -> "exit code 3"."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class Child:
    name: str
    command: list[str]
    proc: subprocess.Popen | None = None
    started_at: float = 0.0  # monotonic
    restarts: int = 0
    streak: int = 0  # crashes in a row without a stable run in between
    next_start: float | None = None  # monotonic time of the pending restart
    last_exit: dict | None = None
    history: list = field(default_factory=list)  # the last few exits, newest last

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def status(self, now: float) -> dict:
        state = "up" if self.running else ("restarting" if self.next_start is not None else "stopped")
        detail = {
            "state": state,
            "pid": self.proc.pid if self.running else None,
            "restarts": self.restarts,
            "uptime_s": round(now - self.started_at, 1) if self.running else None,
            "last_exit": self.last_exit,
        }
        if self.next_start is not None and not self.running:
            detail["restart_in_s"] = round(max(0.0, self.next_start - now), 1)
        return detail


class Supervisor:
    """Run `commands` ({name: argv}) until stop(); call step() in a loop (or run())."""

    def __init__(
        self,
        commands: dict[str, list[str]],
        *,
        env: dict,
        cwd,
        log: Callable[[str], None],
        backoff_max_s: float = BACKOFF_MAX_S,
        stable_after_s: float = STABLE_AFTER_S,
        on_change: Callable[[dict], None] | None = None,
        linger_s: dict[str, float] | None = None,
    ):
        self.children = {name: Child(name, command) for name, command in commands.items()}
        self.env, self.cwd, self.log = env, cwd, log
        self.backoff_max_s, self.stable_after_s = backoff_max_s, stable_after_s
        self.on_change = on_change
        self.linger_s = linger_s or {}
        self.lingering: list[tuple[float, int]] = []  # (when to kill, process group) of dead children
        self.stopping = False

    def _spawn(self, child: Child) -> None:
        child.proc = subprocess.Popen(child.command, env=self.env, cwd=self.cwd, start_new_session=True)
        child.started_at = time.monotonic()
        child.next_start = None

    def start(self, names=None) -> None:
        """Start the children named (all by default) that never ran; restarts are step()'s."""
        for child in self.children.values():
            if (names is None or child.name in names) and child.proc is None:
                self._spawn(child)

    def status(self) -> dict:
        now = time.monotonic()
        return {
            "children": {name: child.status(now) for name, child in self.children.items()},
            "restarts": sum(child.restarts for child in self.children.values()),
        }

    @staticmethod
    def _kill_group(pid: int) -> None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def _reap(self, child: Child, now: float) -> None:
        code = child.proc.returncode
        uptime = now - child.started_at
        if self.linger_s.get(child.name):  # its leftovers serve on while the new one starts, then leave
            self.lingering.append((now + self.linger_s[child.name], child.proc.pid))
        else:
            self._kill_group(child.proc.pid)  # orphans of the dead process (pool workers, gunicorn workers)
        child.streak = 1 if uptime >= self.stable_after_s else child.streak + 1
        delay = backoff_s(child.streak, self.backoff_max_s)
        child.last_exit = {"code": code, "reason": exit_reason(code), "at": _now_iso(), "uptime_s": round(uptime, 1)}
        child.history = (child.history + [child.last_exit])[-5:]
        child.next_start = now + delay
        self.log(
            f"{child.name} (pid {child.proc.pid}) exited: {exit_reason(code)} after {uptime:.1f}s up; "
            f"restarting in {delay:.0f}s (crash {child.streak} in a row)"
        )

    def step(self) -> bool:
        """Reap dead children and start the ones whose backoff is over; True when
        anything changed (the caller publishes the status then)."""
        changed = False
        now = time.monotonic()
        for due, group in [entry for entry in self.lingering if entry[0] <= now]:
            self._kill_group(group)
            self.lingering.remove((due, group))
        for child in self.children.values():
            if child.running and child.proc.poll() is not None:
                self._reap(child, now)
                changed = True
            if not child.running and child.next_start is not None and now >= child.next_start and not self.stopping:
                self._spawn(child)
                child.restarts += 1
                self.log(f"{child.name} restarted (pid {child.proc.pid}, restart #{child.restarts})")
                changed = True
        if changed and self.on_change:
            self.on_change(self.status())
        return changed

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM every running child (each shuts its own children down), SIGKILL the
        process group of any still there after `grace_s`."""
        self.stopping = True
        running = [child.proc for child in self.children.values() if child.running]
        for proc in running:
            proc.terminate()
        deadline = time.monotonic() + grace_s
        for proc in running:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            self._kill_group(proc.pid)
            proc.poll()
        for _, group in self.lingering:
            self._kill_group(group)
        self.lingering = []
