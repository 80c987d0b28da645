"""Prometheus metrics of the gateway (prometheus_client, default registry, so the
process and platform collectors come along). The per-request series live in
`HotPath` (a custom collector); the rarer events use ordinary prometheus_client
metrics."""

from __future__ import annotations

from bisect import bisect_left

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.utils import floatToGoString

from gateway.wire.faults import CLIENT

disable_created_metrics()  # no *_created series: they double the exposition for nothing

# Sub-millisecond resolution at the bottom (gateway overhead), seconds at the top (deadlines).
BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.00075,
    0.001,
    0.0015,
    0.002,
    0.003,
    0.005,
    0.0075,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)

RETRIES = Counter("gateway_retries", "Second attempts after a failed first attempt", ["endpoint", "variant"])
FAILOVERS = Counter(
    "gateway_failovers",
    "Requests moved from a canary/arm variant to stable",
    ["endpoint", "from_variant", "to_variant", "reason"],
)
# a failover whose retry on the stable failed too: the stable (the pool) could not serve it
# either, so for the judge it is no error of the variant it came from (monitoring/judge/outage.py)
FAILOVERS_FAILED = Counter(
    "gateway_failovers_failed",
    "Failovers whose retry on stable failed too, by the first attempt's reason",
    ["endpoint", "from_variant", "reason"],
)


def failover_failed(endpoint: str, from_variant: str, reason: str, on_stable: bool) -> None:
    """A retry on the stable failed too: counted for the variant it came from (not the stable's own)."""
    if not on_stable:
        FAILOVERS_FAILED.labels(endpoint, from_variant, reason).inc()


UPSTREAM_ERRORS = Counter(
    "gateway_upstream_errors",
    "Failed upstream attempts (connect error, 5xx, timeout)",
    ["endpoint", "variant", "reason"],
)
SHADOW_REQUESTS = Counter(
    "gateway_shadow_requests", "Shadow copies sent, by result status", ["endpoint", "variant", "status"]
)
SHADOW_LATENCY = Histogram(
    "gateway_shadow_duration_seconds", "Latency of shadow copies", ["endpoint", "variant"], buckets=BUCKETS
)
SHADOW_DROPPED = Counter(
    "gateway_shadow_dropped", "Shadow copies dropped because the shadow queue was full", ["endpoint", "variant"]
)
AFFINITY_PICKS = Counter(
    "gateway_affinity_picks",
    "Replica choices of user-affinity endpoints: home (the user's own replica), spilled (the "
    "load bound or an open breaker moved the user on the ring), none (the request named no user)",
    ["endpoint", "variant", "placement"],
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
# One series per part of the current table the gateway did not apply (gateway/table/checks.py):
# kind endpoint|key, its name (from the table, bounded by it) and a code of table/checks.CODES
ROUTE_REFUSED = Gauge(
    "gateway_route_refused",
    "1 for each route table entry (endpoint) or key the gateway refused and does not serve",
    ["kind", "name", "code"],
)
HTTP_REJECTIONS = Counter(
    "gateway_http_rejections",
    "Connections answered with an HTTP-level error and closed (malformed HTTP, limits, timeouts)",
    ["code"],
)
CONNECTIONS_REAPED = Counter(
    "gateway_connections_reaped",
    "Idle keep-alive connections closed to make room for new ones near GATEWAY_MAX_CONNECTIONS (oldest idle first)",
)
GRPC_REFUSALS = Counter(
    "gateway_grpc_transport_refusals",
    "gRPC calls and connections refused by the per-client caps and the first-message deadline "
    "(too_many_calls, too_many_connections, connection_over_call_cap, first_message_timeout)",
    ["code"],
)
AUTH_REJECTIONS = Counter(
    "gateway_auth_rejections",
    "Requests refused by key checks (labels from the route table, never client input)",
    ["endpoint", "team", "key", "reason"],
)

# fault label of gateway_requests_total: who a request's outcome belongs to

# endpoint label of requests to an endpoint the route table lacks: one bucket, never the
# client's string (bounded cardinality), and not a slug, so never a real endpoint's name
# (monitoring.collection.gateway_samples.GatewayNames.unknown_endpoint reads it)
UNKNOWN_ENDPOINT = "(unknown)"


class HotPath:
    """The per-request metrics, kept as plain ints and lists and turned into Prometheus
    families only when /metrics is scraped (a custom collector on the default registry).

    prometheus_client's Counter/Histogram take a lock and walk the buckets on every
    observation; on the gateway's hot path that was several microseconds per request.
    Here one request costs a dict lookup, a bisect and a few integer additions (all on
    the event loop's thread, so no lock is needed).
    """

    def __init__(self, registry=REGISTRY):
        self.requests: dict[tuple[str, str, int, str], int] = {}
        self.latency: dict[tuple[str, str], list] = {}  # [per-bucket counts..., +Inf count, sum]
        self.upstream: dict[tuple[str, str], list] = {}
        self.in_flight: dict[str, int] = {}
        self.tenant_requests: dict[tuple[str, str, str, int], int] = {}
        self.tenant_latency: dict[tuple[str, str], list] = {}
        self._n = len(BUCKETS)
        if registry is not None:
            registry.register(self)

    def done(self, endpoint: str, variant: str, status: int, seconds: float, fault: str, tenant=None) -> None:
        """One answered request. `fault` says whose outcome it is (OK, CLIENT, BACKEND);
        the client's do not enter the variant's latency histogram (a 1-ms client deadline
        would make a variant look fast). `tenant`: the Key that called, if any."""
        key = (endpoint, variant, status, fault)
        requests = self.requests
        requests[key] = requests.get(key, 0) + 1
        if fault is not CLIENT:
            self._observe(self.latency, (endpoint, variant), seconds)
        if tenant is not None:
            self.count_tenant(endpoint, status, tenant)
            self._observe(self.tenant_latency, (tenant.team, tenant.id), seconds)

    def count_tenant(self, endpoint: str, status: int, tenant) -> None:
        """One request of a key by endpoint and status (the LLM path's too: errors per tenant)."""
        key = (tenant.team, tenant.id, endpoint, status)
        counts = self.tenant_requests
        counts[key] = counts.get(key, 0) + 1

    def observe_upstream(self, endpoint: str, variant: str, seconds: float) -> None:
        self._observe(self.upstream, (endpoint, variant), seconds)

    def _observe(self, table: dict, key, seconds: float) -> None:
        slots = table.get(key)
        if slots is None:
            slots = table[key] = [0] * (self._n + 1) + [0.0]
        slots[bisect_left(BUCKETS, seconds)] += 1
        slots[-1] += seconds

    def collect(self):
        requests = CounterMetricFamily(
            "gateway_requests",
            "Client requests by endpoint, variant that answered, HTTP status, and whose the outcome is "
            "(fault: none = served, client = the client's doing, backend = the variant's failure)",
            labels=["endpoint", "variant", "status", "fault"],
        )
        for (endpoint, variant, status, fault), count in list(self.requests.items()):
            requests.add_metric([endpoint, variant, str(status), fault], count)
        yield requests
        yield self._histogram(
            "gateway_request_duration_seconds",
            "Client request latency inside the gateway (arrival to reply), "
            "requests whose outcome was the client's left out",
            self.latency,
        )
        tenants = CounterMetricFamily(
            "gateway_tenant_requests",
            "Requests of authenticated keys by team, key id, endpoint and HTTP status",
            labels=["team", "key", "endpoint", "status"],
        )
        for (team, key, endpoint, status), count in list(self.tenant_requests.items()):
            tenants.add_metric([team, key, endpoint, str(status)], count)
        yield tenants
        yield self._histogram(
            "gateway_tenant_request_duration_seconds",
            "Latency of authenticated keys' requests",
            self.tenant_latency,
            labels=("team", "key"),
        )
        yield self._histogram(
            "gateway_upstream_duration_seconds", "Latency of one upstream attempt to a Triton replica", self.upstream
        )
        in_flight = GaugeMetricFamily("gateway_in_flight_requests", "Client requests being served", labels=["endpoint"])
        for endpoint, count in list(self.in_flight.items()):
            in_flight.add_metric([endpoint], count)
        yield in_flight

    def _histogram(
        self, name: str, documentation: str, table: dict, labels=("endpoint", "variant")
    ) -> HistogramMetricFamily:
        family = HistogramMetricFamily(name, documentation, labels=list(labels))
        for (first, second), slots in list(table.items()):
            buckets, total = [], 0
            for bound, count in zip(BUCKETS, slots):
                total += count
                buckets.append((floatToGoString(bound), total))
            total += slots[self._n]
            buckets.append(("+Inf", total))
            family.add_metric([first, second], buckets, slots[-1])
        return family

    def describe(self):
        return []


CONTENT_TYPE = CONTENT_TYPE_LATEST


def exposition() -> tuple[bytes, str]:
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
