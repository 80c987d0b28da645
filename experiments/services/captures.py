"""Captured requests (an endpoint's `capture_share` of its replies) from the log into the store.

The gateway logs a captured request's JSON inputs with its exposure record (gateway/telemetry/exposures.py):
variant, split weight as the propensity, time, unit. Here each becomes a row of the store's
`captures` table with its endpoint's team and the inputs' signature (names, datatypes and
shapes past the batch axis), so a dataset build can refuse inputs of two signatures mixed.
A capture whose endpoint is not the team's that the log's subject names is dropped (counted):
a team's captured inputs are only ever its own.
"""

from __future__ import annotations

import json
import math

MAX_INPUTS = 16  # tensors per captured request kept


def inputs_signature(inputs: list) -> str:
    """`name:DATATYPE:[dims past the first]` per tensor, sorted: what a dataset's rows must share."""
    parts = []
    for tensor in inputs[:MAX_INPUTS]:
        shape = tensor.get("shape") or []
        parts.append(f"{tensor.get('name')}:{tensor.get('datatype')}:{list(shape[1:])}")
    return ";".join(sorted(parts))


def capture_rows(captured: list, endpoints: dict, *, subject_team: str | None = None) -> tuple[list[dict], int]:
    """(rows for store.write_captures, captures refused) of (rid, experiment pk, arm, unit, t,
    [propensity, inputs JSON, endpoint]) tuples. `endpoints`: name -> Endpoint of the ingest's run."""
    from deployments.selectors.gateway_routes import team_label

    rows, refused = [], 0
    for rid, exp_pk, arm, unit, t, extra in captured:
        try:
            propensity, text, endpoint_name = extra[0], extra[1], extra[2]
            propensity = float(propensity)
            doc = json.loads(text)
            inputs = doc["inputs"]
        except (IndexError, TypeError, ValueError, KeyError):
            refused += 1
            continue
        endpoint = endpoints.get(endpoint_name)
        if (
            endpoint is None
            or not isinstance(inputs, list)
            or not (0.0 < propensity <= 1.0 and math.isfinite(propensity))
            or (subject_team is not None and team_label(endpoint.team) != subject_team)
        ):
            refused += 1
            continue
        rows.append(
            {
                "team": endpoint.team_id,
                "endpoint": endpoint.name,
                "experiment": exp_pk,
                "variant": arm,
                "propensity": propensity,
                "request_id": rid,
                "unit": unit,
                "time": t,
                "signature": inputs_signature(inputs),
                "inputs": json.dumps(inputs[:MAX_INPUTS], separators=(",", ":")),
            }
        )
    return rows, refused
