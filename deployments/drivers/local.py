"""Local driver: real `tritonserver` processes on this machine, supervised through pid files.

Layout under the pool directory (the parent of its model repository):

    models/                 the pool's model repository (links to artifact directories)
    replicas/r0/state.json  pid, ports, restarts, when the next start may happen
    replicas/r0/tritonserver.log
    .lock                   flock held while replicas are changed (tasks and supervisor)

Processes run in their own session, so they outlive the process that started them; a
later `ensure` (any process) re-adopts a replica whose pid still runs our command line,
restarts it (with backoff) when it does not, and kills tritonserver processes under the
pool directory that no state file accounts for.

Why this is one long module: one driver over one on-disk layout; starting, probing, killing and
adopting replicas all read and write the same state files under the same lock (the pure probe
judging is in liveness.py).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import signal
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from deployments.drivers import liveness
from deployments.drivers.base import DriverError, ModelDir, PoolDriver, PoolSpec, ReplicaInfo
from serving import tritonserver
from serving.triton import TritonHTTP, health_probe

log = logging.getLogger("deployments.pools")
START_GRACE_S = 60.0  # a process never live this long after its start is killed and restarted
PROBE_TIMEOUT_S = 2.0  # one liveness probe's deadline; a replica is judged on several (liveness.py)
STABLE_AFTER_S = 60.0  # up this long: the crash streak (and so the backoff) resets
BACKOFF_MAX_S = 30.0
PORT_WAIT_S = 5.0  # how long a restart waits for its old ports before taking new ones


def backoff_s(streak: int) -> float:
    """Delay before restart number `streak` of a crash streak: 0, 1, 2, 4, ... 30 s."""
    return 0.0 if streak <= 1 else min(BACKOFF_MAX_S, 2.0 ** (streak - 2))


def _port_free(port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class LocalDriver(PoolDriver):
    kind = "local"

    def __init__(
        self,
        spec: PoolSpec,
        *,
        live_timeout: float = 60.0,
        policy: liveness.LivenessPolicy | None = None,
        probe_timeout_s: float = PROBE_TIMEOUT_S,
    ):
        super().__init__(spec)
        if not spec.model_repository:
            raise DriverError(f"pool {spec.name!r} has no model repository directory")
        self.repository = Path(spec.model_repository).resolve()
        self.root = self.repository.parent
        self.live_timeout = live_timeout
        self.policy = policy or liveness.LivenessPolicy(start_grace_s=START_GRACE_S)
        self.probe_timeout_s = probe_timeout_s

    # --- files ------------------------------------------------------------------------------------
    def replica_dir(self, name: str) -> Path:
        return self.root / "replicas" / name

    def _state(self, name: str) -> dict:
        try:
            return json.loads((self.replica_dir(name) / "state.json").read_text())
        except (OSError, ValueError):
            return {}

    def _write_state(self, name: str, state: dict) -> None:
        directory = self.replica_dir(name)
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / "state.json.tmp"
        tmp.write_text(json.dumps(state))
        os.replace(tmp, directory / "state.json")

    def _names(self) -> list[str]:
        base = self.root / "replicas"
        if not base.exists():
            return []
        return sorted(
            (p.name for p in base.iterdir() if p.is_dir() and p.name.startswith("r")), key=lambda n: int(n[1:])
        )

    @contextmanager
    def models_locked(self):
        with self._locked(".models.lock"):
            yield

    @contextmanager
    def _locked(self, name: str = ".lock"):
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / name, "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    # --- one replica -------------------------------------------------------------------------------
    def _ours(self, pid: int, state: dict) -> bool:
        cmdline = tritonserver.process_cmdline(pid)
        return (
            bool(cmdline)
            and cmdline[0].endswith("tritonserver")
            and f"--model-repository={self.repository}" in cmdline
            and f"--http-port={state.get('http_port')}" in cmdline
        )

    def _info(self, name: str, state: dict, status: str, error: str = "") -> ReplicaInfo:
        http, grpc, metrics = state.get("http_port"), state.get("grpc_port"), state.get("metrics_port")
        return ReplicaInfo(
            name=name,
            status=status,
            http_url=f"http://127.0.0.1:{http}" if http else "",
            grpc_url=f"127.0.0.1:{grpc}" if grpc else "",
            metrics_url=f"http://127.0.0.1:{metrics}/metrics" if metrics else "",
            pid=state.get("pid"),
            log_path=str(self.replica_dir(name) / "tritonserver.log"),
            restarts=state.get("restarts", 0),
            started_at=state.get("started_at"),
            error=error or state.get("last_error", ""),
        )

    def _probe(self, name: str, *, record: bool = False) -> tuple[str, dict, str]:
        """(a liveness verdict status, state, reason) of one replica: its process checked
        in /proc, then one probe with a deadline folded into the replica's probe record
        (liveness.observe). `record`: keep the new record in the state file (the
        supervisor's ensure); a read (`replicas()`) judges without writing."""
        state = self._state(name)
        pid = state.get("pid")
        if not pid:
            return liveness.DEAD, state, ""
        alive = tritonserver.process_state(pid)
        if alive == "zombie":
            return liveness.DEAD, state, self._exited(pid, state, tritonserver.reap(pid))
        if alive == "gone" or not self._ours(pid, state):  # the pid is gone or was reused by something else
            return liveness.DEAD, state, self._exited(pid, state, None)
        if "probe" in state:
            before = liveness.ProbeRecord.from_dict(state["probe"])
        else:  # a state file from before probes were recorded: its replica was adopted running
            before = liveness.ProbeRecord(live_since=state.get("started_at"))
        sent_at = time.time()
        failure = health_probe(f"http://127.0.0.1:{state['http_port']}/v2/health/live", self.probe_timeout_s)
        after, verdict = liveness.observe(
            before,
            failure=failure,
            sent_at=sent_at,
            now=time.time(),
            started_at=state.get("started_at", 0),
            policy=self.policy,
        )
        if record and after != before:
            state["probe"] = after.to_dict()
            self._write_state(name, state)
        reason = f"process {pid} {verdict.reason}" if verdict.status == liveness.DEAD else verdict.reason
        return verdict.status, state, reason

    @staticmethod
    def _exited(pid: int, state: dict, returncode: int | None) -> str:
        if state.get("last_error", "").startswith((f"process {pid} ", "tritonserver exited")):
            return state["last_error"]  # seen and said already (a restart waiting out its backoff)
        up = time.time() - state.get("started_at", time.time())
        return f"process {pid} exited after {up:.1f} s up: {liveness.exit_reason(returncode)}"

    def _kill(self, pid: int | None, state: dict) -> None:
        if not pid or tritonserver.process_state(pid) != "running" or not self._ours(pid, state):
            return
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            tritonserver.reap(pid)
            if tritonserver.process_state(pid) != "running":
                return
            time.sleep(0.05)
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        tritonserver.reap(pid)

    def _kill_leftovers(self, pgid: int) -> None:
        """SIGKILL what is left of a dead replica's process group: a python backend stub
        may briefly outlive a killed server, holding memory and inherited sockets."""
        for pid in tritonserver.process_group(pgid):
            cmdline = tritonserver.process_cmdline(pid)
            if cmdline and cmdline[0].endswith(("tritonserver", "triton_python_backend_stub")):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def _start(self, name: str, state: dict) -> dict:
        if state.get("pid"):
            self._kill_leftovers(state["pid"])
        ports = [state.get(k) for k in ("http_port", "grpc_port", "metrics_port")]
        deadline = time.monotonic() + PORT_WAIT_S
        while all(ports) and not all(_port_free(p) for p in ports) and time.monotonic() < deadline:
            time.sleep(0.1)  # the old sockets close once the dead processes are gone
        if not all(ports) or not all(_port_free(p) for p in ports):
            ports = [0, 0, 0]  # fresh free ports; the same ports keep replica URLs stable across restarts
        directory = self.replica_dir(name)
        process = tritonserver.TritonProcess(
            model_repository=self.repository,
            work_dir=directory,
            http_port=ports[0],
            grpc_port=ports[1],
            metrics_port=ports[2],
            extra_args=["--model-load-thread-count=2"],
        )
        try:
            process.start()
        except tritonserver.TritonNotAvailable as exc:
            raise DriverError(str(exc)) from None
        except OSError as exc:
            raise DriverError(f"cannot start tritonserver: {exc}") from None
        now = time.time()
        crashed_before = bool(state.get("pid"))
        stable = now - state.get("started_at", 0) >= STABLE_AFTER_S
        streak = 0 if (not crashed_before or stable) else state.get("streak", 0)
        new_state = {
            "pid": process.process.pid,
            "http_port": process.http_port,
            "grpc_port": process.grpc_port,
            "metrics_port": process.metrics_port,
            "started_at": now,
            "restarts": state.get("restarts", 0) + (1 if crashed_before else 0),
            "streak": streak + 1,
            "last_error": state.get("last_error", ""),
            "probe": liveness.ProbeRecord().to_dict(),
        }
        self._write_state(name, new_state)  # written at once: the pid file is what prevents orphans
        return new_state

    def _wait_live(self, name: str, state: dict) -> None:
        triton = TritonHTTP(f"http://127.0.0.1:{state['http_port']}", timeout=1.0)
        deadline = time.monotonic() + self.live_timeout
        while time.monotonic() < deadline:
            if tritonserver.process_state(state["pid"]) != "running":
                tritonserver.reap(state["pid"])
                tail = self.log_tail(name, 5)
                state["last_error"] = f"tritonserver exited during start (process {state['pid']}): {tail}"
                self._write_state(name, state)
                return
            if triton.is_live():
                # live from now on: a probe missed from here is judged as a live replica's, not
                # as one still starting (which would get the whole start grace)
                state["probe"] = liveness.ProbeRecord(live_since=time.time()).to_dict()
                self._write_state(name, state)
                return
            time.sleep(0.05)

    # --- the interface -----------------------------------------------------------------------------
    def ensure(self, on_down: Callable[[ReplicaInfo], None] | None = None) -> list[ReplicaInfo]:
        """Start missing replicas; kill and restart (with backoff) the dead and the hung,
        calling `on_down` with the reason before a restart (so what a supervisor shows
        does not wait for the restart)."""
        with self._locked():
            self.repository.mkdir(parents=True, exist_ok=True)
            wanted = [f"r{i}" for i in range(self.spec.replicas)]
            for name in self._names():
                if name not in wanted:
                    self._stop(name)
            started, infos = [], {}
            for name in wanted:
                status, state, reason = self._probe(name, record=True)
                if status != liveness.DEAD:
                    infos[name] = self._info(name, state, self.STATUS[status], reason)
                    continue
                if state.get("pid"):
                    self._went_down(name, state, reason, on_down)
                    wait = state.get("started_at", 0) + backoff_s(state.get("streak", 0) + 1) - time.time()
                    if wait > 0:
                        why = f"{state['last_error']}; restart in {wait:.1f}s (backoff)"
                        infos[name] = self._info(name, state, "down", why)
                        continue
                started.append(name)
                infos[name] = self._start(name, state)
            for name in started:
                self._wait_live(name, infos[name])
                infos[name] = self._replica(name)
            self._sweep_orphans()
        return list(infos.values())

    def _went_down(self, name: str, state: dict, reason: str, on_down) -> None:
        """Kill a hung replica's process; say why it is down (once per death)."""
        pid = state["pid"]
        if state.get("last_error") == reason:
            return  # said already; a restart waiting out its backoff
        if tritonserver.process_state(pid) == "running" and self._ours(pid, state):
            tritonserver.kill_group(pid, timeout=5.0)  # SIGKILL: a hung (or stopped) server ignores SIGTERM
            reason += "; killed"
        state["last_error"] = reason
        self._write_state(name, state)
        log.warning("pool %s replica %s down: %s", self.spec.name, name, reason)
        if on_down is not None:
            on_down(self._info(name, state, "down", reason))

    STATUS = {liveness.READY: "ready", liveness.STARTING: "starting", liveness.UNREADY: "down", liveness.DEAD: "down"}

    def _replica(self, name: str) -> ReplicaInfo:
        status, state, reason = self._probe(name)
        return self._info(name, state, self.STATUS[status], reason if status != liveness.READY else "")

    def replicas(self) -> list[ReplicaInfo]:
        wanted = {f"r{i}" for i in range(self.spec.replicas)}
        return [self._replica(name) for name in self._names() if name in wanted]

    def scale(self, replicas: int) -> list[ReplicaInfo]:
        if replicas < 0:
            raise DriverError("replicas must be 0 or more")
        self.spec = PoolSpec(**{**self.spec.__dict__, "replicas": replicas})
        return self.ensure()

    def _stop(self, name: str) -> None:
        state = self._state(name)
        self._kill(state.get("pid"), state)
        shutil.rmtree(self.replica_dir(name), ignore_errors=True)

    def delete(self) -> None:
        with self._locked():
            for name in self._names():
                self._stop(name)
            self._sweep_orphans()
        shutil.rmtree(self.root, ignore_errors=True)

    def _sweep_orphans(self) -> None:
        """Kill tritonserver processes under this pool that no state file accounts for."""
        known = {self._state(name).get("pid") for name in self._names()}
        for pid, _ in tritonserver.tritonservers_under(self.repository):
            if pid not in known:
                tritonserver.kill_group(pid)

    def stop_all(self) -> None:
        """Stop every replica process but keep the pool directory (used by tests and shutdown)."""
        with self._locked():
            for name in self._names():
                state = self._state(name)
                self._kill(state.get("pid"), state)

    def log_tail(self, replica: str, lines: int = 60) -> str:
        path = self.replica_dir(replica) / "tritonserver.log"
        try:
            with open(path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - 64 * 1024))
                text = fh.read().decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # --- the repository ----------------------------------------------------------------------------
    def publish(self, model: ModelDir) -> None:
        if model.path is None or not (Path(model.path) / "config.pbtxt").is_file():
            raise DriverError(f"{model.name}: {model.path} is not a Triton model directory (no config.pbtxt)")
        self.repository.mkdir(parents=True, exist_ok=True)
        link = self.repository / model.name
        if link.is_symlink() and Path(os.readlink(link)) == Path(model.path).resolve():
            return
        tmp = self.repository / f".{model.name}.tmp"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(Path(model.path).resolve(), target_is_directory=True)
        os.replace(tmp, link)

    def retract(self, name: str) -> None:
        link = self.repository / name
        if link.is_symlink():
            link.unlink()
