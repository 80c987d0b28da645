"""Collection functions on real Prometheus text (prometheus_client output)."""

import math

import numpy as np
import pytest

from monitoring.collection import collect, gateway_samples, triton_samples
from monitoring.judge import statistics
from tests.monitoring.conftest import GatewayMetrics


def _interval(metrics: GatewayMetrics, serve, seconds=2.0):
    before = gateway_samples.gateway_snapshot(metrics.text())
    serve()
    after = gateway_samples.gateway_snapshot(metrics.text())
    return gateway_samples.gateway_deltas(before, after, seconds=seconds)


def test_parses_the_gateways_own_exposition():
    """The gateway's hot-path collector (gateway/telemetry/metrics.py HotPath) on a private registry:
    the default names and labels read its text."""
    from prometheus_client import CollectorRegistry, generate_latest

    from gateway.telemetry import metrics as gateway_metrics
    from gateway.wire import faults

    registry = CollectorRegistry()
    hot = gateway_metrics.HotPath(registry=registry)
    ok, client, backend = faults.OK, faults.CLIENT, faults.BACKEND
    hot.done("ctr", "stable", 200, 0.002, ok)
    before = gateway_samples.gateway_snapshot(generate_latest(registry).decode())
    for seconds in (0.0012, 0.0018, 0.0042, 0.02):
        hot.done("ctr", "stable", 200, seconds, ok)
        hot.observe_upstream("ctr", "stable", seconds * 0.9)
    for status in (200, 200, 502):
        hot.done("ctr", "canary", status, 0.004, ok if status == 200 else backend)
    # the client's: a 1-ms deadline on the canary (504), a disconnect (499), a Triton 400
    for status, seconds in ((504, 0.001), (499, 0.003), (400, 0.002)):
        hot.done("ctr", "canary", status, seconds, client)
    hot.in_flight["ctr"] = 3
    after = gateway_samples.gateway_snapshot(generate_latest(registry).decode())
    totals = gateway_samples.gateway_deltas(before, after, seconds=2.0)
    stable, canary = collect.derive(totals[("ctr", "stable")]), collect.derive(totals[("ctr", "canary")])
    assert stable["requests"] == 4 and stable["request_rate"] == 2.0 and stable["errors"] == 0
    assert canary["requests"] == 3 and canary["error_rate"] == pytest.approx(1 / 3)
    assert canary["client_faults"] == 3 and canary["latency_mean_ms"] == pytest.approx(4.0)  # none of them in latency
    assert stable["latency_mean_ms"] == pytest.approx((1.2 + 1.8 + 4.2 + 20) / 4)
    assert 10 < stable["latency_p99_ms"] <= 25  # the 20 ms request sits in the (10, 25] ms bucket
    assert stable["upstream_mean_ms"] == pytest.approx((1.2 + 1.8 + 4.2 + 20) / 4 * 0.9)
    assert collect.derive(totals[("ctr", collect.ALL_VARIANTS)])["in_flight"] == 3


def test_shadow_copies_refused_by_the_shadow_are_its_errors():
    """A shadow copy is a request the primary already served: the shadow's 4xx, a copy
    its signature refuses ("incompatible") or no ready shadow replica count as errors."""
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    registry = CollectorRegistry()
    shadow = Counter("gateway_shadow_requests", "", ["endpoint", "variant", "status"], registry=registry)
    before = gateway_samples.gateway_snapshot(generate_latest(registry).decode())
    for status, n in (("200", 6), ("400", 1), ("incompatible", 2), ("unavailable", 1)):
        shadow.labels("ctr", "v9-shadow", status).inc(n)
    totals = gateway_samples.gateway_deltas(
        before, gateway_samples.gateway_snapshot(generate_latest(registry).decode()), seconds=1.0
    )
    derived = collect.derive(totals[("ctr", "v9-shadow")])
    assert derived["requests"] == 10 and derived["errors"] == 4


def test_request_and_error_rate_per_variant_from_two_scrapes():
    m = GatewayMetrics()
    m.serve("ctr", "stable", [0.002] * 50, [200] * 50)  # before the first scrape: not in the interval
    rng = np.random.default_rng(1)

    def serve():
        m.serve("ctr", "stable", rng.uniform(0.001, 0.003, 300), [200] * 297 + [503] * 3)
        m.serve("ctr", "canary", rng.uniform(0.001, 0.003, 100), [200] * 90 + [500] * 8 + [404] * 2)

    totals = _interval(m, serve, seconds=2.0)
    stable = collect.derive(totals[("ctr", "stable")])
    canary = collect.derive(totals[("ctr", "canary")])
    assert stable["requests"] == 300 and stable["errors"] == 3
    assert stable["request_rate"] == pytest.approx(150.0)
    assert stable["error_rate"] == pytest.approx(0.01)
    assert canary["requests"] == 100 and canary["errors"] == 8  # 404 is the client's error
    assert canary["error_rate"] == pytest.approx(0.08)


def test_latency_quantiles_from_bucket_deltas():
    m = GatewayMetrics()
    m.serve("ctr", "stable", [0.2] * 1000, [200] * 1000)  # slow history must not leak into the interval
    rng = np.random.default_rng(2)
    latencies = rng.lognormal(np.log(0.004), 0.3, 5000)
    totals = _interval(m, lambda: m.serve("ctr", "stable", latencies, [200] * len(latencies)))
    derived = collect.derive(totals[("ctr", "stable")])
    for label, q in collect.QUANTILES:
        true_ms = float(np.quantile(latencies, q)) * 1000
        # bucket interpolation: within the bucket that holds the true quantile
        assert derived[f"latency_{label}_ms"] == pytest.approx(true_ms, rel=0.25), label
    assert derived["latency_p50_ms"] < derived["latency_p95_ms"] < derived["latency_p99_ms"] < 20
    assert derived["latency_mean_ms"] == pytest.approx(float(latencies.mean()) * 1000, rel=1e-6)
    assert derived["upstream_mean_ms"] == pytest.approx(float(latencies.mean()) * 800, rel=1e-6)
    buckets = {k: v for k, v in derived.items() if k.startswith("latency_bucket:")}
    assert sum(buckets.values()) == 5000


def test_a_bucket_keeps_its_lower_edge_when_the_buckets_below_are_empty():
    """Every request in one bucket above empty ones: the quantiles stay inside that bucket,
    over one scrape and summed over scrapes (as the store and the judge sum them)."""
    m = GatewayMetrics()
    ticks = []
    for _ in range(3):
        totals = _interval(m, lambda: m.serve("ctr", "canary", [0.0027] * 200, [200] * 200))
        ticks.append(collect.derive(totals[("ctr", "canary")]))
    assert 2.0 < ticks[0]["latency_p50_ms"] <= 3.0  # 1.5 ms when the bucket loses its lower edge
    summed: dict[float, float] = {}
    for derived in ticks:
        for metric, value in derived.items():
            if metric.startswith("latency_bucket:"):
                le = statistics.parse_bucket_metric(metric)[1]
                summed[le] = summed.get(le, 0.0) + value
    assert sum(summed.values()) == 600
    assert 2.0 < statistics.histogram_quantile(0.5, summed) * 1000 <= 3.0


def test_counter_reset_is_a_restart_not_a_negative_rate():
    before = gateway_samples.gateway_snapshot(
        _text_after(lambda m: m.serve("ctr", "stable", [0.001] * 500, [200] * 500))
    )
    after = gateway_samples.gateway_snapshot(_text_after(lambda m: m.serve("ctr", "stable", [0.001] * 20, [200] * 20)))
    totals = gateway_samples.gateway_deltas(before, after, seconds=2.0)
    assert collect.derive(totals[("ctr", "stable")])["requests"] == 20


def _text_after(serve) -> str:
    m = GatewayMetrics()
    serve(m)
    return m.text()


def test_custom_prefix_and_per_endpoint_series():
    m = GatewayMetrics(prefix="edge_")
    names = gateway_samples.GatewayNames(prefix="edge_")
    before = gateway_samples.gateway_snapshot(m.text(), names)
    m.serve("ctr", "stable", [0.001] * 10, [200] * 10)
    m.in_flight.labels("ctr").set(7)
    m.retries.labels("ctr", "stable").inc(2)
    m.failovers.labels("ctr", "canary", "stable", "5xx").inc(3)
    after = gateway_samples.gateway_snapshot(m.text(), names)
    totals = gateway_samples.gateway_deltas(before, after, seconds=1.0, names=names)
    assert collect.derive(totals[("ctr", "stable")])["retries"] == 2
    assert collect.derive(totals[("ctr", "canary")])["failovers"] == 3
    assert collect.derive(totals[("ctr", collect.ALL_VARIANTS)])["in_flight"] == 7
    assert gateway_samples.gateway_snapshot(m.text()) == {}  # default prefix sees none of it


def test_histogram_quantile_matches_prometheus_interpolation():
    buckets = {0.001: 10, 0.002: 30, 0.005: 60, math.inf: 0}
    # rank 50 of 100 falls in (0.002, 0.005] after 40: 0.002 + 0.003 * 10/60
    assert statistics.histogram_quantile(0.5, buckets) == pytest.approx(0.0025)
    assert statistics.histogram_quantile(0.99, {0.01: 50, math.inf: 50}) == 0.01  # +Inf answers the lower bound
    assert statistics.histogram_quantile(0.5, {}) is None


def test_replicas_add_up():
    a = collect.Totals()
    a.values.update(requests=10, request_rate=5)
    b = collect.Totals()
    b.values.update(requests=30, request_rate=15, errors=3)
    merged = collect.merge({("e", "v"): a}, {("e", "v"): b})
    derived = collect.derive(merged[("e", "v")])
    assert derived["requests"] == 40 and derived["request_rate"] == 20 and derived["error_rate"] == pytest.approx(0.075)


TRITON_TEXT = """# HELP nv_inference_request_success Number of successful inference requests
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="m__v1__a",version="1"} %(s1)d
nv_inference_request_success{model="m__v2__a",version="1"} %(s2)d
# HELP nv_inference_request_failure Number of failed inference requests
# TYPE nv_inference_request_failure counter
nv_inference_request_failure{model="m__v1__a",reason="BACKEND",version="1"} 0
nv_inference_request_failure{model="m__v2__a",reason="REJECTED",version="1"} %(f2)d
# TYPE nv_inference_count counter
nv_inference_count{model="m__v1__a",version="1"} %(s1)d
nv_inference_count{model="m__v2__a",version="1"} %(c2)d
# TYPE nv_inference_exec_count counter
nv_inference_exec_count{model="m__v1__a",version="1"} %(s1)d
nv_inference_exec_count{model="m__v2__a",version="1"} %(e2)d
# TYPE nv_inference_request_duration_us counter
nv_inference_request_duration_us{model="m__v1__a",version="1"} %(r1)d
nv_inference_request_duration_us{model="m__v2__a",version="1"} %(r2)d
# TYPE nv_inference_queue_duration_us counter
nv_inference_queue_duration_us{model="m__v1__a",version="1"} %(q1)d
nv_inference_queue_duration_us{model="m__v2__a",version="1"} %(q2)d
# TYPE nv_inference_compute_infer_duration_us counter
nv_inference_compute_infer_duration_us{model="m__v1__a",version="1"} %(i1)d
nv_inference_compute_infer_duration_us{model="m__v2__a",version="1"} %(i2)d
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="m__v1__a",version="1"} 0
nv_inference_pending_request_count{model="m__v2__a",version="1"} %(p2)d
"""


def test_triton_queue_compute_utilization_and_cost():
    zero = dict(s1=0, s2=0, f2=0, c2=0, e2=0, r1=0, r2=0, q1=0, q2=0, i1=0, i2=0, p2=0)
    later = dict(
        s1=100,
        s2=300,
        f2=5,
        c2=600,
        e2=150,
        r1=200_000,
        r2=900_000,
        q1=20_000,
        q2=300_000,
        i1=100_000,
        i2=300_000,
        p2=4,
    )
    models = {
        "m__v1__a": triton_samples.TritonModelMap("ctr", "stable"),
        "m__v2__a": triton_samples.TritonModelMap("ctr", "canary", instances=2),
    }
    totals = triton_samples.triton_deltas(
        triton_samples.triton_snapshot(TRITON_TEXT % zero),
        triton_samples.triton_snapshot(TRITON_TEXT % later),
        seconds=2.0,
        models=models,
        cost_per_replica_hour=3.6,
    )
    canary = collect.derive(totals[("ctr", "canary")])
    stable = collect.derive(totals[("ctr", "stable")])
    assert canary["triton_requests"] == 305 and canary["triton_failures"] == 5
    assert canary["queue_ms"] == pytest.approx(1.0)  # 300 ms queue over 300 successful requests
    assert canary["compute_infer_ms"] == pytest.approx(1.0)
    assert canary["queue_share"] == pytest.approx(300 / 900)
    assert canary["utilization"] == pytest.approx(0.3 / (2.0 * 2))  # 0.3 s compute, 2 instances, 2 s
    assert canary["batch_size"] == pytest.approx(4.0)
    assert canary["triton_in_flight"] == 4
    # The replica's 3.6/h is shared by compute time (3:1); 300 inferences/s -> 1.08M/h.
    assert canary["cost_per_1k_inferences"] == pytest.approx(3.6 * 0.75 / (300 * 3600) * 1000)
    assert stable["cost_per_1k_inferences"] == pytest.approx(3.6 * 0.25 / (50 * 3600) * 1000)
    unmapped = triton_samples.triton_deltas(
        {}, triton_samples.triton_snapshot(TRITON_TEXT % later), seconds=2.0, models={}
    )
    assert unmapped == {}


def test_psi_and_score_bins():
    rng = np.random.default_rng(3)
    stable = statistics.score_bins(rng.beta(2, 8, 5000))
    same = statistics.score_bins(rng.beta(2, 8, 5000))
    shifted = statistics.score_bins(rng.beta(4, 6, 5000))
    assert sum(stable) == 5000 and len(stable) == statistics.SCORE_BINS
    assert statistics.psi(stable, same) < 0.02
    assert statistics.psi(stable, shifted) > 0.25
    assert statistics.score_bins([-1, 2, float("nan")]) == [1] + [0] * 8 + [1]
    with pytest.raises(ValueError):
        statistics.psi([0] * 10, stable)


def test_garbage_is_a_clear_error_not_a_crash():
    with pytest.raises((ValueError, IndexError, KeyError)):
        gateway_samples.gateway_snapshot('gateway_requests_total{endpoint="a" 1\n')
    assert gateway_samples.gateway_snapshot("<html>not metrics</html>") == {}  # nothing of ours in it
