"""Where the gateway's time goes under closed-loop load (`python -m bench gateway --profile`):
py-spy's wall-clock samples (self and inclusive shares, the HTTP parser and the request
checks broken out) and, where perf is allowed, on-CPU time by library."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

IDLE_FRAMES = ("epoll_pwait", "epoll_wait")
# Parts of the gateway whose inclusive share of busy py-spy samples is reported: a sample
# counts for a part when any frame of its stack matches.
PARTS = {
    "HTTP parsing (llhttp via httptools, with its callbacks)": (
        "httptools",
        "llhttp",
        "feed_data",
        "on_header (",
        "on_headers_complete (",
        "on_body (",
        "on_url (",
        "on_message_begin (",
        "on_message_complete (",
        "on_status (",
        "on_chunk_header (",
    ),
    "request checks (gateway/kserve/tensors.py, signature.py)": ("tensors.py", "signature.py"),
    "keys (gateway/keys/tenants.py)": ("tenants.py",),
    "routing and metrics (routes.py, metrics.py)": ("routes.py", "metrics.py"),
}


def _keep(path: Path) -> Path:
    """Copy a profile out of the temporary work dir into var/bench/."""
    from bench.common import out_dir

    target = out_dir() / f"gateway-{path.name}"
    shutil.copy2(path, target)
    return target


def profile_gateway(pid: int, load, seconds: float, out: Path) -> dict:
    """Where the gateway's time goes under closed-loop load: py-spy (wall clock, Python
    and native frames; samples waiting in epoll are counted as idle and left out of the
    shares) and, when `perf` is installed, an on-CPU split by library (interpreter,
    kernel, uvloop, ...), while `load()` drives the gateway for `seconds` (bench/gateway.py: one wrk window)."""
    result = {}
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    perf = shutil.which("perf")
    raw = out / "profile.txt"
    perf_data = out / "gateway-perf.data"
    procs = []
    if Path(spy).exists():
        procs.append(
            (
                "py-spy",
                subprocess.Popen(
                    [
                        spy,
                        "record",
                        "-p",
                        str(pid),
                        "-d",
                        str(int(seconds) + 1),
                        "-r",
                        "250",
                        "-f",
                        "raw",
                        "-o",
                        str(raw),
                        "--native",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                ),
            )
        )
    else:
        result["py_spy"] = "not installed (pip install py-spy)"
    if perf:
        procs.append(
            (
                "perf",
                subprocess.Popen(
                    [
                        perf,
                        "record",
                        "-F",
                        "999",
                        "-p",
                        str(pid),
                        "-o",
                        str(perf_data),
                        "--",
                        "sleep",
                        str(int(seconds) + 1),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                ),
            )
        )
    time.sleep(0.5)
    load()
    for name, proc in procs:
        _, err = proc.communicate(timeout=60)
        if proc.returncode not in (0, None) and name == "perf" and not perf_data.exists():
            result["perf"] = f"perf failed: {err.decode(errors='replace')[-200:]}"
    if raw.exists():
        self_time: Counter = Counter()
        inclusive: Counter = Counter()
        parts: Counter = Counter()
        total = idle = 0
        for line in raw.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not count.isdigit():
                continue
            n = int(count)
            frames = stack.split(";")
            if frames[-1].split(" ")[0] in IDLE_FRAMES:
                idle += n
                continue
            total += n
            for name, needles in PARTS.items():
                if any(needle in stack for needle in needles):
                    parts[name] += n
            self_time[_frame(frames[-1])] += n
            for f in set(_frame(f) for f in frames):
                inclusive[f] += n
        total = total or 1
        result.update(
            {
                "py_spy_samples_busy": total,
                "py_spy_samples_idle": idle,
                "parts": {name: round(100 * n / total, 1) for name, n in parts.items()},
                "self_top": [(f, round(100 * n / total, 1)) for f, n in self_time.most_common(15)],
                "inclusive_top": [
                    (f, round(100 * n / total, 1))
                    for f, n in inclusive.most_common(40)
                    if not f.startswith(
                        (
                            "0x",
                            "_run_module_as_main",
                            "_run_code",
                            "<module>",
                            "main ",
                            "run ",
                            "Runner.run",
                            "run_forever",
                            "run_until_complete",
                            "Loop__",
                            "uv_run",
                            "Py_DECREF",
                            "Py_XDECREF",
                            "__libc",
                            "_start",
                            "Py_",
                            "pymain",
                            "run_",
                            "_PyEval",
                        )
                    )
                ][:15],
                "raw": str(_keep(raw)),
            }
        )
    if perf and perf_data.exists():
        report = subprocess.run(
            [perf, "report", "-i", str(perf_data), "--stdio", "--sort", "dso"],
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
        dsos = []
        for line in report.splitlines():
            m = re.match(r"\s+([\d.]+)%\s+(\S+)", line)
            if m:
                dsos.append((m.group(2), float(m.group(1))))
        result["perf_on_cpu_by_library"] = dsos[:8]
    return result


def _frame(frame: str) -> str:
    # "func (path/to/file.py:123)" -> "func (file.py)"
    m = re.match(r"(.*) \((.*?)(?::\d+)?\)$", frame)
    if not m:
        return frame
    return f"{m.group(1)} ({Path(m.group(2)).name})"
