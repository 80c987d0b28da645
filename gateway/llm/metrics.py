"""The LLM metric families (the collector and the canary judge read them),
kept as plain ints and lists like metrics.HotPath and rendered only when /metrics is scraped:

  gateway_llm_requests{endpoint,variant,status,fault}      counter (fault none|client|backend)
  gateway_llm_ttft_seconds{endpoint,variant}               arrival -> first token sent to the client
                                                           (a reply that is not streamed: first
                                                           token received by the gateway)
  gateway_llm_itl_seconds{endpoint,variant}                gaps between streamed chunks the backend
                                                           paced (not those below)
  gateway_llm_itl_client_paced{endpoint,variant}           gaps left out of ITL: the gateway waited on
                                                           the client (a slow reader's full socket) for
                                                           more than half of the gap, so the client, not
                                                           the variant, set it
  gateway_llm_queue_seconds{endpoint,variant}              arrival -> the serving attempt sent
  gateway_llm_tokens{endpoint,variant,team,key,kind}       kind prompt|completion; "" for public calls
  gateway_llm_cost{endpoint,variant,team,key}              from the backend's cost_per_1k_*
  gateway_llm_fallbacks{endpoint,backend,reason}           reason connect|timeout|429|5xx
  gateway_llm_rescued{endpoint,variant,reason}             requests of `variant` its own backends did
                                                           not serve (reason connect|timeout|429|5xx|
                                                           cooldown|guard) and the endpoint's fallbacks did:
                                                           the judge counts each as one failed request
                                                           of the variant (their outcome, TTFT and ITL
                                                           are under variant="fallback")
  gateway_llm_tenant_ttft_seconds{team,key}                TTFT of authenticated keys' requests
  gateway_llm_tenant_itl_seconds{team,key}                 ITL of authenticated keys' streams
  gateway_llm_streams_in_flight{endpoint}                  gauge
  gateway_llm_refusals{endpoint,reason}                    what the gateway refused to let a tenant's
                                                           backend cost: an address the outbound guard
                                                           forbids (its rule: loopback, private,
                                                           platform_listener, ...), secret_origin, loop
                                                           (endpoint "unknown": a request that came back),
                                                           reply_too_large, reply_buffer_full

Requests per key and status (errors per tenant) are the tensor path's family,
gateway_tenant_requests{team,key,endpoint,status} (gateway/telemetry/metrics.py HotPath.count_tenant).
"""

from __future__ import annotations

from bisect import bisect_left

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from gateway.telemetry.metrics import BUCKETS

ITL_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.003,
    0.005,
    0.0075,
    0.01,
    0.015,
    0.02,
    0.03,
    0.05,
    0.075,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
)


class LlmMetrics:
    def __init__(self, registry=REGISTRY):
        self.requests: dict[tuple, int] = {}
        self.ttft: dict[tuple, list] = {}
        self.itl: dict[tuple, list] = {}
        self.queue: dict[tuple, list] = {}
        self.tokens: dict[tuple, int] = {}
        self.cost: dict[tuple, float] = {}
        self.fallbacks: dict[tuple, int] = {}
        self.rescued: dict[tuple, int] = {}
        self.paced: dict[tuple, int] = {}
        self.tenant_ttft: dict[tuple, list] = {}
        self.tenant_itl: dict[tuple, list] = {}
        self.streams: dict[str, int] = {}
        self.refusals: dict[tuple, int] = {}
        if registry is not None:
            registry.register(self)

    def done(self, endpoint: str, variant: str, status: int, fault: str) -> None:
        key = (endpoint, variant, status, fault)
        self.requests[key] = self.requests.get(key, 0) + 1

    def observe(self, table: dict, key: tuple, seconds: float, buckets=BUCKETS) -> None:
        slots = table.get(key)
        if slots is None:
            slots = table[key] = [0] * (len(buckets) + 1) + [0.0]
        slots[bisect_left(buckets, seconds)] += 1
        slots[-1] += seconds

    def usage(self, endpoint: str, variant: str, tenant, prompt: int, completion: int, cost: float) -> None:
        team, key = (tenant.team, tenant.id) if tenant is not None else ("", "")
        for kind, count in (("prompt", prompt), ("completion", completion)):
            label = (endpoint, variant, team, key, kind)
            self.tokens[label] = self.tokens.get(label, 0) + count
        label = (endpoint, variant, team, key)
        self.cost[label] = self.cost.get(label, 0.0) + cost

    def fallback(self, endpoint: str, backend: str, reason: str) -> None:
        key = (endpoint, backend, reason)
        self.fallbacks[key] = self.fallbacks.get(key, 0) + 1

    def rescue(self, endpoint: str, variant: str, reason: str) -> None:
        key = (endpoint, variant, reason)
        self.rescued[key] = self.rescued.get(key, 0) + 1

    def refused(self, endpoint: str, reason: str) -> None:
        key = (endpoint, str(reason))
        self.refusals[key] = self.refusals.get(key, 0) + 1

    def client_paced(self, key: tuple) -> None:
        self.paced[key] = self.paced.get(key, 0) + 1

    def collect(self):
        requests = CounterMetricFamily(
            "gateway_llm_requests",
            "LLM requests by endpoint, variant, HTTP status and whose outcome it is",
            labels=["endpoint", "variant", "status", "fault"],
        )
        for (endpoint, variant, status, fault), count in list(self.requests.items()):
            requests.add_metric([endpoint, variant, str(status), fault], count)
        yield requests
        yield _histogram("gateway_llm_ttft_seconds", "Time to first token (arrival to first token)", self.ttft)
        yield _histogram(
            "gateway_llm_itl_seconds", "Inter-token latency (gap between streamed chunks)", self.itl, ITL_BUCKETS
        )
        paced = CounterMetricFamily(
            "gateway_llm_itl_client_paced",
            "Gaps between streamed chunks left out of ITL: the client's reading, not the backend, set them",
            labels=["endpoint", "variant"],
        )
        for labels, count in list(self.paced.items()):
            paced.add_metric(list(labels), count)
        yield paced
        yield _histogram("gateway_llm_queue_seconds", "Arrival to the serving upstream request sent", self.queue)
        tokens = CounterMetricFamily(
            "gateway_llm_tokens",
            "Tokens by endpoint, variant, team, key and kind (prompt|completion) from the backend's usage",
            labels=["endpoint", "variant", "team", "key", "kind"],
        )
        for labels, count in list(self.tokens.items()):
            tokens.add_metric(list(labels), count)
        yield tokens
        cost = CounterMetricFamily(
            "gateway_llm_cost",
            "Cost of the tokens (backend's cost_per_1k_*)",
            labels=["endpoint", "variant", "team", "key"],
        )
        for labels, value in list(self.cost.items()):
            cost.add_metric(list(labels), value)
        yield cost
        fallbacks = CounterMetricFamily(
            "gateway_llm_fallbacks",
            "Attempts that failed before the first token and moved the request on (connect|timeout|429|5xx)",
            labels=["endpoint", "backend", "reason"],
        )
        for labels, count in list(self.fallbacks.items()):
            fallbacks.add_metric(list(labels), count)
        yield fallbacks
        rescued = CounterMetricFamily(
            "gateway_llm_rescued",
            "Requests of a variant its own backends did not serve (connect|timeout|429|5xx|cooldown), served by the "
            "endpoint's fallbacks",
            labels=["endpoint", "variant", "reason"],
        )
        for labels, count in list(self.rescued.items()):
            rescued.add_metric(list(labels), count)
        yield rescued
        yield _histogram(
            "gateway_llm_tenant_ttft_seconds", "Time to first token of authenticated keys", self.tenant_ttft, BUCKETS,
            ("team", "key"),
        )  # fmt: skip
        yield _histogram(
            "gateway_llm_tenant_itl_seconds", "Inter-token latency of authenticated keys' streams", self.tenant_itl,
            ITL_BUCKETS, ("team", "key"),
        )  # fmt: skip
        refusals = CounterMetricFamily(
            "gateway_llm_refusals",
            "What the gateway refused to let a tenant's LLM backend cost (outbound rule, secret_origin, loop, "
            "reply_too_large, reply_buffer_full)",
            labels=["endpoint", "reason"],
        )
        for labels, count in list(self.refusals.items()):
            refusals.add_metric(list(labels), count)
        yield refusals
        streams = GaugeMetricFamily("gateway_llm_streams_in_flight", "LLM requests in progress", labels=["endpoint"])
        for endpoint, count in list(self.streams.items()):
            streams.add_metric([endpoint], count)
        yield streams

    def describe(self):
        return []


def _histogram(
    name: str, documentation: str, table: dict, buckets=BUCKETS, labels=("endpoint", "variant")
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, documentation, labels=list(labels))
    n = len(buckets)
    for (first, second), slots in list(table.items()):
        cumulative, total = [], 0
        for bound, count in zip(buckets, slots):
            total += count
            cumulative.append((floatToGoString(bound), total))
        total += slots[n]
        cumulative.append(("+Inf", total))
        family.add_metric([first, second], cumulative, slots[-1])
    return family
