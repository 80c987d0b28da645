"""config.supervisor with real child processes: a killed child comes back by itself with
the reason logged, the others are left alone, a crash loop backs off (capped), the
streak resets after a stable run, orphans of a dead child are cleaned up, and stop()
ends everything."""

import os
import signal
import sys
import time

import pytest

from config.supervisor import Supervisor, backoff_s, exit_reason

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def _wait(predicate, timeout=10.0, step=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if step:
            step()
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def make_supervisor(tmp_path):
    made = []

    def make(commands, **kwargs):
        logs = []
        sup = Supervisor(commands, env=dict(os.environ), cwd=tmp_path, log=logs.append, **kwargs)
        sup.logs = logs
        made.append(sup)
        sup.start()
        return sup

    yield make
    for sup in made:
        sup.stop(grace_s=2)


def test_backoff_grows_and_is_capped():
    assert [backoff_s(n) for n in range(1, 8)] == [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0]
    assert backoff_s(50, cap=5.0) == 5.0


def test_exit_reasons_name_the_signal():
    assert exit_reason(-9) == "killed by SIGKILL"
    assert exit_reason(3) == "exit code 3"


def test_a_killed_child_is_restarted_and_the_others_keep_running(make_supervisor):
    sup = make_supervisor({"worker": SLEEPER, "gateway": SLEEPER})
    worker_pid, gateway_pid = sup.children["worker"].proc.pid, sup.children["gateway"].proc.pid
    os.kill(worker_pid, signal.SIGKILL)
    assert _wait(lambda: sup.children["worker"].restarts == 1, step=sup.step)
    worker = sup.status()["children"]["worker"]
    assert worker["state"] == "up" and worker["pid"] != worker_pid
    assert worker["last_exit"]["code"] == -9 and worker["last_exit"]["reason"] == "killed by SIGKILL"
    assert sup.children["gateway"].proc.pid == gateway_pid and sup.children["gateway"].restarts == 0
    assert any("worker" in line and "killed by SIGKILL" in line for line in sup.logs)
    assert any("worker restarted" in line for line in sup.logs)


def test_a_crash_loop_backs_off(make_supervisor):
    sup = make_supervisor({"broken": [sys.executable, "-c", "raise SystemExit(3)"]}, backoff_max_s=1.0)
    assert _wait(lambda: sup.children["broken"].restarts >= 1, step=sup.step)  # the first restart is immediate
    assert _wait(lambda: sup.children["broken"].streak >= 3, step=sup.step)
    status = sup.status()["children"]["broken"]
    assert status["last_exit"]["reason"] == "exit code 3"
    # streak 3 waits min(cap=1, 2) s: a restart is pending, not immediate
    if status["state"] == "restarting":
        assert 0 < status["restart_in_s"] <= 1.0
    restarts = sup.children["broken"].restarts
    time.sleep(0.3)
    sup.step()
    assert sup.children["broken"].restarts <= restarts + 1


def test_the_streak_resets_after_a_stable_run(make_supervisor):
    sup = make_supervisor({"worker": SLEEPER}, stable_after_s=0.5)
    sup.children["worker"].streak = 4  # as if it had crashed four times in a row before
    time.sleep(0.6)
    os.kill(sup.children["worker"].proc.pid, signal.SIGKILL)
    assert _wait(lambda: sup.children["worker"].restarts == 1, step=sup.step)
    assert sup.children["worker"].streak == 1  # the next crash restarts at once


def _parent_of_a_sleeper(pidfile) -> list[str]:
    return [
        sys.executable,
        "-c",
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(120)",
    ]


def _gone(pid: int) -> bool:
    return not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"


def test_orphans_of_a_dead_child_are_killed_before_the_restart(make_supervisor, tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    sup = make_supervisor({"web": _parent_of_a_sleeper(pidfile)})
    assert _wait(lambda: pidfile.exists() and pidfile.read_text())
    grandchild = int(pidfile.read_text())
    pidfile.unlink()
    os.kill(sup.children["web"].proc.pid, signal.SIGKILL)
    assert _wait(lambda: sup.children["web"].restarts == 1, step=sup.step)
    assert _wait(lambda: _gone(grandchild))


def test_a_lingering_childs_leftovers_serve_beside_its_restart_then_are_killed(make_supervisor, tmp_path):
    """The gateway's case: its workers answer on while the new gateway starts (linger_s),
    and are killed after it at the latest; stop() kills them at once."""
    pidfile = tmp_path / "grandchild.pid"
    sup = make_supervisor({"gateway": _parent_of_a_sleeper(pidfile)}, linger_s={"gateway": 1.5})
    assert _wait(lambda: pidfile.exists() and pidfile.read_text())
    grandchild = int(pidfile.read_text())
    pidfile.unlink()
    os.kill(sup.children["gateway"].proc.pid, signal.SIGKILL)
    assert _wait(lambda: sup.children["gateway"].restarts == 1, step=sup.step)
    killed_at = time.monotonic()
    assert not _gone(grandchild)  # still there beside the restarted child
    assert _wait(lambda: _gone(grandchild), step=sup.step)
    assert time.monotonic() - killed_at > 1.0 and sup.lingering == []
    # at stop, a lingering group goes with the rest
    assert _wait(lambda: pidfile.exists() and pidfile.read_text())
    second = int(pidfile.read_text())
    os.kill(sup.children["gateway"].proc.pid, signal.SIGKILL)
    assert _wait(lambda: sup.children["gateway"].restarts == 2, step=sup.step) and not _gone(second)
    sup.stop(grace_s=5)
    assert _wait(lambda: _gone(second), timeout=3)


def test_stop_ends_every_child_and_restarts_nothing(make_supervisor):
    sup = make_supervisor({"a": SLEEPER, "b": SLEEPER})
    procs = [child.proc for child in sup.children.values()]
    sup.stop(grace_s=5)
    assert all(proc.returncode is not None for proc in procs)
    sup.step()
    assert all(not child.running for child in sup.children.values())
    assert all(child.restarts == 0 for child in sup.children.values())
