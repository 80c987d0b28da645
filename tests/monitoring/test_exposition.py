"""monitoring/collection/exposition.py gives the samples prometheus_client's parser gives, on real
exposition output: the gateway's own (gateway/telemetry/metrics.py HotPath and its tenant series), a
real tritonserver 2.51's /metrics (tests/monitoring/data, captured from the CPU build), and
prometheus_client's own text with hostile label values. Its speed is the collector's
(make bench-collector); here only that it is right and refuses what the parser refuses."""

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitoring.collection import exposition, gateway_samples, triton_samples

TRITON_TEXT = (Path(__file__).parent / "data" / "triton_2.51_cpu_metrics.txt").read_text()


def reference(text: str) -> list[tuple]:
    """prometheus_client's samples of `text`, names as written: without the TYPE lines its
    parser keeps every sample's own name (with them it renames counters to <name>_total)."""
    untyped = "\n".join(line for line in text.splitlines() if not line.startswith("# TYPE")) + "\n"
    return sorted(
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for family in text_string_to_metric_families(untyped)
        for s in family.samples
    )


def ours(text: str, prefixes=None) -> list[tuple]:
    return sorted(
        (name, tuple(sorted(labels.items())), value) for name, labels, value in exposition.samples(text, prefixes)
    )


def gateway_text() -> str:
    from gateway.telemetry import metrics as gateway_metrics
    from gateway.wire import faults

    registry = CollectorRegistry()
    hot = gateway_metrics.HotPath(registry=registry)
    for i, status in enumerate((200, 200, 502, 504, 499, 400)):
        outcome = faults.OK if status == 200 else faults.BACKEND
        hot.done(f"ep-{i % 2}", "stable" if i % 3 else "canary", status, 0.001 * (i + 1), outcome)
        hot.observe_upstream(f"ep-{i % 2}", "stable", 0.0009 * (i + 1))
    hot.in_flight["ep-0"] = 2
    return generate_latest(registry).decode()


def hostile_text() -> str:
    registry = CollectorRegistry()
    counter = Counter("team_requests", "a counter", ["endpoint", "note"], registry=registry)
    for value in ('quote " inside', "back\\slash", "new\nline", "brace } and { and ,=", "ünïcödé ✓", " spaces "):
        counter.labels("ep", value).inc(3)
    Gauge("team_temperature", "a gauge", registry=registry).set(float("nan"))
    Gauge("team_limit", "a gauge", registry=registry).set(float("inf"))
    Histogram("team_latency_seconds", "h", ["endpoint"], buckets=(0.1, 1.0), registry=registry).labels("e}p").observe(
        0.5
    )
    return generate_latest(registry).decode()


@pytest.mark.parametrize("source", ["gateway", "triton", "hostile"])
def test_the_same_samples_as_prometheus_client(source):
    text = {"gateway": gateway_text, "triton": lambda: TRITON_TEXT, "hostile": hostile_text}[source]()
    expected = reference(text)
    got = ours(text)
    assert len(expected) > 10
    # NaN != NaN: compare those apart (the hostile text has one)
    nan = [e[:2] for e in expected if e[2] != e[2]]
    assert [g[:2] for g in got if g[2] != g[2]] == nan and (source != "hostile" or nan)
    assert [g for g in got if g[2] == g[2]] == [e for e in expected if e[2] == e[2]]
    # parsed twice (the second time from the cache): the same
    assert [g for g in ours(text) if g[2] == g[2]] == [g for g in got if g[2] == g[2]]


def test_the_same_samples_as_prometheus_client_on_numbers():
    # the values and timestamps the format allows (a timestamp is read, not returned)
    text = 'a 1\nb{x="y"} -2.5e-3 1700000000000\nc +Inf\nd -Inf\ne 1E6\nf{x="1",} 7\n'
    assert ours(text) == [e for e in reference(text)]


def test_prefixes_keep_only_those_families_and_no_created_series():
    text = gateway_text()
    wanted = gateway_samples.gateway_families()
    got = ours(text, wanted)
    assert got and all(name.startswith(wanted) and not name.endswith("_created") for name, _, _ in got)
    assert [e for e in reference(text) if e[0].startswith(wanted) and not e[0].endswith("_created")] == got


@pytest.mark.parametrize(
    "line",
    [
        'gateway_requests_total{endpoint="ctr" 1',  # no closing brace
        'gateway_requests_total{endpoint="ctr"}',  # no value
        "gateway_requests_total 1_000",  # an underscore in the value
        "gateway_requests_total one",
        'gateway_requests_total{endpoint="ctr"} 1 2 3',  # more than a value and a timestamp
        'gateway_requests_total{endpoint="a"} 1 # {trace_id="x"} 1',  # an exemplar: not the text format
        "gateway_requests_total{endpoint=ctr} 1",  # an unquoted label value
    ],
)
def test_what_the_parser_refuses_is_refused(line):
    with pytest.raises(ValueError):
        list(exposition.samples(line + "\n"))


def test_labels_cannot_be_changed_through_the_cache():
    (_, labels, _), *_ = exposition.samples('x{a="b"} 1\n')
    with pytest.raises(TypeError):
        labels["a"] = "c"
    (_, again, _), *_ = exposition.samples('x{a="b"} 2\n')
    assert dict(again) == {"a": "b"}


def test_triton_snapshot_reads_the_real_exposition():
    snapshot = triton_samples.triton_snapshot(TRITON_TEXT)
    assert snapshot["success|ctr__v2__onnx|1"] == 3
    assert snapshot["failure|ctr__v2__onnx|1"] == 0  # the reasons (OTHER, REJECTED, …) added up
    assert snapshot["request_us|ctr__v2__onnx|1"] == 104881
    assert not any(key.startswith("nv_") for key in snapshot)
