"""What a client may send as a version's metrics: a JSON object of name -> finite number,
bounded. The API, the dashboard's upload form and the MLflow registration all check it here."""

import math

from kernel.errors import InvalidInput

MAX_METRICS = 200
MAX_METRIC_NAME = 250  # MLflow's limit on a metric key


def metrics_checked(metrics) -> dict:
    """A version's metrics as sent: a JSON object of name -> finite number, bounded; else a
    400 on the `metrics` field saying which entry is wrong."""
    if metrics is None:
        return {}
    if not isinstance(metrics, dict):
        raise InvalidInput('metrics: give a JSON object of name -> number, e.g. {"auc": 0.78}.', field="metrics")
    if len(metrics) > MAX_METRICS:
        raise InvalidInput(f"metrics: {len(metrics)} entries; at most {MAX_METRICS}.", field="metrics")
    for name, value in metrics.items():
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_METRIC_NAME:
            raise InvalidInput(
                f"metrics: the name {str(name)[:60]!r} is not 1-{MAX_METRIC_NAME} characters.", field="metrics"
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InvalidInput(
                f"metrics: {name[:60]!r} is {str(value)[:40]!r}, not a finite number (e.g. 0.78).", field="metrics"
            )
    return dict(metrics)
