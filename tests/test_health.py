import pytest
from django.utils import timezone

from config.models import ComponentHeartbeat

pytestmark = pytest.mark.django_db
TOKEN = "health-token-for-tests"


@pytest.fixture
def client(client, settings):
    """A caller that may read the components: the health token (as make run's tooling sends it)."""
    settings.HEALTHZ_TOKEN = TOKEN
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {TOKEN}"
    return client


def test_anyone_reads_the_status_alone(settings, staff):
    """Anonymous /healthz listed child pids and the worker's host."""
    from django.test import Client

    settings.HEALTHZ_TOKEN = TOKEN
    assert Client().get("/healthz").json() == {"status": "ok"}
    assert Client(HTTP_AUTHORIZATION="Bearer wrong").get("/healthz").json() == {"status": "ok"}
    assert (
        Client(HTTP_AUTHORIZATION=f"Bearer {TOKEN}").get("/healthz").json()["components"]["database"]["state"] == "up"
    )
    staff_client = Client()
    staff_client.force_login(staff)
    assert "components" in staff_client.get("/healthz").json()
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    settings.HEALTHZ_EXPECT = ["worker"]
    down = Client().get("/healthz")
    assert down.status_code == 503 and down.json() == {"status": "degraded"}  # not which, nor the broker's address
    settings.HEALTHZ_TOKEN = ""  # no token configured: an empty bearer reads nothing either
    assert "components" not in Client(HTTP_AUTHORIZATION="Bearer ").get("/healthz").json()


def test_healthz_names_each_component(client):
    response = client.get("/healthz")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["status"] == "ok"
    assert body["components"]["database"]["state"] == "up"
    assert body["components"]["broker"]["state"] == "up"


def test_healthz_is_503_when_the_broker_does_not_answer(client, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["components"]["broker"]["state"] == "down"


def test_healthz_waits_for_expected_background_components(client, settings):
    settings.HEALTHZ_EXPECT = ["worker", "beat"]
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["components"]["worker"] == {"state": "down", "error": "RuntimeError: no heartbeat yet"}
    for name in ("worker", "beat"):
        ComponentHeartbeat.objects.create(name=name, seen_at=timezone.now())
    assert client.get("/healthz").status_code == 200
    ComponentHeartbeat.objects.filter(name="worker").update(seen_at=timezone.now() - timezone.timedelta(minutes=5))
    response = client.get("/healthz")
    assert response.status_code == 503 and "last heartbeat" in response.json()["components"]["worker"]["error"]


def test_heartbeat_task_records_worker_and_beat():
    from config.tasks import heartbeat

    heartbeat()
    assert set(ComponentHeartbeat.objects.values_list("name", flat=True)) == {"worker", "beat"}


@pytest.mark.integration
def test_healthz_asks_the_gateway_over_http_and_a_hung_gateway_reads_as_down(client, settings, tmp_path):
    """A real gateway process: up while it answers /v2/health/ready; frozen with SIGSTOP
    (the kernel still accepts its TCP connections, which is all the old check looked
    at) it is down within the probe's 1-s timeout; without a route table it is down too."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    import requests

    from serving.tritonserver import free_port

    routes = tmp_path / "routes.json"
    routes.write_text(json.dumps({"version": "h1", "endpoints": []}))
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway",
            "--workers",
            "1",
            "--routes-file",
            str(routes),
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
        ],
        cwd=settings.BASE_DIR,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{url}/v2/health/ready", timeout=0.5).status_code == 200:
                    break
            except requests.RequestException:
                time.sleep(0.05)
        settings.HEALTHZ_EXPECT = [f"gateway={url}"]
        body = client.get("/healthz").json()
        assert body["components"]["gateway"]["state"] == "up", body
        assert body["components"]["gateway"]["url"] == f"{url}/v2/health/ready"
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            response = client.get("/healthz")
            elapsed = time.monotonic() - t0
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        assert response.status_code == 503 and response.json()["components"]["gateway"]["state"] == "down"
        assert "timed out" in response.json()["components"]["gateway"]["error"]
        assert elapsed < 3
    finally:
        proc.terminate()
        proc.wait(10)
    # a gateway that answers but is not ready (its control plane never sent a table): down
    port = free_port()
    env = {**os.environ, "GATEWAY_ROUTES_URL": f"http://127.0.0.1:{free_port()}/api/v1/gateway/routes"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "--workers", "1", "--port", str(port), "--host", "127.0.0.1"],
        env=env,
        cwd=settings.BASE_DIR,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        settings.HEALTHZ_EXPECT = [f"gateway=http://127.0.0.1:{port}"]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "HTTP 503" not in client.get("/healthz").json()["components"][
            "gateway"
        ].get("error", ""):
            time.sleep(0.1)
        assert client.get("/healthz").json()["components"]["gateway"] == {
            "state": "down",
            "error": f"RuntimeError: GET http://127.0.0.1:{port}/v2/health/ready answered HTTP 503",
        }
    finally:
        proc.terminate()
        proc.wait(10)
    settings.HEALTHZ_EXPECT = [f"gateway=http://127.0.0.1:{free_port()}"]
    assert client.get("/healthz").json()["components"]["gateway"]["state"] == "down"  # nothing listening


def test_healthz_names_a_pool_replica_that_is_down(client, settings, team_a):
    """The pools component is the supervisor's heartbeat and what it recorded: a replica
    down (killed, not answering its probes) is a 503 naming the pool and the replica; a
    replica starting for the first time or retiring after a scale-down is not."""
    from deployments.models import PoolStatus, ReplicaStatus
    from harness import factories

    settings.HEALTHZ_EXPECT = ["pools"]
    ComponentHeartbeat.objects.create(name="pools", seen_at=timezone.now(), detail={"pools": 2})
    pool = factories.pool(team_a, "serving", ready_replicas=2)
    factories.pool(team_a, "fresh", replicas=1, status=PoolStatus.PENDING)
    factories.replica(factories.pool(team_a, "fresh2"), "r0", status=ReplicaStatus.STARTING)
    assert client.get("/healthz").status_code == 200
    why = "not answering: 2 probes failed over 4.3 s: timeout after 2.0 s"
    pool.replica_set.filter(name="r1").update(status=ReplicaStatus.DOWN, last_error=why)
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "degraded"
    pools = body["components"]["pools"]
    assert pools["state"] == "down" and pools["not_ready"] == {"serving": {"r1": f"down: {why}"}}
    assert pools["error"] == f"Degraded: pool serving: r1 down: {why}"
    # restarting after a death is not up either; retiring after a scale-down is fine
    pool.replica_set.filter(name="r1").update(status=ReplicaStatus.STARTING, restarts=1, last_error="killed")
    assert client.get("/healthz").json()["components"]["pools"]["not_ready"] == {"serving": {"r1": "starting: killed"}}
    pool.replica_set.filter(name="r1").update(status=ReplicaStatus.STOPPED, retiring_since=timezone.now())
    assert client.get("/healthz").status_code == 200


def test_the_feedback_component_is_down_while_an_endpoint_s_feedback_waits_too_long(client, settings):
    """The ingest's lag, read from the streams themselves (real Redis): an entry older than
    FEEDBACK_LAG_ALERT_S on one endpoint's stream makes /healthz 503 naming that endpoint."""
    import time

    import redis

    from experiments.services import ingest
    from gateway.contracts.feedback_rules import FEEDBACK_STREAMS, feedback_stream
    from tests.conftest import require_service

    require_service("redis")
    streams = redis.Redis.from_url(settings.EXPOSURE_STREAM_URL)
    ingest.streams_delete(streams)
    settings.HEALTHZ_EXPECT, settings.FEEDBACK_LAG_ALERT_S = ["feedback"], 30
    try:
        fresh, stale = feedback_stream("blue", "k2"), feedback_stream("red", "k1")
        streams.xadd(fresh, {"e": "blue", "k": "k2", "b": "[]"})
        streams.sadd(FEEDBACK_STREAMS, fresh)
        ok = client.get("/healthz")
        assert ok.status_code == 200 and ok.json()["components"]["feedback"]["waiting"]["blue"]["entries"] == 1
        streams.xadd(stale, {"e": "red", "k": "k1", "b": "[]"}, id=f"{int((time.time() - 45) * 1000)}-0")
        streams.sadd(FEEDBACK_STREAMS, stale)
        late = client.get("/healthz")
        component = late.json()["components"]["feedback"]
        assert late.status_code == 503 and component["state"] == "down"
        assert "feedback for red has waited 4" in component["error"]
        assert set(component["lagging"]) == {"red"} and component["lagging"]["red"]["lag_s"] >= 45
        streams.delete(stale)
        assert client.get("/healthz").status_code == 200  # the backlog taken: up again
    finally:
        ingest.streams_delete(streams)
