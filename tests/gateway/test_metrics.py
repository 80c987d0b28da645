"""The hot-path metrics collector renders valid Prometheus families (cumulative
buckets, +Inf, sum/count, per-label series), read back with prometheus_client's parser."""

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.metrics import BUCKETS, HotPath


def families(hot):
    registry = CollectorRegistry()
    registry.register(hot)
    text = generate_latest(registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_hot_path_collector_round_trips():
    hot = HotPath(registry=None)
    for seconds in (0.00005, 0.0002, 0.0002, 0.0009, 0.3, 42.0):
        hot.done("ctr", "v1", 200, seconds)
    hot.done("ctr", "v2", 504, 1.0)
    hot.observe_upstream("ctr", "v1", 0.0001)  # exactly on a bound: counted in that bucket
    hot.in_flight["ctr"] = 3
    fams = families(hot)

    requests = {(s.labels["variant"], s.labels["status"]): s.value for s in fams["gateway_requests"].samples}
    assert requests == {("v1", "200"): 6, ("v2", "504"): 1}

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

    upstream = {s.labels["le"]: s.value for s in fams["gateway_upstream_duration_seconds"].samples if s.name.endswith("_bucket")}
    assert upstream["0.0001"] == 1
    assert [s.value for s in fams["gateway_in_flight_requests"].samples] == [3]
