"""Whose request a failover is, for the judge: the gateway counts a request that failed over
from a canary/arm variant to the stable under the stable's final status; the judge counts it
for the variant it came from (an error, a slow request, or, when the stable failed it too, a
shared failure: monitoring/judge/outage.py). The stable's stored requests stay what it
answered (Triton agrees, the dashboard shows its load); the failovers among them are stored
beside them (`failovers_in`, `failovers_in_failed`) and the judge's windows take them out of
its sample (monitoring/judge/windows.py). Pure; gateway_samples.gateway_deltas calls these on
each interval's totals."""

from __future__ import annotations

import math

from monitoring.collection.collect import Totals


def failovers_counted(totals: Totals, top_le: float | None) -> None:
    """A canary/arm attempt that failed over to stable is counted by the gateway under the
    stable's final status; for the judge it is a request of its own variant: an error when
    its attempt failed (or failover would hide a bad candidate's errors entirely), a latency
    observation past every finite bound (the +Inf bucket, its lower edge `top_le`) when it timed out (the candidate was slow,
    clients saw the stable's answer), and neither when the retry on the stable failed too
    (the pool failed both: `shared_failures`, monitoring/judge/outage.py)."""
    v = totals.values
    timeouts = v.pop("failovers_timeout", 0.0)
    failed, failed_timeouts = v.pop("failovers_failed", 0.0), v.pop("failovers_failed_timeout", 0.0)
    unreached = max(v.pop("failovers_unreached", 0.0) - v.pop("failovers_failed_unreached", 0.0), 0.0)
    if timeouts:
        v["failovers"] += timeouts
    if not (v.get("failovers") or failed or failed_timeouts):
        return
    if unreached:  # errors of this variant whose attempt never reached its model (outage.py's recovery)
        v["unreached_errors"] += unreached
    slow = max(timeouts - failed_timeouts, 0.0)
    errors = max(v.get("failovers", 0.0) - timeouts - failed, 0.0)
    v["requests"] += errors + slow
    v["errors"] += errors
    if slow:
        totals.latency_buckets[math.inf] += slow
        if top_le is not None:
            totals.latency_buckets[top_le] += 0.0  # the +Inf bucket's lower edge, as _decumulate keeps it
        v["latency_count"] += slow
    if failed or failed_timeouts:
        v["shared_failures"] += failed + failed_timeouts


def arrivals_attributed(result: dict, routes: dict) -> None:
    """Failovers moved from a variant to the stable, and those of them the stable failed too,
    as arrivals of the stable (`failovers_in`, `failovers_in_failed`): the gateway counts them
    under the stable's final status, the judge under the variant they came from, never in both
    (counted in both, an arm's failed attempts the stable answered read as the control's
    successes: at a 50 % step whose stable serves nothing but failovers, a baseline failing
    every request read as a control with a third failed). The failed ones are known per source
    only, so they go to each target by its share of the source's moves."""
    for (endpoint, source), targets in routes.items():
        moved = sum(targets.values())
        if moved <= 0:
            continue
        v = result[(endpoint, source)].values
        failed = v.get("failovers_failed", 0.0) + v.get("failovers_failed_timeout", 0.0)
        for target, count in targets.items():
            if count > 0:
                into = result[(endpoint, target)].values
                into["failovers_in"] += count
                into["failovers_in_failed"] += failed * count / moved
