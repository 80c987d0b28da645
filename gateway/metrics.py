"""Prometheus metrics of the gateway (prometheus_client, default registry, so the
process and platform collectors come along). Labelled children are cached per label
tuple so the hot path does one dict lookup instead of `labels()` each time."""

from __future__ import annotations

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

disable_created_metrics()  # no *_created series: they double the exposition for nothing

# Sub-millisecond resolution at the bottom (gateway overhead), seconds at the top (deadlines).
BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075,
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)

REQUESTS = Counter(
    "gateway_requests", "Client requests by endpoint, variant that answered, and HTTP status",
    ["endpoint", "variant", "status"],
)
LATENCY = Histogram(
    "gateway_request_duration_seconds", "Client request latency inside the gateway (arrival to reply)",
    ["endpoint", "variant"], buckets=BUCKETS,
)
UPSTREAM_LATENCY = Histogram(
    "gateway_upstream_duration_seconds", "Latency of one upstream attempt to a Triton replica",
    ["endpoint", "variant"], buckets=BUCKETS,
)
RETRIES = Counter("gateway_retries", "Second attempts after a failed first attempt", ["endpoint", "variant"])
FAILOVERS = Counter(
    "gateway_failovers", "Requests moved from a canary/arm variant to stable",
    ["endpoint", "from_variant", "to_variant", "reason"],
)
UPSTREAM_ERRORS = Counter(
    "gateway_upstream_errors", "Failed upstream attempts (connect error, 5xx, timeout)",
    ["endpoint", "variant", "reason"],
)
IN_FLIGHT = Gauge("gateway_in_flight_requests", "Client requests being served", ["endpoint"])
SHADOW_REQUESTS = Counter(
    "gateway_shadow_requests", "Shadow copies sent, by result status", ["endpoint", "variant", "status"]
)
SHADOW_LATENCY = Histogram(
    "gateway_shadow_duration_seconds", "Latency of shadow copies", ["endpoint", "variant"], buckets=BUCKETS
)
SHADOW_DROPPED = Counter(
    "gateway_shadow_dropped", "Shadow copies dropped because the shadow queue was full", ["endpoint", "variant"]
)
SHADOW_QUEUE = Gauge("gateway_shadow_queue_depth", "Shadow copies waiting to be sent")
BREAKER_OPEN = Gauge(
    "gateway_replica_circuit_open", "1 while the circuit breaker of a model on a replica is open", ["replica", "model"]
)
ROUTE_FETCHES = Counter("gateway_route_fetches", "Route table fetches by result", ["result"])
ROUTE_AGE = Gauge("gateway_route_table_age_seconds", "Seconds since the route source last confirmed the table")
ROUTE_STALE = Gauge("gateway_route_table_stale", "1 when the route source cannot be reached or sent an invalid table")
ROUTE_LOADED_AT = Gauge("gateway_route_table_loaded_timestamp_seconds", "Unix time the current table was installed")
ROUTE_ENDPOINTS = Gauge("gateway_route_table_endpoints", "Endpoints in the current route table")


class Children:
    """Cached labelled children for the per-request metrics."""

    def __init__(self):
        self._requests = {}
        self._latency = {}
        self._upstream = {}

    def requests(self, endpoint: str, variant: str, status: int):
        key = (endpoint, variant, status)
        child = self._requests.get(key)
        if child is None:
            child = self._requests[key] = REQUESTS.labels(endpoint, variant, str(status))
        return child

    def latency(self, endpoint: str, variant: str):
        key = (endpoint, variant)
        child = self._latency.get(key)
        if child is None:
            child = self._latency[key] = LATENCY.labels(endpoint, variant)
        return child

    def upstream(self, endpoint: str, variant: str):
        key = (endpoint, variant)
        child = self._upstream.get(key)
        if child is None:
            child = self._upstream[key] = UPSTREAM_LATENCY.labels(endpoint, variant)
        return child


def exposition() -> tuple[bytes, str]:
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
