"""What a benchmark reads of the processes it started, from /proc (CPU seconds, context
switches, a process and its children) and waiting for one to answer HTTP. Standard library
only, no Django: bench/gateway.py, bench/gateway_clients.py and bench/llm.py share it."""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from pathlib import Path


def cpu_seconds(pids: list[int]) -> tuple[float, float]:
    """(user, system) CPU seconds of these processes so far (from /proc)."""
    user = system = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            user += int(fields[11])
            system += int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    tick = os.sysconf("SC_CLK_TCK")
    return user / tick, system / tick


def context_switches(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.endswith("ctxt_switches:") or "ctxt_switches:" in line:
                    total += int(line.split()[-1])
        except (OSError, ValueError):
            pass
    return total


def process_tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        try:
            todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except OSError:
            pass
    return pids


def wait_http(url: str, proc, timeout: float = 20.0, post: bool = False) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            req = urllib.request.Request(
                url, data=b'{"inputs": []}' if post else None, method="POST" if post else "GET"
            )
            urllib.request.urlopen(req, timeout=1)
            return True
        except urllib.error.HTTPError:
            return True  # it answered
        except OSError:
            time.sleep(0.1)
    return False
