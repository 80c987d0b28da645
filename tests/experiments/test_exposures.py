"""Exposures and feedback through a real gateway process in front of a real tritonserver,
Redis Streams in between, and the control plane's ingest into PostgreSQL.

The first test is fast (no processes): the hot-path buffer is bounded and its drops are
counted, never silent."""

import asyncio
import hashlib
import io
import json
import time

import pytest
import redis
import requests
from django.conf import settings
from django.core.management import call_command
from prometheus_client import REGISTRY

from deployments.services.route_changes import route_changed
from experiments.models import Experiment, Exposure, Feedback
from experiments.services import ingest
from experiments.services import online as services
from gateway.telemetry.exposures import ExposureLog, first_score
from harness import factories
from harness.gateway import start_gateway, start_triton, stop_gateway
from harness.triton_models import SIGNATURE, ctr_model, infer_body
from tests.conftest import require_service
from tests.gateway.conftest import require_triton


def _dropped(reason):
    return REGISTRY.get_sample_value("gateway_exposures_dropped_total", {"reason": reason}) or 0.0


def test_exposure_buffer_is_bounded_and_drops_are_counted():
    log = ExposureLog("redis://127.0.0.1:1/0", capacity=3, batch=2)  # nothing listens on port 1
    before = _dropped("buffer_full")
    for i in range(5):
        log.record(f"r{i}", "exp-1", "ep", "v1-onnx", "u1", b'{"outputs":[{"data":[0.25]}]}')
    assert len(log.buffer) == 3 and _dropped("buffer_full") - before == 2
    stream_before = _dropped("stream_error")
    assert asyncio.run(log.flush()) == 0  # the stream is down: records go back, none lost while they fit
    assert len(log.buffer) == 3 and _dropped("stream_error") == stream_before
    off = ExposureLog(None)
    off_before = _dropped("no_stream")
    off.record("r", "exp-1", "ep", "arm", "u", None)
    assert _dropped("no_stream") - off_before == 1 and not off.buffer
    assert first_score(b'{"outputs":[{"data":[0.25]}]}') == 0.25 and first_score(b"\x00") is None


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_gateway_records_exposures_and_relays_feedback(tmp_path, team_a, deployer, artifact_factory):
    require_service("redis")
    require_triton()
    pool = factories.pool(team_a, ready_replicas=1)
    stable, candidate = artifact_factory(team_a), artifact_factory(team_a)
    endpoint = factories.endpoint(pool, stable, name="exp-ep", public=True)
    experiment = services.experiment_create(
        user=deployer, endpoint=endpoint, name="gw", candidates=[candidate], attribution_window_s=600
    )
    Experiment.objects.filter(pk=experiment.pk).update(state="running", feedback_tokens=True)
    route_changed()  # a bulk update bypasses the signal the cached route table waits for
    experiment.refresh_from_db()
    secret = "mpk_feedback_test_key_0123456789"  # the team's key: a public endpoint's feedback needs one
    key_doc = {
        "id": "k1",
        "prefix": "mpk_feed",
        "sha256": hashlib.sha256(secret.encode()).hexdigest(),
        "team": "team-a",
    }
    arms = list(experiment.arms.all())
    client = redis.Redis.from_url(settings.EXPOSURE_STREAM_URL)
    ingest.streams_delete(client)

    repo = tmp_path / "repo"
    ctr_model(repo, "m1", seed=7)
    ctr_model(repo, "m2", seed=8)
    triton = start_triton(tmp_path / "triton", repo, ["m1", "m2"])
    routes = tmp_path / "routes.json"
    variants = [
        {
            "name": arm.name,
            "model_version": "1",
            "triton_model": model,
            "role": "stable" if arm.is_control else "arm",
            "weight_bp": arm.allocation_bp,
            "replicas": [triton.http_url],
            "signature": SIGNATURE,
        }
        for arm, model in zip(arms, ("m1", "m2"))
    ]
    routes.write_text(
        json.dumps(
            {
                "version": "x1",
                "keys": [key_doc],
                "endpoints": [
                    {
                        "name": "exp-ep",
                        "timeout_ms": 3000,
                        "salt": experiment.salt,
                        "experiment": experiment.public_id,
                        "exposure_token_key": experiment.token_key,
                        "auth": {"public": True, "keys": ["k1"]},
                        "variants": variants,
                    }
                ],
            }
        )
    )
    proc, port = start_gateway(routes, tmp_path, GATEWAY_EXPOSURE_STREAM_URL=settings.EXPOSURE_STREAM_URL)
    try:
        url = f"http://127.0.0.1:{port}"
        served = {}
        with requests.Session() as s:
            for u in range(40):
                for _ in range(2):
                    r = s.post(
                        f"{url}/v2/models/exp-ep/infer",
                        data=infer_body(seed=u),
                        headers={"X-User-Id": f"user-{u}"},
                        timeout=10,
                    )
                    assert r.status_code == 200, r.text
                    rid = r.headers["X-Request-Id"]
                    served[rid] = (f"user-{u}", r.headers["X-Model-Variant"])
            # Sticky: each user saw one arm; both arms were used.
            assert len({(u, v) for u, v in served.values()}) == 40 and len({v for _, v in served.values()}) == 2
            assert r.headers["X-Exposure-Token"]  # this experiment accepts exposure tokens: every reply has one
            # the unit is every exposure's: a 30 KB X-User-Id is refused at the door (it added 32.6 MB to Redis per 1 000)
            long = s.post(f"{url}/v2/models/exp-ep/infer", data=infer_body(seed=1), headers={"X-User-Id": "u" * 30_000})
            assert long.status_code == 400 and "X-User-Id" in long.json()["error"]
            events = [{"event_id": f"ev-{rid}", "type": "click", "request_id": rid} for rid in list(served)[:30]]
            key = {"Authorization": f"Bearer {secret}"}
            bad = s.post(
                f"{url}/v2/feedback",
                json={"endpoint": "exp-ep", "events": [{"event_id": "x", "type": "like", "request_id": "r"}]},
                headers=key,
                timeout=5,
            )
            assert bad.status_code == 400 and "events[0].type" in bad.json()["error"] and bad.headers["X-Request-Id"]
            huge = '{"endpoint": "exp-ep", "events": [{"event_id": "v", "type": "value", "request_id": "r", "value": 1%s}]}'
            poison = s.post(f"{url}/v2/feedback", data=huge % ("0" * 400), headers=key, timeout=5)
            assert poison.status_code == 400 and "events[0].value" in poison.json()["error"]
            # a public endpoint's feedback needs the team's key (or exposure tokens): one anonymous request decided it before
            anonymous = s.post(f"{url}/v2/feedback", json={"endpoint": "exp-ep", "events": events}, timeout=5)
            assert anonymous.status_code == 401 and "key of its team" in anonymous.json()["error"]
            for _ in range(2):  # a retried batch
                ok = s.post(f"{url}/v2/feedback", json={"endpoint": "exp-ep", "events": events}, headers=key, timeout=5)
                assert ok.status_code == 202 and ok.json() == {"accepted": 30}
            token = r.headers["X-Exposure-Token"]
            forged = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
            tok = {"event_id": "tok-1", "type": "click", "exposure_token": token}
            bad_tok = s.post(
                f"{url}/v2/feedback", json={"endpoint": "exp-ep", "events": [{**tok, "exposure_token": forged}]}
            )
            assert bad_tok.status_code == 401
            assert s.post(f"{url}/v2/feedback", json={"endpoint": "exp-ep", "events": [tok]}).status_code == 202
        deadline = time.monotonic() + 10
        totals = {"exposures": 0, "attributed": 0, "duplicates": 0}
        while time.monotonic() < deadline and (
            totals["exposures"] < 80 or totals["attributed"] + totals["duplicates"] < 61
        ):
            for k, v in ingest.ingest_once(client).items():
                if k in totals:
                    totals[k] += v
            time.sleep(0.2)
        assert totals == {"exposures": 80, "attributed": 31, "duplicates": 30}
        stored = {e.request_id: (e.unit_key, e.arm.name, e.score) for e in Exposure.objects.select_related("arm")}
        assert {rid: v[:2] for rid, v in stored.items()} == served
        assert all(v[2] is not None and 0.0 <= v[2] <= 1.0 for v in stored.values())  # the score came along (gzip too)
        assert Feedback.objects.filter(status="attributed").count() == 31
        assert Feedback.objects.get(event_id="tok-1").request_id == rid  # the token's own request id
        # The demo's simulator: ranking traffic through the gateway, clicks from the ground truth, fed back
        # without a key by exposure token (the experiment accepts them).
        out = io.StringIO()
        call_command("simulate_traffic", endpoint="exp-ep", gateway=url, seconds=3, users=50, k=5, stdout=out)
        assert "0 errors" in out.getvalue(), out.getvalue()
        for _ in range(50):  # feedback waits ingest.FEEDBACK_DELAY_S for its exposures
            ingest.ingest_once(client)
            if Feedback.objects.filter(event_id__startswith="sim-", status="attributed").exists():
                break
            time.sleep(0.2)
        sim = Feedback.objects.filter(event_id__startswith="sim-")
        assert sim.exists() and not sim.exclude(status="attributed").exists()
        assert Exposure.objects.count() > 80
    finally:
        stop_gateway(proc)
        triton.stop()
