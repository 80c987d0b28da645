"""Exposures and feedback through a real gateway process in front of a real tritonserver,
Redis Streams in between, and the control plane's ingest into PostgreSQL.

The first test is fast (no processes): the hot-path buffer is bounded and its drops are
counted, never silent."""

import asyncio
import io
import json
import time

import pytest
import redis
import requests
from django.conf import settings
from django.core.management import call_command
from prometheus_client import REGISTRY

from experiments.models import Experiment, Exposure, Feedback
from experiments.online import ingest
from experiments.services import experiments as services
from gateway.exposures import ExposureLog, first_score
from tests import factories
from tests.conftest import require_service
from tests.gateway.conftest import require_triton, start_triton
from tests.gateway.test_hostile import SIGNATURE, start_gateway, stop_gateway
from tests.gateway.triton_models import ctr_model, infer_body


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
    experiment = services.experiment_create(user=deployer, endpoint=endpoint, name="gw", candidates=[candidate],
                                            attribution_window_s=600)
    Experiment.objects.filter(pk=experiment.pk).update(state="running")
    experiment.refresh_from_db()
    arms = list(experiment.arms.all())
    client = redis.Redis.from_url(settings.EXPOSURE_STREAM_URL)
    client.delete(ingest.EXPOSURE_STREAM, ingest.FEEDBACK_STREAM)

    repo = tmp_path / "repo"
    ctr_model(repo, "m1", seed=7)
    ctr_model(repo, "m2", seed=8)
    triton = start_triton(tmp_path / "triton", repo, ["m1", "m2"])
    routes = tmp_path / "routes.json"
    variants = [{"name": arm.name, "model_version": "1", "triton_model": model, "role": "stable" if arm.is_control else "arm",
                 "weight_bp": arm.allocation_bp, "replicas": [triton.http_url], "signature": SIGNATURE}
                for arm, model in zip(arms, ("m1", "m2"))]
    routes.write_text(json.dumps({"version": "x1", "endpoints": [
        {"name": "exp-ep", "timeout_ms": 3000, "salt": experiment.salt, "experiment": experiment.public_id,
         "auth": {"public": True}, "variants": variants}]}))
    proc, port = start_gateway(routes, tmp_path, GATEWAY_EXPOSURE_STREAM_URL=settings.EXPOSURE_STREAM_URL)
    try:
        url = f"http://127.0.0.1:{port}"
        served = {}
        with requests.Session() as s:
            for u in range(40):
                for _ in range(2):
                    r = s.post(f"{url}/v2/models/exp-ep/infer", data=infer_body(seed=u), headers={"X-User-Id": f"user-{u}"}, timeout=10)
                    assert r.status_code == 200, r.text
                    rid = r.headers["X-Request-Id"]
                    served[rid] = (f"user-{u}", r.headers["X-Model-Variant"])
            # Sticky: each user saw one arm; both arms were used.
            assert len({(u, v) for u, v in served.values()}) == 40 and len({v for _, v in served.values()}) == 2
            events = [{"event_id": f"ev-{rid}", "type": "click", "request_id": rid} for rid in list(served)[:30]]
            bad = s.post(f"{url}/v2/feedback", json={"endpoint": "exp-ep", "events": [{"event_id": "x", "type": "like",
                                                                                      "request_id": "r"}]}, timeout=5)
            assert bad.status_code == 400 and "events[0].type" in bad.json()["error"] and bad.headers["X-Request-Id"]
            for _ in range(2):  # a retried batch
                ok = s.post(f"{url}/v2/feedback", json={"endpoint": "exp-ep", "events": events}, timeout=5)
                assert ok.status_code == 202 and ok.json() == {"accepted": 30}
        deadline = time.monotonic() + 10
        totals = {"exposures": 0, "attributed": 0, "duplicates": 0}
        while time.monotonic() < deadline and (totals["exposures"] < 80 or totals["attributed"] + totals["duplicates"] < 60):
            for k, v in ingest.ingest_once(client).items():
                if k in totals:
                    totals[k] += v
            time.sleep(0.2)
        assert totals == {"exposures": 80, "attributed": 30, "duplicates": 30}
        stored = {e.request_id: (e.unit_key, e.arm.name, e.score) for e in Exposure.objects.select_related("arm")}
        assert {rid: v[:2] for rid, v in stored.items()} == served
        assert all(v[2] is not None and 0.0 <= v[2] <= 1.0 for v in stored.values())  # the score came along (gzip too)
        assert Feedback.objects.filter(status="attributed").count() == 30
        # The demo's simulator: ranking traffic through the gateway, clicks from the ground truth, fed back.
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
