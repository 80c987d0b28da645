"""What the benchmarks read from /proc and how they place processes on cores.

CPU is read from each process's own counters (utime + stime in /proc/PID/stat, in clock
ticks), never from the machine's load: the hosts are shared, so only what a process itself
spent is its cost. Memory is PSS (/proc/PID/smaps_rollup): shared pages split between the
processes that map them, so a sum over a process tree is what the tree costs.

Pinning: with enough cores, the gateway, the backend and the load generator each get cores
of their own (os.sched_setaffinity on every thread of every process in the tree), so one
does not take the CPU another is measured on. Where the host has fewer cores than roles,
nothing is pinned and the plan says so (`shared`, with the reason) for the report."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")


def parse_stat(text: str) -> tuple[int, int]:
    """(utime, stime) in clock ticks from one /proc/PID/stat line (the command name, in
    parentheses, may itself hold spaces and parentheses: fields are counted after the last ')')."""
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def cpu_ticks(pid: int, proc: Path = PROC) -> tuple[int, int] | None:
    try:
        return parse_stat((proc / str(pid) / "stat").read_text())
    except (OSError, IndexError, ValueError):
        return None  # gone


def cpu_seconds(pids, proc: Path = PROC) -> tuple[float, float]:
    """(user, system) CPU seconds these processes have spent so far (gone ones count 0)."""
    user = system = 0
    for pid in pids:
        ticks = cpu_ticks(pid, proc)
        if ticks is not None:
            user += ticks[0]
            system += ticks[1]
    tick = os.sysconf("SC_CLK_TCK")
    return user / tick, system / tick


def parse_smaps_rollup(text: str) -> int:
    """PSS in KiB from /proc/PID/smaps_rollup."""
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    raise ValueError("no Pss line")


def pss_kib(pid: int, proc: Path = PROC) -> int | None:
    try:
        return parse_smaps_rollup((proc / str(pid) / "smaps_rollup").read_text())
    except (OSError, ValueError):
        return None


def cmdline(pid: int, proc: Path = PROC) -> list[str]:
    try:
        return (proc / str(pid) / "cmdline").read_bytes().rstrip(b"\0").decode(errors="replace").split("\0")
    except OSError:
        return []


def children(pid: int, proc: Path = PROC) -> list[int]:
    out: list[int] = []
    try:
        for task in (proc / str(pid) / "task").iterdir():
            out += [int(c) for c in (task / "children").read_text().split()]
    except OSError:
        pass
    return out


def process_tree(pid: int, proc: Path = PROC) -> list[int]:
    """pid and every descendant alive now."""
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        todo += children(p, proc)
    return pids


def load_average(proc: Path = PROC) -> list[float]:
    return [float(x) for x in (proc / "loadavg").read_text().split()[:3]]


def threads(pid: int, proc: Path = PROC) -> list[int]:
    try:
        return [int(t.name) for t in (proc / str(pid) / "task").iterdir()]
    except OSError:
        return []


@dataclass
class PinPlan:
    """Which cores each role runs on, or why nothing is pinned."""

    cores: list[int]
    roles: dict[str, list[int]] = field(default_factory=dict)
    shared: str = ""  # why nothing is pinned ("" when pinned)

    def describe(self) -> str:
        if self.shared:
            return f"not pinned: {self.shared}"
        return "pinned: " + ", ".join(f"{role} on cores {','.join(map(str, c))}" for role, c in self.roles.items())

    def as_dict(self) -> dict:
        return {"cores": self.cores, "roles": self.roles, "shared": self.shared, "described": self.describe()}


def plan_pinning(cores: list[int], wants: dict[str, int]) -> PinPlan:
    """Disjoint cores per role, `wants` = {role: cores it asks for (>= 1)}, in order. When the
    host has fewer cores than roles, nothing is pinned (the roles share every core); when it
    has fewer than asked but at least one per role, each role gets one and the last role
    (the one listed last, the load generator by convention) takes what is left."""
    cores = sorted(cores)
    if len(cores) < len(wants):
        return PinPlan(
            cores,
            shared=f"{len(cores)} core(s) for {len(wants)} roles ({', '.join(wants)}): they share every core, "
            "so the figures include each other's CPU contention",
        )
    asked = sum(max(1, n) for n in wants.values())
    plan, free = PinPlan(cores), list(cores)
    for i, (role, n) in enumerate(wants.items()):
        if asked <= len(cores):
            take = max(1, n)
        else:
            take = 1 if i < len(wants) - 1 else len(free)
        plan.roles[role], free = free[:take], free[take:]
    return plan


def pin_tree(pid: int, cores: list[int], proc: Path = PROC) -> int:
    """Every thread of pid and its descendants onto `cores` (children started later inherit
    it); returns the number of threads pinned."""
    pinned = 0
    for p in process_tree(pid, proc):
        for tid in threads(p, proc):
            try:
                os.sched_setaffinity(tid, cores)
                pinned += 1
            except OSError:
                pass  # exited meanwhile
    return pinned


def bench_pinning(cores: list[int] | None = None) -> PinPlan:
    """The benchmarks' plan: the proxy under test (gateway, or nginx in its turn) on one core of
    its own, the backend on half of the rest, the load generator (this process and what it
    starts) on the others."""
    cores = sorted(cores if cores is not None else os.sched_getaffinity(0))
    rest = max(0, len(cores) - 1)
    backend = max(1, rest // 2)
    return plan_pinning(cores, {"proxy": 1, "backend": backend, "load": max(1, rest - backend)})


def pin_roles(plan: PinPlan, pids: dict[str, list[int]], *, self_role: str = "load") -> dict[str, int]:
    """Apply `plan`: every process tree in pids[role] onto its role's cores, and this process
    (whose children, started later, inherit it) onto `self_role`'s. {role: threads pinned};
    empty when the plan pins nothing."""
    if plan.shared:
        return {}
    pinned = {role: sum(pin_tree(pid, plan.roles[role]) for pid in role_pids) for role, role_pids in pids.items()}
    os.sched_setaffinity(0, plan.roles[self_role])
    pinned[self_role] = 1
    return pinned
