"""What one exposure token may carry, through a real gateway in front of a real tritonserver,
the real Redis streams and the control plane's ingest into PostgreSQL (no mocks).

Team A's public endpoint runs an experiment that accepts exposure tokens (as the demo's
does); team B's keyed endpoint runs its own. Each case was reproduced against the code
before it: 4 000 conversions on one token were accepted, a click could be replayed, a
token of an ended experiment was attributed, and two users sending one X-Request-Id
left one exposure."""

import time

import pytest
import redis
from django.conf import settings
from prometheus_client.parser import text_string_to_metric_families

from experiments.models import Exposure, Feedback
from experiments.services import ingest
from experiments.services import online as services
from harness import factories
from harness.feedback_stack import FeedbackStack
from harness.processes import wait_for
from registry.models import Role
from tests.conftest import require_service
from tests.gateway.conftest import require_triton

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def stack(tmp_path, onnx_path, team_a, team_b, deployer):
    require_service("postgres", "redis")
    require_triton()
    client = redis.Redis.from_url(settings.EXPOSURE_STREAM_URL)
    ingest.streams_delete(client)
    bea = factories.user("bea")
    factories.member(bea, team_b, Role.DEPLOYER)
    built = FeedbackStack(tmp_path, onnx_path, settings.EXPOSURE_STREAM_URL)
    built.red = built.add(team_a, deployer, "red-ctr", public=True, feedback_tokens=True, attribution_window_s=600)
    built.blue = built.add(team_b, bea, "blue-ctr", public=False)
    built.redis = client
    with built:
        yield built
    ingest.streams_delete(client)


RED_OVER = ("gateway_feedback_refused_total", {"endpoint": "red-ctr", "code": "exposure_allowance_exceeded"})
RED_UNITS = ("gateway_feedback_refused_total", {"endpoint": "red-ctr", "code": "one_unit_per_batch"})


def refused(stack, name: str, labels: dict) -> float:
    """What the gateway counted (its /metrics)."""
    for family in text_string_to_metric_families(stack.metrics()):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return 0.0


def drain(stack, until, what: str):
    """Run the control plane's ingest (as its task does every second) until `until()` holds."""

    def step():
        ingest.ingest_once(stack.redis)
        return until()

    return wait_for(step, timeout=30, what=what, interval=0.3)


def test_one_token_carries_one_exposure_and_replays_are_refused_and_counted(stack):
    red = stack.red
    reply = stack.infer(red, user="u1")
    assert reply.status_code == 200, reply.text
    token = reply.headers["X-Exposure-Token"]

    def event(i, kind="click", **extra):
        return {"event_id": f"e{i}", "type": kind, "exposure_token": token, **extra}

    # the flood of the report: 4 000 conversions citing one token, anonymous, in one body: refused
    # before it is parsed (a body without a valid key is one user's feedback, at most 64 KiB)
    flood = stack.feedback(red, [event(i, "conversion") for i in range(4000)], key=False)
    assert flood.status_code == 413 and flood.json()["code"] == "feedback_too_large", flood.text
    assert refused(stack, "gateway_feedback_bodies_refused_total", {"code": "feedback_too_large"}) == 1
    # within 64 KiB: the first conversion past the 3 one exposure carries is named
    replays = stack.feedback(red, [event(i, "conversion") for i in range(100)], key=False)
    assert replays.status_code == 409 and replays.json()["code"] == "exposure_allowance_exceeded", replays.text
    assert "events[3].exposure_token" in replays.json()["error"]
    assert refused(stack, *RED_OVER) == 100
    # one click, then its replay under another event id: refused across batches, at the door
    assert stack.feedback(red, [event(1)], key=False).status_code == 202
    again = stack.feedback(red, [event(2)], key=False)
    assert again.status_code == 409 and again.json()["code"] == "exposure_allowance_exceeded", again.text
    # the team's key does not make a replay count either
    assert stack.feedback(red, [event(3)]).status_code == 409
    # conversions and values up to what one exposure allows, then no more
    ok = [event(10 + i, "conversion") for i in range(3)] + [event(20 + i, "value", value=3000) for i in range(3)]
    assert stack.feedback(red, ok, key=False).status_code == 202
    assert stack.feedback(red, [event(30, "value", value=1)], key=False).status_code == 409
    # without a key, a batch is one unit's feedback: two users' tokens in one body are refused
    other = stack.infer(red, user="u2").headers["X-Exposure-Token"]
    two = stack.feedback(red, [{"event_id": "x1", "type": "click", "exposure_token": other}, event(40)], key=False)
    assert two.status_code == 400 and two.json()["code"] == "one_unit_per_batch", two.text
    assert refused(stack, *RED_UNITS) == 2

    solo = stack.feedback(red, [{"event_id": "x1", "type": "click", "exposure_token": other}], key=False)
    assert solo.status_code == 202
    drain(stack, lambda: Feedback.objects.filter(status="attributed").count() >= 8, "attributed feedback")
    stored = Feedback.objects.filter(endpoint_name="red-ctr")
    assert stored.filter(kind="click", status="attributed").count() == 2  # u1's one click and u2's
    assert stored.filter(kind="conversion", status="attributed").count() == 3
    assert sum(f.value for f in stored.filter(kind="value", status="attributed")) == 9000


def test_two_users_with_one_request_id_are_both_exposed(stack):
    red, blue = stack.red, stack.blue
    replies = [stack.infer(t, user=u, headers={"X-Request-Id": "shared-id-1"}) for t, u in ((red, "u1"), (red, "u2"))]
    replies.append(stack.infer(blue, user="u3", headers={"X-Request-Id": "shared-id-1"}))
    ids = [r.headers["X-Request-Id"] for r in replies]
    assert all(r.status_code == 200 for r in replies) and len(set(ids)) == 3 and "shared-id-1" not in ids
    drain(stack, lambda: Exposure.objects.count() == 3, "three exposures")
    assert {(e.request_id, e.unit_key) for e in Exposure.objects.all()} == set(zip(ids, ("u1", "u2", "u3")))
    # each reply's id names its own exposure: feedback by it is attributed to that user's
    click = stack.feedback(blue, [{"event_id": "c1", "type": "click", "request_id": ids[2]}])
    assert click.status_code == 202
    drain(stack, lambda: Feedback.objects.filter(status="attributed").exists(), "the click attributed")
    assert Feedback.objects.get(event_id="c1").exposure_unit == "u3"
    # outside an experiment (a request pinned to a version) the client's id is still echoed for tracing
    pinned = stack.session.post(
        f"{stack.url}/v2/models/red-ctr/versions/1/infer",
        data=b'{"inputs": []}',
        headers={"X-Request-Id": "trace-me"},
        timeout=10,
    )
    assert pinned.headers["X-Request-Id"] == "trace-me"


def test_a_token_of_an_ended_experiment_is_not_attributed(stack):
    red = stack.red
    token = stack.infer(red, user="u1").headers["X-Exposure-Token"]
    late = stack.infer(red, user="u2").headers["X-Exposure-Token"]
    queued = stack.feedback(red, [{"event_id": "q1", "type": "click", "exposure_token": token}], key=False)
    assert queued.status_code == 202  # taken by the door while the experiment ran ...
    services.experiment_stop(user=red.user, experiment=red.experiment, reason="ended")  # ... and ingested after
    stack.refresh()
    stop_seen = time.monotonic()

    def door_refuses():
        res = stack.feedback(red, [{"event_id": "q2", "type": "click", "exposure_token": late}], key=False)
        return res.status_code == 401 and res.json()["code"] in ("invalid_exposure_token", "missing_key")

    wait_for(door_refuses, timeout=10, what="the gateway to refuse the ended experiment's tokens")
    assert time.monotonic() - stop_seen < 10
    drain(stack, lambda: Feedback.objects.filter(event_id="q1").exists(), "the queued click stored")
    row = Feedback.objects.get(event_id="q1")
    assert row.status == "refused" and row.arm_id is None  # counted on the experiment, never attributed
