"""The ingest's lag on each endpoint's feedback, after every run: a metric and an alert.

The lag of a stream is its oldest waiting entry's age (experiments/selectors/streams.py).
Each run stores it per endpoint in the platform's time series (endpoint, variant
`feedback-ingest`, metric `feedback_lag_s`: GET /api/v1/metrics/… reads it like any other)
and raises a `feedback_ingest_lag` warning for an endpoint whose feedback has waited longer
than FEEDBACK_LAG_ALERT_S (deduplicated per endpoint while open, with its lag and backlog as
evidence). GET /healthz reads the same lags (config/health.py, component `feedback`). The
import contracts in pyproject.toml name this seam into monitoring.
"""

from __future__ import annotations

from django.conf import settings
from django.utils import timezone

from experiments.selectors.streams import endpoint_lags, lagging, stream_lags
from monitoring.services.alerts import alert_raise
from monitoring.services.store import samples_store

VARIANT = "feedback-ingest"
METRIC = "feedback_lag_s"


def lag_record(client) -> dict[str, dict]:
    """Store each serving endpoint's feedback lag, alert the ones past the threshold; returns the lags."""
    from deployments.selectors.rollouts import serving_endpoints

    lags = endpoint_lags(stream_lags(client))
    endpoints = {e.name: e for e in serving_endpoints() if e.name in lags}
    rows = [(name, VARIANT, METRIC, lags[name]["lag_s"]) for name in endpoints]
    if rows:
        samples_store(rows=rows, at=timezone.now(), team_ids={n: e.team_id for n, e in endpoints.items()})
    threshold = settings.FEEDBACK_LAG_ALERT_S
    for name, lag in lagging(lags, threshold).items():
        endpoint = endpoints.get(name)
        alert_raise(
            kind="feedback_ingest_lag",
            severity="warning",
            reason=(
                f"feedback for {name} has waited {lag['lag_s']:.0f}s to be ingested ({lag['entries']} stream "
                f"entries behind; the alert threshold is {threshold:g}s): its experiment's counts are that late"
            ),
            endpoint=name if endpoint is not None else "",
            team=endpoint.team if endpoint is not None else None,
            evidence={"endpoint": name, **lag, "threshold_s": threshold},
        )
    return lags
