"""Start and stop a real `tritonserver` process on this machine (CPU, python backend),
and find and reap the ones we started. Talking to a running Triton (local or a pod) is
serving/triton.py.

Plain Python with no Django import, below both apps that start servers: the local pool
driver (deployments/drivers/local.py) and the factory's tune stage (a scratch server per
build, registry/factory/tune/), since the registry may not import deployments. The harness,
the benchmarks and the tests use it too.
The binary comes from TRITONSERVER_BIN, the nvidia-pytriton wheel, or PATH. The
python backend needs a backend directory of our own (links to the wheel's
libtriton_python.so and utils, a copy of the 3.11 stub) and LD_LIBRARY_PATH pointing
at this interpreter's libpython and the wheel's bundled libraries (../shared/DESIGN.md).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from serving.triton import TritonHTTP, http_post, http_status


class TritonNotAvailable(RuntimeError):
    """No tritonserver binary (or its python backend) on this machine."""


def _pytriton_root() -> Path | None:
    try:
        import pytriton  # noqa: F401  (the wheel ships the server binary)
    except ImportError:
        return None
    return Path(sys.modules["pytriton"].__file__).parent / "tritonserver"


def find_binary() -> Path:
    candidates = []
    if os.environ.get("TRITONSERVER_BIN"):
        explicit = Path(os.environ["TRITONSERVER_BIN"])
        if not (explicit.is_file() and os.access(explicit, os.X_OK)):
            # An explicit setting that is wrong is an error, not a reason to run some other binary.
            raise TritonNotAvailable(f"TRITONSERVER_BIN={explicit} is not an executable file")
        candidates.append(explicit)
    root = _pytriton_root()
    if root:
        candidates.append(root / "bin" / "tritonserver")
    on_path = shutil.which("tritonserver")
    if on_path:
        candidates.append(Path(on_path))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise TritonNotAvailable(
        "tritonserver not found: set TRITONSERVER_BIN, install nvidia-pytriton, or put tritonserver on PATH"
    )


def backend_dir(base: Path) -> Path:
    """A backend directory with the python backend wired to this interpreter (idempotent)."""
    root = _pytriton_root()
    if root is None:
        raise TritonNotAvailable("the python backend comes from the nvidia-pytriton wheel, which is not installed")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.exists():
        raise TritonNotAvailable(f"no python backend stub for Python {version} in {root}")
    target = base / "python"
    target.mkdir(parents=True, exist_ok=True)
    for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
        link = target / name
        if not link.exists():
            link.symlink_to(root / "backends" / "python" / name)
    stub_copy = target / "triton_python_backend_stub"
    if not stub_copy.exists() or stub_copy.stat().st_size != stub.stat().st_size:
        tmp = target / ".stub.tmp"
        shutil.copy2(stub, tmp)
        tmp.chmod(0o755)
        os.replace(tmp, stub_copy)
    return base


def server_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    libdirs = [sysconfig.get_config_var("LIBDIR") or ""]
    root = _pytriton_root()
    if root:
        libdirs.append(str(root.parent.parent / "nvidia_pytriton.libs"))
    if env.get("LD_LIBRARY_PATH"):
        libdirs.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = ":".join(d for d in libdirs if d)
    # The stub embeds libpython, which finds its prefix by looking up "python3" on PATH:
    # this interpreter's bin/ first makes it use this virtualenv (numpy<2, onnxruntime).
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra or {})
    return env


_HANDED_OUT: set[int] = set()
_HANDED_OUT_LOCK = threading.Lock()


def free_port() -> int:
    """A free TCP port on 127.0.0.1 that this process has not handed out before: the
    kernel may offer the same ephemeral port to two binds in a row, and a tritonserver
    given one port for two of its servers exits ("cannot listen to GRPC requests and
    metrics requests at the same address and port")."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        with _HANDED_OUT_LOCK:
            if port not in _HANDED_OUT:
                _HANDED_OUT.add(port)
                return port


@dataclass
class TritonProcess:
    """One tritonserver process with its own model repository and ports."""

    model_repository: Path
    work_dir: Path
    http_port: int = 0
    grpc_port: int = 0
    metrics_port: int = 0
    model_control: str = "explicit"
    extra_args: list[str] = field(default_factory=list)
    log_path: Path | None = None
    process: subprocess.Popen | None = None

    def __post_init__(self):
        self.http_port = self.http_port or free_port()
        self.grpc_port = self.grpc_port or free_port()
        self.metrics_port = self.metrics_port or free_port()
        self.log_path = self.log_path or self.work_dir / "tritonserver.log"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def command(self) -> list[str]:
        backends = backend_dir(self.work_dir / "backends")
        return [
            str(find_binary()),
            f"--model-repository={self.model_repository}",
            f"--backend-directory={backends}",
            f"--model-control-mode={self.model_control}",
            "--strict-readiness=true",
            "--allow-grpc=true",
            "--allow-metrics=true",
            "--allow-gpu-metrics=false",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1",
            "--log-verbose=0",
            "--exit-on-error=false",
            *self.extra_args,
        ]

    def start(self) -> TritonProcess:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.model_repository.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            self.command(), stdout=log, stderr=subprocess.STDOUT, env=server_env(), start_new_session=True
        )
        log.close()
        return self

    def is_live(self) -> bool:
        return http_status(f"{self.http_url}/v2/health/live") == 200

    def wait_live(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process and self.process.poll() is not None:
                raise RuntimeError(
                    f"tritonserver exited with {self.process.returncode}; log: {self.log_path}\n{self.log_tail()}"
                )
            if self.is_live():
                return
            time.sleep(0.1)
        raise TimeoutError(f"tritonserver not live after {timeout}s; log: {self.log_path}\n{self.log_tail()}")

    def load(self, name: str, timeout: float = 120.0, config: str | None = None) -> None:
        """Load `name`; `config` (JSON ModelConfig) overrides the model's config.pbtxt."""
        TritonHTTP(self.http_url, self.metrics_url).load(name, timeout=timeout, config=config)

    def unload(self, name: str, timeout: float = 60.0) -> None:
        status, body = http_post(f"{self.http_url}/v2/repository/models/{name}/unload", b"", timeout=timeout)
        if status != 200:
            raise RuntimeError(f"unload {name} failed ({status}): {body.decode(errors='replace')}")

    def is_model_ready(self, name: str, version: str = "") -> bool:
        suffix = f"/versions/{version}" if version else ""
        return http_status(f"{self.http_url}/v2/models/{name}{suffix}/ready") == 200

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(Path(self.log_path).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> None:
        if not self.process or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)


# --- processes we started and may re-adopt ------------------------------------------------------
def process_state(pid: int) -> str:
    """ "running", "zombie" or "gone" for a pid (Linux /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "gone"
    state = stat.rsplit(")", 1)[1].split()[0]
    return "zombie" if state in {"Z", "X"} else "running"


def process_cmdline(pid: int) -> list[str]:
    try:
        return [part for part in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0") if part]
    except OSError:
        return []


def process_group(pgid: int) -> list[int]:
    """Pids still in process group `pgid` (a replica's server and its backend stubs)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in {"Z", "X"}:
            members.append(int(entry.name))
    return members


def reap(pid: int) -> int | None:
    """Collect a dead child's exit status if we are its parent (no zombie left): its
    return code (negative: the signal that killed it), None when not ours or still running."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status) if done else None


def kill_group(pid: int, timeout: float = 2.0) -> None:
    """SIGKILL a server's process group and wait (briefly) until the server is dead,
    collecting its exit status if we are its parent."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reap(pid)
        if process_state(pid) != "running":
            reap(pid)
            return
        time.sleep(0.02)


def tritonservers_under(directory: Path) -> list[tuple[int, list[str]]]:
    """Running tritonserver processes whose model repository lies under `directory`."""
    prefix = f"--model-repository={Path(directory).resolve()}"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        cmdline = process_cmdline(int(entry.name))
        if (
            cmdline
            and cmdline[0].endswith("tritonserver")
            and any(arg == prefix or arg.startswith(prefix + "/") for arg in cmdline)
        ):
            if process_state(int(entry.name)) == "running":
                found.append((int(entry.name), cmdline))
    return found
