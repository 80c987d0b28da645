"""Where the judge, the experiments' guardrails and the dashboards read their series: the
built-in metric store (the collector's samples in SQL; the default, what `make run` uses) or
Prometheus (PromQL over its HTTP API) when PROMETHEUS_URL is set.

One interface, one structure: every read goes through a MetricSource, and both sources
build it from the same derived samples (monitoring/collection/collect.py: the store keeps them, the
Prometheus source rebuilds them from the raw counters), the judge's windows by the same
function (monitoring/judge/windows.py). So the judge decides the same whichever feeds it, and the
dashboards and /api/v1/metrics/ show the series it decided on
(tests/monitoring/test_prometheus_source.py, test_prometheus_dashboards.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from kernel.conf import setting
from monitoring.judge.evidence import ArmWindow
from monitoring.sources.store import StoreSource

__all__ = ["MetricSource", "StoreSource", "metric_source"]


class MetricSource(Protocol):
    name: str

    def judge_arms(
        self, *, endpoint: str, variants: list[str], since: datetime, until: datetime | None = None
    ) -> dict[str, ArmWindow]:
        """The judge's windows of `variants` (internal: not user-scoped)."""

    def metric_series(
        self, *, user, endpoint=None, variant=None, metrics=None, since: datetime, until=None, resolution="auto"
    ) -> list[dict]:
        """{endpoint, variant, metric, resolution, points: [{time, value}]} per series the user may see."""

    def series_index(self, *, user, since: datetime) -> list[dict]:
        """[{endpoint, variants, last}] of the endpoints with traffic since `since`."""

    def unknown_traffic(self, *, user, since: datetime) -> dict | None:
        """{requests, rate} to endpoints that do not exist (staff), or None."""

    def latest_values(self, *, user, endpoint: str, since: datetime, metrics) -> dict[str, dict[str, float]]:
        """{variant: {metric: latest value}}."""

    def endpoint_request_rate(self, *, endpoint: str, window_s: float, now: datetime) -> float | None:
        """Requests/s over the last `window_s` (internal)."""


def metric_source() -> MetricSource:
    """Prometheus when PROMETHEUS_URL is set, else the store."""
    url = setting("PROMETHEUS_URL")
    if url:
        from monitoring.sources.prometheus import PrometheusSource

        return PrometheusSource(url)
    return StoreSource()
