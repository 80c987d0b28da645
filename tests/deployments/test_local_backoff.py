"""A replica whose server dies at start is restarted with growing backoff, and the
server's own output is the reason shown. The "server" is a real executable that exits
at once (TRITONSERVER_BIN), so no Triton is needed."""

import time

import pytest

from deployments.drivers.base import PoolSpec
from deployments.drivers.local import LocalDriver, backoff_s

pytestmark = pytest.mark.integration


def test_backoff_grows_within_a_crash_streak():
    assert [backoff_s(n) for n in range(1, 8)] == [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0]


def test_a_server_that_dies_at_start_is_restarted_with_backoff(tmp_path, monkeypatch):
    crashing = tmp_path / "tritonserver"
    crashing.write_text("#!/bin/sh\necho 'error: creating server: Invalid argument - boom'\nexit 1\n")
    crashing.chmod(0o755)
    monkeypatch.setenv("TRITONSERVER_BIN", str(crashing))
    driver = LocalDriver(
        PoolSpec(name="crashy", replicas=1, model_repository=str(tmp_path / "crashy" / "models")), live_timeout=10
    )

    first = driver.ensure()[0]
    assert first.status == "down"
    assert "boom" in first.error and "exited during start" in first.error
    pid = driver._state("r0")["pid"]

    again = driver.ensure()[0]  # inside the backoff window: no new start
    assert again.status == "down" and "backoff" in again.error
    assert driver._state("r0")["pid"] == pid

    time.sleep(1.1)
    driver.ensure()
    state = driver._state("r0")
    assert state["pid"] != pid and state["restarts"] == 1 and state["streak"] == 2
    waiting = driver.ensure()[0]
    assert "restart in" in waiting.error and float(waiting.error.split("restart in ")[1].split("s")[0]) > 1.0  # 2 s now


def test_a_server_never_gets_one_port_twice(tmp_path, monkeypatch):
    """The kernel may offer the same ephemeral port to two binds in a row (CI saw a
    tritonserver exit for it); a stand-in socket makes that happen every time here."""
    from serving import tritonserver

    offered = iter([47001, 47001, 47002, 47002, 47001, 47003])

    class Socket:
        def __init__(self, *args):
            self.port = next(offered)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def bind(self, address):
            pass

        def getsockname(self):
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(tritonserver.socket, "socket", Socket)
    monkeypatch.setattr(tritonserver, "_HANDED_OUT", set())
    process = tritonserver.TritonProcess(model_repository=tmp_path / "models", work_dir=tmp_path)
    assert (process.http_port, process.grpc_port, process.metrics_port) == (47001, 47002, 47003)
