"""Datasets from the platform's own traffic: captured requests joined with their clicks.

`dataset_build` reads an endpoint's captured requests in [start, end) from the columnar store
(its team's rows only), labels each with whether a click on it came inside the attribution
window after it, splits by time, writes a versioned Parquet dataset with its schema and
statistics under VAR_DIR/datasets, and registers it with MLflow's dataset tracking
(mlflow.data, an input of a run in `datasets/<team>` tagged with its lineage). It refuses,
writing nothing:

- a window whose attribution has not closed (end + the attribution window after now): a
  label still to come would be read as "no click" (label leakage the other way round);
- a window longer than MAX_WINDOW, empty of captures, or holding more than MAX_ROWS of them;
- inputs of two signatures mixed, or a captured request of more than one item (a click on a
  ranked list names no item: only pointwise requests are examples).

No label leakage across the split: a training row's own window closes before `split_at`,
where validation rows start, so nothing the training split learns from happened after it.
"""

from __future__ import annotations

import json
import shutil
from datetime import timedelta

import numpy as np
import pandas as pd
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max, Q
from django.utils import timezone

from experiments import feedback as feedback_rules
from experiments.models import Dataset, Experiment
from experiments.store import default_store
from kernel.errors import Conflict, InvalidInput
from registry.models import Role
from registry.services.teams import require_role

MAX_WINDOW = timedelta(days=31)
MAX_ROWS = 500_000  # ~20 s and ~0.5 GB of inputs in the building process (25 k rows/s measured)
TRAIN_SHARE = 0.8
DEFAULT_ATTRIBUTION_S = 3600
SKEW_S = feedback_rules.limits()["before_exposure_skew_s"]

CAPTURES_SQL = """
SELECT c.request_id AS request_id, toFloat64(c.time) AS t, c.variant AS variant, c.propensity AS propensity,
       c.experiment AS experiment, c.signature AS signature, c.inputs AS inputs,
       toUInt8(countIf(f.request_id != '' AND toFloat64(f.time) >= toFloat64(c.time) - {skew:Float64}
                       AND toFloat64(f.time) <= toFloat64(c.time) + {window:Float64}) > 0) AS label
FROM {db}.captures AS c
LEFT JOIN (
    SELECT request_id, time FROM {db}.feedback
    WHERE team = {team:UInt32} AND endpoint = {endpoint:String} AND kind = 'click'
) AS f ON f.request_id = c.request_id
WHERE c.team = {team:UInt32} AND c.endpoint = {endpoint:String}
  AND toFloat64(c.time) >= {start:Float64} AND toFloat64(c.time) < {end:Float64}
GROUP BY request_id, t, variant, propensity, experiment, signature, inputs
ORDER BY t
"""


COUNT_SQL = """
SELECT count() AS n FROM {db}.captures
WHERE team = {team:UInt32} AND endpoint = {endpoint:String}
  AND toFloat64(time) >= {start:Float64} AND toFloat64(time) < {end:Float64}
"""


def _check_window(*, start, end, window_s: int, now) -> None:
    if start >= end:
        raise InvalidInput("window: start must be before end.", field="start", code="invalid_window")
    if end - start > MAX_WINDOW:
        raise InvalidInput(
            f"window: at most {MAX_WINDOW.days} days per dataset; build several.", field="end", code="window_too_long"
        )
    try:
        closes = end + timedelta(seconds=window_s)
    except OverflowError:  # an end at the calendar's last second: its window never closes
        closes = None
    if closes is None or closes > now:
        closes = closes or end
        raise InvalidInput(
            f"end: the attribution window of the last requests closes at {closes.isoformat()} "
            f"({window_s} s after the end); no attribution has closed for them yet. Give an end at or before "
            f"{(now - timedelta(seconds=window_s)).isoformat()}.",
            field="end",
            code="attribution_open",
        )


def _features(rows: pd.DataFrame) -> dict[str, np.ndarray]:
    """{tensor name: [rows, ...] array} of the captured inputs (one item per request)."""
    columns: dict[str, list] = {}
    for i, text in enumerate(rows["inputs"]):
        for tensor in json.loads(text):
            shape = tensor.get("shape") or []
            if not shape or shape[0] != 1:
                raise InvalidInput(
                    f"inputs: captured request {rows['request_id'].iloc[i]!r} scores {shape[:1] or '?'} items in one "
                    "request; a click on a list names no item, so only requests of one item make examples.",
                    field="endpoint",
                    code="not_pointwise",
                )
            dtype = np.int64 if str(tensor.get("datatype", "")).startswith(("INT", "UINT")) else np.float32
            columns.setdefault(tensor["name"], []).append(np.asarray(tensor["data"], dtype=dtype).reshape(shape[1:]))
    return {name: np.stack(values) for name, values in columns.items()}


def _statistics(rows: pd.DataFrame, features: dict, train: np.ndarray) -> dict:
    mix = rows["variant"].value_counts(normalize=True).round(6).to_dict()
    return {
        "rows": int(len(rows)),
        "train_rows": int(train.sum()),
        "valid_rows": int(len(rows) - train.sum()),
        "label_rate": float(rows["label"].mean()),
        "variant_mix": {str(k): float(v) for k, v in mix.items()},
        "feature_ranges": {
            name: {"min": float(values.min()), "max": float(values.max()), "shape": list(values.shape[1:])}
            for name, values in features.items()
        },
    }


def _frame(rows: pd.DataFrame, features: dict, mask: np.ndarray) -> pd.DataFrame:
    out = rows.loc[mask, ["request_id", "t", "variant", "propensity", "label"]].reset_index(drop=True)
    for name, values in features.items():
        out[name] = list(values[mask].reshape(int(mask.sum()), -1))
    return out


def dataset_check(*, user, endpoint, start, end, experiment=None, now=None) -> int:
    """The checks that need no store (role, experiment of the endpoint, the window); the
    attribution window in seconds. A door runs them before it asks the store's owner."""
    require_role(user=user, team=endpoint.team, role=Role.DEPLOYER)
    if experiment is not None and experiment.endpoint_id != endpoint.pk:
        raise InvalidInput("experiment: it is not an experiment of this endpoint.", field="experiment")
    window_s = experiment.attribution_window_s if experiment is not None else _endpoint_window_s(endpoint, start, end)
    _check_window(start=start, end=end, window_s=window_s, now=now or timezone.now())
    return window_s


def _endpoint_window_s(endpoint, start, end) -> int:
    """Without an experiment: the longest attribution window of the endpoint's experiments that
    ran during [start, end) (their clicks are the labels), else DEFAULT_ATTRIBUTION_S."""
    longest = (
        Experiment.objects.filter(endpoint=endpoint, started_at__lt=end)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start))
        .aggregate(longest=Max("attribution_window_s"))["longest"]
    )
    return longest or DEFAULT_ATTRIBUTION_S


def dataset_build(*, user, endpoint, start, end, name: str, experiment=None, store=None, now=None) -> Dataset:
    """Build, write and register the next version of `name` (see the module's rules)."""
    window_s = dataset_check(user=user, endpoint=endpoint, start=start, end=end, experiment=experiment, now=now)
    store = store or default_store()
    if not hasattr(store, "frame"):
        raise InvalidInput(
            "store: datasets are read from the columnar store (EXPERIMENT_STORE=chdb or a ClickHouse server).",
            field="endpoint",
            code="no_columnar_store",
        )
    window = {"team": endpoint.team_id, "endpoint": endpoint.name, "start": start.timestamp(), "end": end.timestamp()}
    captured = int(store.frame(COUNT_SQL, window)["n"].iloc[0])
    if captured > MAX_ROWS:  # the owner's loop also ingests every team's events: a build is bounded in work
        raise InvalidInput(
            f"window: {captured} captured requests, more than {MAX_ROWS} per dataset; give a shorter window "
            "(or a lower capture_share).",
            field="end",
            code="too_many_rows",
        )
    rows = store.frame(
        CAPTURES_SQL,
        {
            "team": endpoint.team_id,
            "endpoint": endpoint.name,
            "start": start.timestamp(),
            "end": end.timestamp(),
            "window": float(window_s),
            "skew": float(SKEW_S),
        },
    )
    if experiment is not None:
        rows = rows[rows["experiment"] == experiment.pk].reset_index(drop=True)
    if rows.empty:
        raise InvalidInput(
            "window: no captured request of this endpoint in it (set its capture_share and send traffic).",
            field="start",
            code="no_captures",
        )
    signatures = sorted(rows["signature"].unique())
    if len(signatures) > 1:
        raise InvalidInput(
            f"inputs: {len(signatures)} signatures are mixed in the window ({' | '.join(signatures[:2])}); "
            "give a window served by one signature.",
            field="start",
            code="mixed_signatures",
        )
    features = _features(rows)
    split_at = start + (end - start) * TRAIN_SHARE
    t = rows["t"].to_numpy()
    train = t + window_s <= split_at.timestamp()
    valid = t >= split_at.timestamp()
    if not train.any() or not valid.any():
        raise InvalidInput(
            "window: too short to split by time (no training row whose attribution closed before the split, "
            "or no validation row after it); give a longer window.",
            field="start",
            code="window_too_short",
        )
    return _write(
        user=user,
        endpoint=endpoint,
        experiment=experiment,
        name=name,
        window=(start, end, split_at, window_s),
        rows=rows,
        features=features,
        masks=(train, valid),
    )


def _write(*, user, endpoint, experiment, name, window, rows, features, masks) -> Dataset:
    from experiments.services import dataset_mlflow

    start, end, split_at, window_s = window
    train, valid = masks
    version = (Dataset.objects.filter(team=endpoint.team, name=name).aggregate(v=Max("version"))["v"] or 0) + 1
    folder = settings.VAR_DIR / "datasets" / str(endpoint.team_id) / name / f"v{version}"
    schema = {
        "signature": rows["signature"].iloc[0],
        "columns": {
            "request_id": "string",
            "t": "float64 (unix s)",
            "variant": "string",
            "propensity": "float64",
            "label": "uint8 (a click inside the attribution window)",
        },
        "features": {n: {"dtype": str(v.dtype), "shape": list(v.shape[1:])} for n, v in features.items()},
    }
    statistics = _statistics(rows, features, train)
    lineage = {
        "endpoint": endpoint.name,
        "experiment": experiment.public_id if experiment is not None else None,
        "start": start.isoformat(),
        "end": end.isoformat(),
        "split_at": split_at.isoformat(),
        "attribution_window_s": window_s,
        "serving_versions": sorted(str(v) for v in rows["variant"].unique()),
    }
    try:
        folder.mkdir(parents=True, exist_ok=False)
        train_frame, valid_frame = _frame(rows, features, train), _frame(rows, features, valid)
        train_frame.to_parquet(folder / "train.parquet", index=False)
        valid_frame.to_parquet(folder / "valid.parquet", index=False)
        (folder / "schema.json").write_text(json.dumps({**schema, "statistics": statistics, "lineage": lineage}))
        with transaction.atomic():
            dataset = Dataset.objects.create(
                team=endpoint.team,
                endpoint=endpoint,
                experiment=experiment,
                name=name,
                version=version,
                window_start=start,
                window_end=end,
                split_at=split_at,
                attribution_window_s=window_s,
                path=str(folder),
                schema=schema,
                statistics=statistics,
                lineage=lineage,
                created_by=user,
            )
            dataset.mlflow_run_id = dataset_mlflow.register(dataset, train_frame)
            dataset.save(update_fields=["mlflow_run_id"])
    except IntegrityError:
        shutil.rmtree(folder, ignore_errors=True)
        raise Conflict(
            f"name: another build of {name} v{version} finished first; build again for the next version.",
            field="name",
            code="dataset_version_taken",
        ) from None
    except Exception:
        shutil.rmtree(folder, ignore_errors=True)  # nothing half-written
        raise
    return dataset


def dataset_arrays(dataset: Dataset, split: str) -> dict[str, np.ndarray]:
    """{feature name: array, "label": array} of a split (train or valid) read back from Parquet."""
    frame = pd.read_parquet(f"{dataset.path}/{split}.parquet")
    out = {"label": frame["label"].to_numpy(dtype=np.float32)}
    for name, spec in dataset.schema["features"].items():
        out[name] = np.stack(frame[name].to_numpy()).astype(spec["dtype"]).reshape(-1, *spec["shape"])
    return out
