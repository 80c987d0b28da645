"""Sybils cannot decide a public experiment: the report's case on real processes (a real gateway
in front of a real tritonserver, harness/feedback_stack.py; the real Redis streams; the
control plane's ingest and analysis in this process).

Team A's public endpoint runs an experiment that takes feedback by exposure token, as the
demo's does, and its candidate is worse: honest users click the control's top item far more
often. An attacker makes 400 fake users (one request each, every reply carrying a genuine
token) and sends one POST: a click on every fake user the candidate served, and 2 000
conversions with values summing to 2e12 on one token. On the code before, that POST was
accepted and the next analysis tick shipped the candidate at +201 %. Here the POST is refused
(400: without a key a batch carries one unit's feedback), the replays on one token are refused
(409) and counted, and the analysis decides on the honest users alone: the candidate is not
shipped. Team B's keyed experiment beside it keeps all its feedback (its success rate: 100 %).
"""

import random

import pytest
import redis
from django.conf import settings

from experiments.models import Experiment, Exposure, Feedback
from experiments.services import ingest
from experiments.services import online as services
from harness import factories
from harness.feedback_stack import FeedbackStack
from harness.processes import wait_for
from registry.models import Role
from tests.conftest import require_service
from tests.gateway.conftest import require_triton

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
HONEST_USERS, REQUESTS_EACH = 80, 3
CLICK_RATE = {"control": 0.45, "candidate": 0.10}  # the candidate is the worse model


def test_400_fake_users_and_one_post_cannot_ship_the_worse_candidate(tmp_path, onnx_path, team_a, team_b, deployer):
    require_service("postgres", "redis")
    require_triton()
    client = redis.Redis.from_url(settings.EXPOSURE_STREAM_URL)
    ingest.streams_delete(client)
    bea = factories.user("bea")
    factories.member(bea, team_b, Role.DEPLOYER)
    stack = FeedbackStack(tmp_path, onnx_path, settings.EXPOSURE_STREAM_URL)
    red = stack.add(
        team_a, deployer, "red-ctr", public=True, feedback_tokens=True, attribution_window_s=600, guardrail_psi=False
    )
    blue = stack.add(team_b, bea, "blue-ctr", public=False)
    rng = random.Random(7)
    with stack:
        control = red.experiment.arms.get(is_control=True).name
        sent_honest = 0
        # honest users: each sees a few rankings and posts its own clicks with its tokens
        for u in range(HONEST_USERS):
            clicks = []
            for r in range(REQUESTS_EACH):
                reply = stack.infer(red, user=f"user-{u}", seed=u * 10 + r)
                assert reply.status_code == 200, reply.text
                arm = "control" if reply.headers["X-Model-Variant"] == control else "candidate"
                if rng.random() < CLICK_RATE[arm]:
                    token = reply.headers["X-Exposure-Token"]
                    clicks.append({"event_id": f"h{u}-{r}", "type": "click", "exposure_token": token})
            if clicks:
                assert stack.feedback(red, clicks, key=False).status_code == 202
                sent_honest += len(clicks)
        # team B beside it: keyed clicks by request id
        blue_ids = [stack.infer(blue, user=f"b{i}").headers["X-Request-Id"] for i in range(20)]
        blue_events = [{"event_id": f"b{i}", "type": "click", "request_id": rid} for i, rid in enumerate(blue_ids)]
        assert stack.feedback(blue, blue_events).status_code == 202
        # the attacker: 400 fake users, one request each
        fake = [stack.infer(red, user=f"sybil-{i}", seed=i) for i in range(400)]
        on_candidate = [r.headers["X-Exposure-Token"] for r in fake if r.headers["X-Model-Variant"] != control]
        assert len(on_candidate) > 150
        forged = [{"event_id": f"s{i}", "type": "click", "exposure_token": t} for i, t in enumerate(on_candidate)]
        one = on_candidate[0]
        forged += [{"event_id": f"c{i}", "type": "conversion", "exposure_token": one} for i in range(2000)]
        forged += [{"event_id": f"v{i}", "type": "value", "value": 1e9, "exposure_token": one} for i in range(2000)]
        post = stack.feedback(red, forged[:150], key=False)  # under 64 KiB: the batch is read, and refused
        assert post.status_code == 400 and post.json()["code"] == "one_unit_per_batch", post.text
        whole = stack.feedback(red, forged, key=False)  # the report's whole POST: refused before it is read
        assert whole.status_code == 413
        replays = stack.feedback(red, [forged[0], *forged[len(on_candidate) : len(on_candidate) + 100]], key=False)
        assert replays.status_code == 409 and replays.json()["code"] == "exposure_allowance_exceeded"
        counted = stack.metrics()
        assert 'gateway_feedback_refused_total{code="one_unit_per_batch",endpoint="red-ctr"} 150.0' in counted
        assert 'gateway_feedback_refused_total{code="exposure_allowance_exceeded",endpoint="red-ctr"} 101.0' in counted

        def stored():
            ingest.ingest_once(client)
            return (
                Exposure.objects.filter(experiment=red.experiment).count() == HONEST_USERS * REQUESTS_EACH + 400
                and Feedback.objects.filter(endpoint_name="blue-ctr", status="attributed").count() == 20
                and Feedback.objects.filter(endpoint_name="red-ctr").count() == sent_honest
            )

        wait_for(stored, timeout=60, what="every exposure, honest click and team B's click stored", interval=0.5)
        ingest.ingest_once(client)  # and nothing more comes
    assert not Feedback.objects.filter(endpoint_name="red-ctr").exclude(event_id__startswith="h").exists()
    result = services.experiment_analyze(experiment_id=red.experiment.pk)
    experiment = Experiment.objects.get(pk=red.experiment.pk)
    candidate = next(name for name in result["arms"] if name != control)
    print(
        f"\nunits {sum(a['units'] for a in result['arms'].values())} ({HONEST_USERS} honest), CTR control "
        f"{result['arms'][control]['ctr']:.3f} candidate {result['arms'][candidate]['ctr']:.3f}; "
        f"state {experiment.state}, decision {experiment.decision or '-'}"
    )
    assert result["arms"][candidate]["clicks"] < result["arms"][control]["clicks"]  # the sybils added none
    assert experiment.decision != "ship" and experiment.state in ("running", "decided")
    assert experiment.winner is None or experiment.winner.is_control
    assert Feedback.objects.filter(endpoint_name="blue-ctr", status="attributed").count() == 20  # team B: all of it
