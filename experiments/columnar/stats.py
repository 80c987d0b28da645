"""Every running experiment's per-arm sufficient statistics, computed by the store per tick.

STATS_SQL is the one statement an analysis tick needs for the lift and SRM of every running
experiment at once: per unit, its distinct exposures `n` and attributed clicks `c` (at most
one click per exposure), then per arm the sums analysis.SUMS names (units, n, c, n², c², n·c).
Two more grouped statements give the extras (conversions, value) and the feedback counts per
status, the unknown ones per endpoint since each experiment started. Three statements per
tick, whatever the number of experiments.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from experiments import analysis
from experiments.models import Arm, FeedbackStatus

STATS_SQL = """
SELECT experiment, arm, count() AS units, sum(un) AS n, sum(uc) AS c,
       sum(un * un) AS nn, sum(uc * uc) AS cc, sum(un * uc) AS nc
FROM (
    SELECT u.experiment AS experiment, u.arm AS arm, u.n AS un, least(k.c, u.n) AS uc
    FROM (
        SELECT experiment, arm, unit, toFloat64(uniqExact(request_id)) AS n
        FROM {db}.exposures WHERE experiment IN {exps:Array(UInt32)}
        GROUP BY experiment, arm, unit
    ) AS u
    LEFT JOIN (
        SELECT experiment, arm, exposure_unit AS unit, toFloat64(count()) AS c
        FROM {db}.feedback
        WHERE experiment IN {exps:Array(UInt32)} AND status = 'attributed' AND kind = 'click'
        GROUP BY experiment, arm, unit
    ) AS k ON u.experiment = k.experiment AND u.arm = k.arm AND u.unit = k.unit
)
GROUP BY experiment, arm
"""

COUNTS_SQL = """
SELECT experiment, arm, status, kind, count() AS events, sum(value) AS value
FROM {db}.feedback WHERE experiment IN {exps:Array(UInt32)}
GROUP BY experiment, arm, status, kind
"""

UNKNOWN_SQL = """
SELECT e.experiment AS experiment, count() AS events
FROM {db}.feedback AS f INNER JOIN e_in AS e ON f.endpoint = e.endpoint
WHERE f.status = 'unknown' AND toFloat64(f.received) >= e.since AND toFloat64(f.received) <= e.until
GROUP BY e.experiment
"""


def arm_sums_many(conn, db: str, experiments: list) -> dict:
    """{experiment pk: (sums per arm pk, extras per arm pk, feedback counts by status)}."""
    if not experiments:
        return {}
    ids = [x.pk for x in experiments]
    params = {"exps": ids}
    sums_rows = conn.frame(STATS_SQL.replace("{db}", db), params)
    count_rows = conn.frame(COUNTS_SQL.replace("{db}", db), params)
    ranges = pd.DataFrame(
        {
            "experiment": np.array(ids, dtype=np.int64),
            "endpoint": [x.endpoint.name for x in experiments],
            "since": [x.started_at.timestamp() if x.started_at else np.inf for x in experiments],
            "until": [x.ended_at.timestamp() if x.ended_at else np.inf for x in experiments],
        }
    )
    conn.load("e_in", ranges)
    unknown = dict(conn.frame(UNKNOWN_SQL.replace("{db}", db)).itertuples(index=False, name=None))
    arm_ids: dict[int, list[int]] = {pk: [] for pk in ids}
    for exp_pk, arm_pk in Arm.objects.filter(experiment_id__in=ids).values_list("experiment_id", "pk"):
        arm_ids[exp_pk].append(arm_pk)
    zero = {k: 0.0 for k in analysis.SUMS}
    sums = {pk: {arm: dict(zero) for arm in arms} for pk, arms in arm_ids.items()}
    for row in sums_rows.itertuples(index=False):
        if int(row.experiment) in sums:
            sums[int(row.experiment)][int(row.arm)] = {k: float(getattr(row, k)) for k in analysis.SUMS}
    extras = {pk: {arm: {"conversions": 0, "value": 0.0} for arm in arms} for pk, arms in arm_ids.items()}
    counts = {pk: {s.value: 0 for s in FeedbackStatus} for pk in ids}
    for row in count_rows.itertuples(index=False):
        exp_pk, arm_pk = int(row.experiment), int(row.arm)
        if exp_pk not in counts:
            continue
        if row.status != FeedbackStatus.UNKNOWN:
            counts[exp_pk][row.status] = counts[exp_pk].get(row.status, 0) + int(row.events)
        if row.status == FeedbackStatus.ATTRIBUTED and arm_pk in extras[exp_pk]:
            if row.kind == "conversion":
                extras[exp_pk][arm_pk]["conversions"] += int(row.events)
            elif row.kind == "value":
                extras[exp_pk][arm_pk]["value"] += float(row.value)
    for pk in ids:
        counts[pk][FeedbackStatus.UNKNOWN.value] = int(unknown.get(pk, 0))
        for arm in extras[pk].values():
            arm["value"] = arm["value"] if math.isfinite(arm["value"]) else None
    return {pk: (sums[pk], extras[pk], counts[pk]) for pk in ids}
