"""Builds in a box: the stages of one build run in ONE child process (a fresh interpreter,
`python -m registry.factory.box`) with `resource.setrlimit` limits on memory and CPU
time, so a model that asks for 16 GiB (a 204-byte `ConstantOfShape [65536, 65536]`) or
spins forever fails its build with a clear reason while the worker goes on.

Parent (runner.py, in the worker: database, lease heartbeat)      child (this module)
    BoxedStages(ctx_kwargs, settings snapshot)   --start-->  set limits, django.setup()
    run("canonicalize")                           --stage-->  stages.canonicalize(ctx)
                                                  <--log---   ctx.log(...) lines, live
                                                  <--ok/failed/error--
    ... one stage at a time ...
    variants()                                    <--the VariantResults (paths, evidence)

The BuildContext lives in the child for the whole build (models are loaded once); what
crosses the pipe is small (stage names, log lines, results). Each worker process keeps
one warm spare child (imports done, waiting): a build takes it and a new spare starts in
the background (`python -m bench build_box` measures what the box costs). Limits:

- memory: RLIMIT_AS = BUILD_MEMORY_LIMIT_MB (4096). Builds with a GPU target use
  RLIMIT_DATA instead: CUDA reserves far more virtual address space than it ever touches.
  An allocation over the limit fails inside the child (MemoryError, ONNX Runtime's
  "Failed to allocate") -> "needs more than N MiB of memory"; a child that dies of it
  (bad_alloc abort, the kernel's OOM killer) says so too.
- CPU: RLIMIT_CPU = BUILD_CPU_LIMIT_S (600) from the moment the build arrives (the
  spare's warm-up is not counted) -> SIGXCPU -> "used more than N s of CPU".

The child never touches the database; the parent passes it the settings the stages read
(so a test's or an operator's overrides hold) and the environment it runs with.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection, Pipe

# Settings the stages read besides the factory's own (registry/factory/conf.py SETTINGS).
PASSED_SETTINGS = ("ARTIFACT_ROOT", "MLFLOW_TRACKING_URI", "MLFLOW_ARTIFACT_ROOT", "VAR_DIR")
ALLOCATION_FAILED = ("failed to allocate", "bad_alloc", "cannot allocate memory", "out of memory", "memoryerror")


class BoxFailed(Exception):
    """The child ended the build: `reason` for the build, `code` for the API."""

    def __init__(self, reason: str, code: str):
        super().__init__(reason)
        self.code = code


def memory_reason(limit_mb: int) -> str:
    return f"the model needs more than {limit_mb} MiB of memory (BUILD_MEMORY_LIMIT_MB)"


def cpu_reason(limit_s: int) -> str:
    return f"the build used more than {limit_s} s of CPU time (BUILD_CPU_LIMIT_S)"


def _looks_like_allocation_failure(text: str) -> bool:
    lowered = text.lower()
    return any(marker in lowered for marker in ALLOCATION_FAILED)


class BoxedStages:
    """One child process per build; run(stage) runs a stage in it."""

    def __init__(self, ctx_kwargs: dict, *, settings_snapshot: dict, memory_mb: int, cpu_s: int, gpu: bool):
        self.memory_mb, self.cpu_s = memory_mb, cpu_s
        self.proc, self.conn = _take()
        self.ctx_kwargs = ctx_kwargs
        limits = {"memory_mb": memory_mb, "cpu_s": cpu_s, "memory_resource": "RLIMIT_DATA" if gpu else "RLIMIT_AS"}
        self.conn.send((limits, settings_snapshot, ctx_kwargs))

    def _died(self) -> BoxFailed:
        code = self.proc.wait()
        if code == -signal.SIGXCPU:
            return BoxFailed(cpu_reason(self.cpu_s), "cpu_limit")
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        if code in (-signal.SIGABRT, -signal.SIGKILL, -signal.SIGSEGV):
            return BoxFailed(
                f"the build process died ({how}), most likely because {memory_reason(self.memory_mb)}", "memory_limit"
            )
        return BoxFailed(f"the build process died ({how})", "build_process_died")

    def _receive(self, log, progress=None) -> tuple:
        while True:
            try:
                ready = self.conn.poll(0.5)
            except (EOFError, OSError):
                raise self._died() from None
            if not ready:
                if self.proc.poll() is not None:
                    raise self._died()
                continue
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                raise self._died() from None
            if message[0] == "log":
                log(message[1])
                continue
            if message[0] == "progress":
                if progress is not None:
                    progress(message[1])
                continue
            if message[0] == "ready":  # the spare's warm-up is done
                continue
            return message

    def run(self, stage: str, log, progress=None) -> None:
        """Run `stage` in the child; its log lines go to `log` and its progress (0-1) to
        `progress` as they come. Raises BoxFailed when the stage (or the child) failed."""
        self.conn.send(("stage", stage))
        message = self._receive(log, progress)
        if message[0] == "failed":
            raise BoxFailed(message[1], message[2])
        if message[0] == "error":  # a bug, not the model: the runner reports an internal error
            raise RuntimeError(message[1])

    def variants(self) -> dict:
        self.conn.send(("variants",))
        message = self._receive(lambda line: None)
        return pickle.loads(message[1])

    def close(self) -> None:
        try:
            self.conn.send(("exit",))
        except OSError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.conn.close()
        start_spare()


# --- the warm spare -------------------------------------------------------------------------------
# Starting a child costs seconds (interpreter, Django, ONNX Runtime): each worker process
# keeps one spare child that has done that already and waits for a build; the next
# spare starts when a build is done (its warm-up never competes with a build), so a
# build only waits for a cold start when builds come back to back.
_spare: tuple[subprocess.Popen, Connection] | None = None
_spare_lock = threading.Lock()


def _spawn() -> tuple[subprocess.Popen, Connection]:
    parent, child = Pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "registry.factory.box", str(child.fileno())],
        pass_fds=[child.fileno()],
        env=dict(os.environ),
        close_fds=True,
    )
    child.close()
    return proc, parent


def _take() -> tuple[subprocess.Popen, Connection]:
    global _spare
    with _spare_lock:
        spare, _spare = _spare, None
    if spare is not None and spare[0].poll() is not None:
        spare[1].close()
        spare = None
    return spare or _spawn()


def start_spare() -> None:
    """Start the next spare (after a build, so its warm-up never competes with one)."""
    global _spare
    with _spare_lock:
        if _spare is None or _spare[0].poll() is not None:
            _spare = _spawn()


def wait_for_spare(timeout: float) -> bool:
    """True once the spare has warmed up (for measurements: `python -m bench build_box`)."""
    with _spare_lock:
        spare = _spare
    if spare is None:
        return False
    if getattr(spare[1], "warm", False):
        return True
    if spare[1].poll(timeout):
        spare[1].warm = spare[1].recv() == ("ready",)
    return getattr(spare[1], "warm", False)


# --- the child ------------------------------------------------------------------------------------
def _limit(limits: dict) -> None:
    """Limits from now on: memory as given; CPU time counted from here (the warm-up the
    spare did before the build is not the model's)."""
    import math
    import resource

    memory = int(limits["memory_mb"]) * 1024 * 1024
    resource.setrlimit(getattr(resource, limits["memory_resource"]), (memory, memory))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = math.ceil(usage.ru_utime + usage.ru_stime) + int(limits["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))  # SIGXCPU at the soft limit, SIGKILL 5 s later


def _warm_up() -> None:
    """What every build needs, loaded before the build arrives."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    import onnxruntime  # noqa: F401
    import onnxruntime.quantization  # noqa: F401

    import registry.onnx_files  # noqa: F401

    _rehearse()


def _rehearse() -> None:
    """Run the stages once on a four-input toy model: the first run of each library path
    (graph checks, sessions, quantization) is paid here, not by the next build."""
    import shutil
    import tempfile
    from pathlib import Path

    import numpy as np
    import onnx
    from django.conf import settings
    from onnx import TensorProto, helper, numpy_helper

    from registry.factory import STAGES, stages

    work = Path(tempfile.mkdtemp(prefix="build-warmup-"))
    quick = {
        "BUILD_BENCH_SECONDS": 0.001,
        "BUILD_BENCH_BATCHES": "1",
        "BUILD_VALIDATION_ROWS": 64,
        "BUILD_BENCH_MAX_ITERS": 5,
    }
    try:
        weights = numpy_helper.from_array(np.array([[0.1], [-0.2], [0.3], [0.05]], dtype=np.float32), "w")
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["z"]), helper.make_node("Sigmoid", ["z"], ["y"])],
            "warmup",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1])],
            initializer=[weights],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        onnx.save(model, str(work / "warmup.onnx"))
        for name, value in quick.items():
            setattr(settings, name, value)
        ctx = stages.BuildContext(
            work_dir=work,
            model_name="warmup",
            version=1,
            task="ctr",
            source="upload",
            framework="onnx",
            source_path=work / "warmup.onnx",
            source_uri="",
            expected_signature={},
            targets=["onnx-fp32", "onnx-int8"],
            log=lambda line: None,
        )
        for name in STAGES:
            stages.STAGE_FUNCTIONS[name](ctx)
    except Exception:  # a rehearsal that fails costs the next build its warm-up, nothing else
        pass
    finally:
        for name in quick:
            if hasattr(settings, name):
                delattr(settings, name)
        shutil.rmtree(work, ignore_errors=True)


def _child(fd: int) -> None:
    conn = Connection(fd)
    _warm_up()
    try:
        conn.send(("ready",))
    except OSError:
        return
    try:
        limits, snapshot, ctx_kwargs = conn.recv()
    except (EOFError, OSError):  # the worker went away before giving this spare a build
        return
    _limit(limits)
    from django.conf import settings

    for name, value in snapshot.items():
        setattr(settings, name, value)
    from registry.factory import GR_TASK, stages
    from registry.factory.graphs import GraphError

    ctx = stages.BuildContext(
        **ctx_kwargs,
        log=lambda line: conn.send(("log", f"{time.strftime('%H:%M:%S')} {line}")),
        progress=lambda share: conn.send(("progress", float(share))),
    )
    functions = stages.STAGE_FUNCTIONS
    if ctx.task == GR_TASK:  # a generative recommender's own stages (registry/factory/generative/)
        from registry.factory.generative import stages as gr_stages

        functions = gr_stages.STAGE_FUNCTIONS
    memory = memory_reason(int(limits["memory_mb"]))
    ctx.log(
        f"build process pid {os.getpid()} (limits: {limits['memory_mb']} MiB {limits['memory_resource']}, {limits['cpu_s']} s CPU)"
    )
    while True:
        message = conn.recv()
        if message[0] == "exit":  # everything was sent: skip the interpreter's slow teardown
            os._exit(0)
        if message[0] == "variants":
            conn.send(("variants", pickle.dumps(ctx.variants)))
            continue
        try:
            functions[message[1]](ctx)
            reply = ("ok",)
        except MemoryError:
            reply = ("failed", memory, "memory_limit")
        except (stages.StageError, GraphError) as exc:
            failed_for_memory = (
                _looks_like_allocation_failure(str(exc))
                or isinstance(exc.__cause__, MemoryError)
                or _looks_like_allocation_failure(str(exc.__cause__ or ""))
            )
            reply = (
                ("failed", memory, "memory_limit")
                if failed_for_memory
                else ("failed", str(exc), getattr(exc, "code", "build_failed"))
            )
        except Exception as exc:  # ONNX Runtime and onnx raise their own types for a failed allocation
            text = f"{type(exc).__name__}: {exc}"
            reply = (
                ("failed", memory, "memory_limit") if _looks_like_allocation_failure(text) else ("error", text[:500])
            )
        conn.send(reply)


if __name__ == "__main__":
    _child(int(sys.argv[1]))
