"""Judging a replica from several probes (pure: the record and one probe in, a verdict out).

One missed probe says little on a loaded machine (the supervisor once killed a replica
that had been up 28 minutes on one missed 2-s probe, logging "not live 60s after start").
So a replica is judged on consecutive failures:

- a probe that answers in time: READY (and the replica has been live since its start);
- `unready_after` consecutive failures: UNREADY, out of the route table, not killed, with
  the reason ("not answering: 2 probes failed over 2.4 s: timeout after 2.0 s");
- `kill_after` consecutive failures spanning at least `kill_window_s`: DEAD, killed and
  restarted, with the reason ("not live: 3 probes failed over 6.2 s: timeout after 2.0 s");
- a replica never live since its start gets `start_grace_s` (STARTING meanwhile); only
  then is "not live 60 s after start" the reason.

The driver keeps the record between ticks (the local driver in the replica's state file).
"""

from __future__ import annotations

import signal
from dataclasses import asdict, dataclass, replace

READY = "ready"
STARTING = "starting"
UNREADY = "unready"  # live once, now failing probes: not ready, not yet killed
DEAD = "dead"  # to be killed and restarted


@dataclass(frozen=True)
class LivenessPolicy:
    unready_after: int = 2  # consecutive failed probes before a live replica is not ready
    kill_after: int = 3  # consecutive failed probes ...
    kill_window_s: float = 6.0  # ... spanning at least this long before it is killed
    start_grace_s: float = 60.0  # a replica never live since its start is given this long

    def __post_init__(self):
        if not 1 <= self.unready_after <= self.kill_after:
            raise ValueError("need 1 <= unready_after <= kill_after")
        if self.kill_window_s < 0 or self.start_grace_s < 0:
            raise ValueError("windows must be 0 or more seconds")


@dataclass(frozen=True)
class ProbeRecord:
    """What is remembered between probes of one replica (since its last start)."""

    live_since: float | None = None  # the first probe answered in time since the start (epoch s)
    failures: int = 0  # consecutive failed probes
    failing_since: float | None = None  # when the first of them was sent
    last_failure: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> ProbeRecord:
        data = data or {}
        return cls(
            live_since=data.get("live_since"),
            failures=int(data.get("failures", 0)),
            failing_since=data.get("failing_since"),
            last_failure=str(data.get("last_failure", "")),
        )


@dataclass(frozen=True)
class Verdict:
    status: str  # READY, STARTING, UNREADY or DEAD
    reason: str = ""


def observe(
    record: ProbeRecord,
    *,
    failure: str,
    sent_at: float,
    now: float,
    started_at: float,
    policy: LivenessPolicy,
) -> tuple[ProbeRecord, Verdict]:
    """Fold one probe (`failure` = "" when it answered in time, else why not; sent at
    `sent_at`, judged at `now`) into the record of a replica started at `started_at`."""
    if not failure:
        return ProbeRecord(live_since=record.live_since or now), Verdict(READY)
    failures = record.failures + 1
    failing_since = record.failing_since if record.failing_since is not None else sent_at
    record = replace(record, failures=failures, failing_since=failing_since, last_failure=failure)
    span = max(0.0, now - failing_since)
    probes = f"{failures} probe{'s' if failures > 1 else ''} failed over {span:.1f} s: {failure}"
    if record.live_since is None:
        up = now - started_at
        if up < policy.start_grace_s:
            return record, Verdict(STARTING, f"not live yet {up:.0f} s after start: {failure}")
        return record, Verdict(DEAD, f"not live {policy.start_grace_s:.0f} s after start: {probes}")
    if failures >= policy.kill_after and span >= policy.kill_window_s:
        return record, Verdict(DEAD, f"not live: {probes}")
    if failures >= policy.unready_after:
        return record, Verdict(UNREADY, f"not answering: {probes}")
    return record, Verdict(READY, f"{probes} (not judged on one)")


def exit_reason(returncode: int | None) -> str:
    """Why a process ended, from its return code (negative: the signal), None: not known
    (it was not our child, e.g. a replica adopted from before a supervisor restart)."""
    if returncode is None:
        return "exit status unknown (not a child of this supervisor)"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with code {returncode}"
