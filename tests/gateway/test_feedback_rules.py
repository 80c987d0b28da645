"""The feedback rules both doors apply (gateway/contracts/feedback.schema.json via gateway/contracts/feedback_rules.py):
one definition, the same refusal at the gateway and at the control plane, and the signed
exposure token (HMAC-SHA256 from the standard library)."""

import time
from datetime import UTC, datetime, timedelta

import pytest

from experiments.feedback import FeedbackError, parse_batch
from gateway.contracts.feedback_rules import check_feedback, max_unit_key, read_exposure_token, sign_exposure, unit_tag
from gateway.v2.feedback import EventBuckets

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def batch(**event):
    return {"endpoint": "ctr", "events": [{"event_id": "e1", "type": "click", "request_id": "r1", **event}]}


HOSTILE = [
    (batch(value=10**400), "events[0].value"),  # no float64 holds it: it stopped every team's ingest
    (batch(type="value", value=1.7e308), "events[0].value"),  # two of them overflowed PostgreSQL's SUM
    (batch(value=float("nan")), "events[0].value"),
    (batch(type="like"), "events[0].type"),
    (batch(time="0001-01-01T00:00:00Z"), "events[0].time"),  # before any impression, counted as attributed
    (batch(time=(NOW + timedelta(hours=1)).isoformat()), "in the future"),
    (batch(time="2026-11-24T12:00:00"), "with its zone"),
    (batch(unit_key="u" * (max_unit_key() + 1), request_id=None), "events[0]"),
    (batch(event_id="x" * 129), "events[0].event_id"),
    (batch(request_id="r" * 129), "events[0].request_id"),
    (batch(extra=1), "no other field"),
    (batch(exposure_token="not a token"), "events[0]"),
    ({"endpoint": "ctr", "events": [{"event_id": "e", "type": "click"}] * 10_001}, "events"),
    ({"endpoint": "", "events": []}, "endpoint"),
    ([1, 2], "JSON object"),
]


@pytest.mark.parametrize("doc,needle", HOSTILE, ids=[n for _, n in HOSTILE])
def test_both_doors_refuse_the_same_bodies_with_the_same_words(doc, needle):
    if isinstance(doc, dict):
        for event in doc.get("events", [])[:1]:
            for k in [k for k, v in event.items() if v is None]:
                del event[k]
    gateway = check_feedback(doc, NOW)
    assert isinstance(gateway, str) and needle in gateway
    with pytest.raises(FeedbackError) as control_plane:
        parse_batch(doc, now=NOW)
    assert control_plane.value.detail == gateway


def test_a_valid_batch_passes_both_and_times_come_out_in_utc():
    doc = batch(type="value", value=-12.5, time="2026-11-24T13:00:00+02:00")
    assert check_feedback(doc, NOW) == ("ctr", doc["events"])
    name, [event] = parse_batch(doc, now=NOW)
    assert name == "ctr" and event["time"] == datetime(2026, 11, 24, 11, 0, tzinfo=UTC) and event["value"] == -12.5


def test_exposure_tokens_verify_only_under_their_experiments_key_and_unchanged():
    key = bytes(range(32))
    token = sign_exposure(key, "exp-7", "ctr", "v2-onnx-fp32", "rid-1", time.time(), 3600, "user-1")
    read = read_exposure_token(token, {"exp-7": key}.get)
    assert (read.experiment, read.endpoint, read.arm, read.request_id) == ("exp-7", "ctr", "v2-onnx-fp32", "rid-1")
    assert read.expires_ms - read.issued_ms == 3_600_000 and read.unit == unit_tag("user-1") != unit_tag("user-2")
    assert read_exposure_token(token, {"exp-7": bytes(32)}.get) is None  # another key
    assert read_exposure_token(token, {}.get) is None  # an experiment that takes no tokens
    payload, mac = token.split(".")
    other = sign_exposure(key, "exp-7", "ctr", "v2-onnx-fp32", "rid-2", time.time(), 3600, "user-1").split(".")[0]
    assert read_exposure_token(f"{other}.{mac}", {"exp-7": key}.get) is None  # a payload with another's mac
    assert read_exposure_token("garbage", {"exp-7": key}.get) is None
    cited = {"endpoint": "ctr", "events": [{"event_id": "e1", "type": "click", "exposure_token": token}]}
    assert check_feedback(cited, NOW) == ("ctr", cited["events"])  # a token stands for the request id
    # the longest token the gateway makes (names at their bounds, its own 32-hex request id) fits the schema
    longest = sign_exposure(key, "exp-" + "9" * 12, "e" * 64, "v" * 128, "f" * 32, time.time(), 2592000, "u" * 200)
    assert check_feedback({"endpoint": "ctr", "events": [{**cited["events"][0], "exposure_token": longest}]}, NOW)[0]


def test_event_buckets_bound_events_per_second_per_key():
    buckets = EventBuckets(rate=100)
    assert buckets.take("k1", 100, 0.0) == 0.0
    assert buckets.take("k1", 50, 0.1) > 0  # 10 tokens back after 0.1 s
    assert buckets.take("k2", 100, 0.1) == 0.0  # another key has its own
    assert buckets.take("k1", 60, 1.0) == 0.0
