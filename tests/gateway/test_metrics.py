"""The hot-path metrics collector renders valid Prometheus families (cumulative
buckets, +Inf, sum/count, per-label series), read back with prometheus_client's parser."""

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.keys.tenants import Key
from gateway.telemetry.metrics import BUCKETS, HotPath
from gateway.wire.faults import BACKEND, CLIENT, OK


def families(hot):
    registry = CollectorRegistry()
    registry.register(hot)
    text = generate_latest(registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_hot_path_collector_round_trips():
    hot = HotPath(registry=None)
    for seconds in (0.00005, 0.0002, 0.0002, 0.0009, 0.3, 42.0):
        hot.done("ctr", "v1", 200, seconds, OK)
    hot.done("ctr", "v2", 504, 1.0, BACKEND)
    hot.observe_upstream("ctr", "v1", 0.0001)  # exactly on a bound: counted in that bucket
    hot.in_flight["ctr"] = 3
    fams = families(hot)

    requests = {
        (s.labels["variant"], s.labels["status"], s.labels["fault"]): s.value for s in fams["gateway_requests"].samples
    }
    assert requests == {("v1", "200", "none"): 6, ("v2", "504", "backend"): 1}

    latency = [s for s in fams["gateway_request_duration_seconds"].samples if s.labels.get("variant") == "v1"]
    buckets = {s.labels["le"]: s.value for s in latency if s.name.endswith("_bucket")}
    assert buckets["0.0001"] == 1 and buckets["0.00025"] == 3 and buckets["0.001"] == 4
    assert buckets["0.5"] == 5 and buckets["10.0"] == 5 and buckets["+Inf"] == 6
    assert len(buckets) == len(BUCKETS) + 1
    values = list(buckets.values())
    assert values == sorted(values)  # cumulative
    count = next(s.value for s in latency if s.name.endswith("_count"))
    total = next(s.value for s in latency if s.name.endswith("_sum"))
    assert count == 6 and abs(total - (0.00005 + 0.0004 + 0.0009 + 0.3 + 42.0)) < 1e-9

    upstream = {
        s.labels["le"]: s.value for s in fams["gateway_upstream_duration_seconds"].samples if s.name.endswith("_bucket")
    }
    assert upstream["0.0001"] == 1
    assert [s.value for s in fams["gateway_in_flight_requests"].samples] == [3]


def test_client_faults_are_counted_but_kept_out_of_the_variants_latency():
    """A 1-ms client deadline on a canary is a 504 the client asked for: counted with
    fault="client", and not a latency sample of the variant (it would read as fast)."""
    hot = HotPath(registry=None)
    key = Key({"id": "k1", "team": "ads", "sha256": "0" * 64, "rate_per_s": 5})
    hot.done("ctr", "v2", 200, 0.004, OK, key)
    hot.done("ctr", "v2", 504, 0.001, CLIENT, key)
    hot.done("ctr", "none", 401, 0.0001, CLIENT)
    fams = families(hot)
    requests = {
        (s.labels["variant"], s.labels["status"], s.labels["fault"]): s.value for s in fams["gateway_requests"].samples
    }
    assert requests == {("v2", "200", "none"): 1, ("v2", "504", "client"): 1, ("none", "401", "client"): 1}
    count = {
        s.labels["variant"]: s.value
        for s in fams["gateway_request_duration_seconds"].samples
        if s.name.endswith("_count")
    }
    assert count == {"v2": 1}
    tenant = {
        (s.labels["team"], s.labels["key"], s.labels["status"]): s.value
        for s in fams["gateway_tenant_requests"].samples
    }
    assert tenant == {("ads", "k1", "200"): 1, ("ads", "k1", "504"): 1}
    tenant_count = [
        s.value for s in fams["gateway_tenant_request_duration_seconds"].samples if s.name.endswith("_count")
    ]
    assert tenant_count == [2]
