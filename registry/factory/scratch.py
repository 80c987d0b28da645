"""No orphans: the scratch tritonservers a build starts (the tune stage's, one per variant)
live exactly as long as the attempt that holds the build's lease.

Each server runs in a process group of its own (serving/tritonserver.py: the server and its
python backend stubs) with its model repository inside the attempt's work dir,
`<tmp>/build-<id>-a<attempt>-<hex>/` (runner.py). That path ties it to a lease: the server
is held while Build <id> is running attempt <attempt> under an unexpired lease whose owner
("host:pid:task", registry/tasks.py) is alive; an owner on this host whose process is gone
holds nothing, expired lease or not (a SIGKILLed worker). `scratch_reap()` kills the process
group of every scratch server not held and removes work dirs no attempt holds; a new attempt
(runner.run, after its claim), the worker's start (registry/tasks.py) and the platform's
shutdown (`make run`'s stop) call it. Only dirs named like a build's work dir, under this
store's tmp dir, are touched: another platform's servers on the machine are not ours.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
from pathlib import Path

from django.utils import timezone

from registry import storage
from registry.models import Build, BuildStatus
from serving import tritonserver

log = logging.getLogger(__name__)
WORK_DIR = re.compile(r"^build-(?P<build>\d+)-a(?P<attempt>\d+)-[0-9a-f]{8}$")


def work_dir_name(build_id: int, attempt: int, suffix: str) -> str:
    """The one naming rule of an attempt's work dir (what ties its servers to the lease)."""
    return f"build-{build_id}-a{attempt}-{suffix}"


def _owner_alive(owner: str) -> bool:
    """Whether the lease's owner process still runs; an owner on another host is taken at
    its word (its lease expires if it is gone)."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return True
    return tritonserver.process_state(int(pid)) == "running"


def _held(build_id: int, attempt: int) -> bool:
    build = Build.objects.filter(pk=build_id).only("status", "attempt", "lease_owner", "lease_expires_at").first()
    return (
        build is not None
        and build.status == BuildStatus.RUNNING
        and build.attempt == attempt
        and build.lease_expires_at is not None
        and build.lease_expires_at > timezone.now()
        and _owner_alive(build.lease_owner)
    )


def _attempt_of(root: Path, path: str) -> tuple[Path, int, int] | None:
    """(work dir, build id, attempt) of a path inside an attempt's work dir under `root`."""
    try:
        first = Path(path).resolve().relative_to(root).parts[0]
    except (ValueError, IndexError):
        return None
    match = WORK_DIR.match(first)
    return (root / first, int(match["build"]), int(match["attempt"])) if match else None


def scratch_reap(*, keep: Path | None = None) -> dict:
    """Kill every scratch server no live attempt holds (its whole process group) and remove
    the work dirs no attempt holds; `keep`: the caller's own work dir. Returns what it did."""
    root = storage.tmp_dir().resolve()
    held: dict[tuple[int, int], bool] = {}

    def is_held(build_id: int, attempt: int) -> bool:
        if (build_id, attempt) not in held:
            held[(build_id, attempt)] = _held(build_id, attempt)
        return held[(build_id, attempt)]

    killed, removed = [], []
    for pid, cmdline in tritonserver.tritonservers_under(root):
        repository = next(arg.split("=", 1)[1] for arg in cmdline if arg.startswith("--model-repository="))
        found = _attempt_of(root, repository)
        if found is None or (keep is not None and found[0] == keep.resolve()) or is_held(*found[1:]):
            continue
        tritonserver.kill_group(pid)  # the server's own process group: it and its python stubs
        killed.append(pid)
        log.warning(
            "killed scratch tritonserver pid %s of build #%s attempt %s: no live attempt holds it", pid, *found[1:]
        )
    for entry in root.iterdir():
        match = WORK_DIR.match(entry.name)
        if not match or not entry.is_dir() or (keep is not None and entry == keep.resolve()):
            continue
        if not is_held(int(match["build"]), int(match["attempt"])):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
    return {"killed": killed, "removed": removed, "pid": os.getpid()}
