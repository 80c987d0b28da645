"""`python -m gateway --workers N`: N worker processes serving one port, as nginx does.

The supervisor (this module; it runs no event loop and starts no thread, so forking it is
safe for grpcio and uvloop) makes, before any worker:
- one listening HTTP socket per worker slot, each with SO_REUSEPORT on the same port, so
  the kernel spreads new connections over the slots; it keeps them open itself, so a slot's
  socket and its queue of not-yet-accepted connections outlive the slot's worker: a
  restarted worker takes over the same socket and no connection in the queue is lost;
- the shared key limits (sharedlimits.py), so rate limits and concurrency quotas hold in
  total across the workers;
- a private run directory (0700) where each worker answers its own metrics on a Unix
  socket, so the worker a scrape reaches adds up every worker's (aggregate.py).

Each worker is a fork running the one-process gateway (server.serve) on its slot's socket,
with its own route table, breakers, connection pools and gRPC server (gRPC binds the gRPC
port with SO_REUSEPORT in every worker: grpc core has no way to take a socket).

Signals to the supervisor: SIGTERM/SIGINT stop every worker gracefully (each finishes the
replies in progress within GATEWAY_SHUTDOWN_GRACE_S) and exit; SIGHUP replaces the workers
one at a time — a new worker on the slot's socket, and only once it is ready the old one is
told to stop (SIGTERM: it stops accepting, answers what it has with Connection: close, and
exits), so a restart under load fails no request. A worker that dies is started again on its
slot (after 0, 1, 2, 4 … s while it keeps dying), and the requests it had in flight no
longer count against their keys' quotas. A supervisor that dies (even of SIGKILL) leaves its
workers serving for GATEWAY_SHUTDOWN_GRACE_S more (PR_SET_PDEATHSIG, SIGUSR1), so the port
stays served while whoever restarts the gateway (make run, Kubernetes) starts a new one
beside them (SO_REUSEPORT); then they stop as on SIGTERM.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
import select
import shutil
import signal
import socket
import sys
import tempfile
import time

from gateway.keys import tenants
from gateway.keys.sharedlimits import SharedLimits
from gateway.process.control import control_socket

log = logging.getLogger("gateway.workers")

READY_TIMEOUT_S = 60.0
MAX_BACKOFF_S = 8.0


def default_workers() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _die_with_parent(parent: int) -> None:
    """SIGUSR1 to this worker when the supervisor dies (even of SIGKILL): it serves on for
    GATEWAY_SHUTDOWN_GRACE_S — the port stays served while whoever restarts the gateway starts
    a new one beside it (SO_REUSEPORT) — then stops as on SIGTERM: no orphan keeps the port."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGUSR1)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # it died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def listening_socket(host: str, port: int, backlog: int = 2048) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    sock.setblocking(False)
    return sock


class Worker:
    __slots__ = ("slot", "row", "pid", "ready_fd", "ready", "retiring", "started")

    def __init__(self, slot: int, row: int, pid: int, ready_fd: int):
        self.slot, self.row, self.pid, self.ready_fd = slot, row, pid, ready_fd
        self.ready = False
        self.retiring = False
        self.started = time.monotonic()


class Supervisor:
    def __init__(self, settings, workers: int):
        self.settings = settings
        self.count = workers
        port = settings.port
        self.sockets = [listening_socket(settings.host, port)]
        if port == 0:  # an ephemeral port: every slot on the one the kernel chose
            port = settings.port = self.sockets[0].getsockname()[1]
        self.sockets += [listening_socket(settings.host, port) for _ in range(workers - 1)]
        if settings.control_port:  # one control socket every worker's thread accepts on (control.py)
            settings.control_socket = control_socket(settings.host, settings.control_port)
        self.limits = SharedLimits(rows=2 * workers)  # two rows per slot: the old and the new worker of a restart
        self.run_dir = tempfile.mkdtemp(prefix="gateway-workers-")
        os.chmod(self.run_dir, 0o700)
        self.workers: dict[int, Worker] = {}
        self.failures = [0] * workers  # consecutive early deaths per slot
        self.stopping = False
        self.reload = False
        self.parent = os.getpid()

    # --- workers ------------------------------------------------------------------------
    def spawn(self, slot: int, row: int) -> Worker:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker
            os.close(read_fd)
            code = 1
            try:
                code = self._worker(slot, row, write_fd)
            except BaseException:  # noqa: BLE001 - a worker never returns into the supervisor's loop
                log.exception("worker %d failed", slot)
            finally:
                os._exit(code)
        os.close(write_fd)
        worker = Worker(slot, row, pid, read_fd)
        self.workers[pid] = worker
        log.info("worker %d started (pid %d)", slot, pid)
        return worker

    def _worker(self, slot: int, row: int, ready_fd: int) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # until serve() handles it (the supervisor's death)
        _die_with_parent(self.parent)
        for i, sock in enumerate(self.sockets):
            if i != slot:
                sock.close()
        settings = self.settings
        settings.http_socket = self.sockets[slot]
        settings.run_dir, settings.worker_row = self.run_dir, row
        self.limits.set_row(row)
        tenants.share_limits(self.limits)
        from gateway.process.server import serve

        async def main():
            ready = asyncio.Event()
            task = asyncio.ensure_future(serve(settings, ready))
            waiter = asyncio.ensure_future(ready.wait())
            await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
            if ready.is_set():
                os.write(ready_fd, b"1")
            waiter.cancel()
            await task

        try:
            import uvloop
        except ImportError:  # still correct, only slower
            asyncio.run(main())
        else:
            uvloop.run(main())
        return 0

    def wait_ready(self, worker: Worker, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not worker.ready:
            readable, _, _ = select.select([worker.ready_fd], [], [], 0.1)
            if readable:
                worker.ready = os.read(worker.ready_fd, 1) == b"1"
                if not worker.ready:  # EOF: it exited before it was ready
                    return False
            self.reap()
            if worker.pid not in self.workers:
                return False
        return worker.ready

    def reap(self) -> None:
        """Collect exited workers; restart those that were not asked to stop."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            worker = self.workers.pop(pid, None)
            if worker is None:
                continue
            os.close(worker.ready_fd)
            self.limits.forget_row(worker.row)
            try:
                os.unlink(os.path.join(self.run_dir, f"metrics-{worker.row}.sock"))
            except FileNotFoundError:
                pass
            if self.stopping or worker.retiring:
                continue
            why = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
            uptime = time.monotonic() - worker.started
            self.failures[worker.slot] = self.failures[worker.slot] + 1 if uptime < 10 else 0
            delay = min(MAX_BACKOFF_S, 2 ** (self.failures[worker.slot] - 1)) if self.failures[worker.slot] > 1 else 0
            log.warning(
                "worker %d (pid %d) died (%s after %.1f s); restarting in %g s", worker.slot, pid, why, uptime, delay
            )
            time.sleep(delay)
            self.spawn(worker.slot, worker.row)

    def restart_all(self) -> None:
        """A new worker on each slot, ready before the old one is asked to stop."""
        for slot in range(self.count):
            old = [w for w in self.workers.values() if w.slot == slot and not w.retiring]
            row = slot if not old or old[0].row != slot else slot + self.count
            fresh = self.spawn(slot, row)
            if not self.wait_ready(fresh, READY_TIMEOUT_S):
                log.error("worker %d did not become ready; keeping the running one", slot)
                continue
            for worker in old:
                worker.retiring = True
                try:
                    os.kill(worker.pid, signal.SIGTERM)
                except ProcessLookupError:  # it died meanwhile; reap() collects it
                    pass
        log.info("workers restarted")

    # --- the supervisor's life ----------------------------------------------------------
    def run(self) -> int:
        # What every worker imports, imported once here: a fork then starts serving in a
        # fraction of the time (its modules are the supervisor's pages, copy-on-write). grpc
        # only loads here; nothing of it runs (no channel, server or thread) before the fork.
        from gateway.process import server  # noqa: F401

        if self.settings.grpc_port:
            from gateway.v2.grpc import service  # noqa: F401
        try:
            import uvloop  # noqa: F401
        except ImportError:
            pass

        def on_stop(*_):
            self.stopping = True

        def on_reload(*_):
            self.reload = True

        signal.signal(signal.SIGTERM, on_stop)
        signal.signal(signal.SIGINT, on_stop)
        signal.signal(signal.SIGHUP, on_reload)
        try:
            started = [self.spawn(slot, slot) for slot in range(self.count)]
            for worker in started:
                self.wait_ready(worker, READY_TIMEOUT_S)
            print(
                f"gateway: {self.count} workers on http://{self.settings.host}:{self.settings.port}"
                + (f" and gRPC {self.settings.host}:{self.settings.grpc_port}" if self.settings.grpc_port else ""),
                flush=True,
            )
            while not self.stopping:
                if self.reload:
                    self.reload = False
                    self.restart_all()
                self.reap()
                time.sleep(0.1)
            return self.shutdown()
        finally:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def shutdown(self) -> int:
        for worker in self.workers.values():
            try:
                os.kill(worker.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + self.settings.shutdown_grace_s + 5.0
        while self.workers and time.monotonic() < deadline:
            self.reap()
            time.sleep(0.05)
        for worker in list(self.workers.values()):
            os.kill(worker.pid, signal.SIGKILL)
        for sock in self.sockets:
            sock.close()
        if self.settings.control_socket is not None:
            self.settings.control_socket.close()
        return 0


def run(settings, workers: int) -> int:
    settings.workers = workers
    os.environ["GATEWAY_WORKERS"] = str(workers)  # what each worker's share of split quotas is
    if workers == 1:
        from gateway.process.server import serve

        try:
            import uvloop
        except ImportError:
            asyncio.run(serve(settings))
        else:
            uvloop.run(serve(settings))
        return 0
    return Supervisor(settings, workers).run()


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use python -m gateway --workers N")
