"""The durable log on a real nats-server (JetStream) between the gateway's writer and the
store (chdb): a store outage loses nothing, replays and duplicate event ids count once, late
feedback is late, and one team's subjects never reach another team's rows.

Each test has its own subject prefix (its own two streams), so runs beside other engineers'
on the shared server never meet; the streams are deleted afterwards."""

import asyncio
import json
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import redis
from django.conf import settings

from experiments.eventlog import nats_answers
from experiments.eventlog.reader import NatsReader
from experiments.models import DeadLetter, Experiment
from experiments.services import online as services
from experiments.services.log_ingest import ingest_log_once
from experiments.store import columnar_store
from gateway.contracts import log_contract
from gateway.telemetry.eventlog import NatsLog
from gateway.telemetry.exposures import ExposureLog
from gateway.telemetry.feedback_stream import FeedbackRelay
from harness import factories

NATS_URL = "nats://127.0.0.1:4222"


@pytest.fixture
def log_prefix():
    if not nats_answers(NATS_URL):
        pytest.fail("nats-server with JetStream must answer on 127.0.0.1:4222 (CI starts it)")
    prefix = f"t{uuid.uuid4().hex[:10]}"
    reader = NatsReader(NATS_URL, prefix)
    yield prefix, reader
    reader.delete_streams()
    reader.close()


@pytest.fixture
def column_store():
    store = columnar_store("chdb", db=f"t_{uuid.uuid4().hex[:12]}")
    yield store
    store.drop()


class DownStore:
    """A store that is down: every write fails (what a stopped ClickHouse answers)."""

    def __getattr__(self, name):
        def fail(*args, **kwargs):
            raise ConnectionError("the store is down")

        return fail


def _running(team, user, artifact_factory, name):
    pool = factories.pool(team, ready_replicas=1)
    stable = artifact_factory(team, model_name=name)
    candidate = artifact_factory(team, model_name=name)
    endpoint = factories.endpoint(pool, stable, name=name, public=True)
    experiment = services.experiment_create(
        user=user, endpoint=endpoint, name=name, candidates=[candidate], attribution_window_s=60
    )
    Experiment.objects.filter(pk=experiment.pk).update(
        state="running", started_at=datetime.now(UTC) - timedelta(hours=1)
    )
    experiment.refresh_from_db()
    return endpoint, experiment


def _publish_exposures(prefix, endpoint, experiment, team_label, n, captured=0):
    """What the gateway's ExposureLog does for `n` served replies: the real writer over NATS."""
    arms = [a.name for a in experiment.arms.all()]
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}).encode()

    async def go():
        log = ExposureLog(None, log=NatsLog(NATS_URL, prefix))
        log.teams = {endpoint.name: team_label}
        for i in range(n):
            capture = (0.5, body) if i < captured else None
            log.record(f"r{i}", experiment.public_id, endpoint.name, arms[i % 2], f"u{i}", None, None, capture)
        assert await log.flush() == n
        await log.close()

    asyncio.run(go())


def _relay_feedback(prefix, endpoint, team_label, events, key_id="k1"):
    """The gateway's feedback door after its checks: admitted in Redis, published on the log."""

    async def go():
        log = ExposureLog(settings.EXPOSURE_STREAM_URL, log=NatsLog(NATS_URL, prefix))
        log.teams = {endpoint.name: team_label}
        relay = FeedbackRelay(log, floor_per_s=20, floor_burst=100)
        await relay.relay(endpoint.name, events, key_id, uses={}, expiries={}, experiment="")
        await log.close()

    asyncio.run(go())


@pytest.mark.django_db(transaction=True)
def test_store_outage_loses_nothing_and_replays_count_once(
    log_prefix, column_store, team_a, deployer, artifact_factory
):
    prefix, reader = log_prefix
    endpoint, experiment = _running(team_a, deployer, artifact_factory, "log-a")
    _publish_exposures(prefix, endpoint, experiment, "team-a", 40, captured=4)
    past = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    clicks = [{"event_id": f"c{i}", "type": "click", "request_id": f"r{i}", "time": past} for i in range(0, 40, 2)]
    late = [{"event_id": "late", "type": "click", "request_id": "r1", "time": past}]
    _relay_feedback(prefix, endpoint, "team-a", clicks + late)
    _relay_feedback(prefix, endpoint, "team-a", clicks)  # a client's retry: the same event ids
    client = redis.Redis.from_url(settings.EXPOSURE_STREAM_URL)
    subject = log_contract.subject(prefix, log_contract.FEEDBACK, "team-a", endpoint.name, "k1")
    assert int(client.get(log_contract.backlog_key(subject))) == 2  # the door counted what it queued

    down = ingest_log_once(reader, store=DownStore(), redis_client=client)
    assert "store_down" in down and down["exposures"] == 0
    assert all(s["n"] == 0 for s in column_store.arm_sums(experiment)[0].values())  # nothing stored, all kept

    totals = {}
    for _ in range(20):  # the store is back: the log hands everything over (feedback waits for its exposures)
        got = ingest_log_once(reader, store=column_store, redis_client=client)
        assert "store_down" not in got, got
        for k, v in got.items():
            totals[k] = totals.get(k, 0) + v
        if totals.get("received", 0) >= 2 * len(clicks) + 1:
            break
        time.sleep(0.5)
    assert totals["exposures"] == 40 and totals["captures"] == 4
    assert totals["received"] == 2 * len(clicks) + 1 and totals["duplicates"] == len(clicks)
    assert totals["attributed"] == len(clicks) + 1
    sums, _, counts = column_store.arm_sums(experiment)
    assert sum(s["n"] for s in sums.values()) == 40 and sum(s["c"] for s in sums.values()) == len(clicks) + 1
    ingest_log_once(reader, store=column_store, redis_client=client)  # the backlog is read again after the acks
    assert int(client.get(log_contract.backlog_key(subject))) == 0
    captured = column_store.frame("SELECT request_id, propensity, signature FROM {db}.captures ORDER BY request_id")
    assert list(captured["request_id"]) == ["r0", "r1", "r2", "r3"] and set(captured["propensity"]) == {0.5}


@pytest.mark.django_db(transaction=True)
def test_a_teams_subject_cannot_reach_another_teams_rows(
    log_prefix, column_store, team_a, team_b, deployer, artifact_factory
):
    prefix, reader = log_prefix
    endpoint_a, experiment_a = _running(team_a, deployer, artifact_factory, "log-iso-a")
    # team B writes on its own subject, naming team A's endpoint and experiment
    _publish_exposures(prefix, endpoint_a, experiment_a, "team-b", 5)
    got = ingest_log_once(reader, store=column_store)
    assert got["exposures"] == 0 and got["dead_letters"] == 1
    assert DeadLetter.objects.filter(reason__contains="does not own").exists()
    sums, _, _ = column_store.arm_sums(experiment_a)
    assert all(s["n"] == 0 for s in sums.values())
    _publish_exposures(prefix, endpoint_a, experiment_a, "team-a", 5)  # its own team's: stored
    assert ingest_log_once(reader, store=column_store)["exposures"] == 5


@pytest.mark.django_db(transaction=True)
def test_the_api_door_publishes_on_the_log_like_the_gateways(
    log_prefix, column_store, team_a, deployer, artifact_factory, settings, api_for
):
    """With the log answering, the API's feedback door queues an admitted batch on the team's
    subject (202 {received, queued}); the reader checks and stores it like the gateway's."""
    prefix, reader = log_prefix
    settings.EVENT_LOG_URL, settings.EVENT_LOG_PREFIX = NATS_URL, prefix
    endpoint, experiment = _running(team_a, deployer, artifact_factory, "log-api")
    _publish_exposures(prefix, endpoint, experiment, "team-a", 10)
    past = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    clicks = [{"event_id": f"a{i}", "type": "click", "request_id": f"r{i}", "time": past} for i in range(0, 10, 2)]
    reply = api_for(deployer).post("/api/v1/feedback/", {"endpoint": endpoint.name, "events": clicks}, format="json")
    assert reply.status_code == 202 and reply.json() == {"received": 5, "queued": 1}, reply.content
    assert not column_store.frame("SELECT count() AS n FROM {db}.feedback")["n"][0]  # queued, not stored at the door
    totals = {}
    for _ in range(20):
        for k, v in ingest_log_once(reader, store=column_store).items():
            totals[k] = totals.get(k, 0) + v
        if totals.get("attributed", 0) >= 5:
            break
        time.sleep(0.5)
    assert totals["exposures"] == 10 and totals["attributed"] == 5 and not totals.get("dead_letters"), totals
    sums, _, _ = column_store.arm_sums(experiment)
    assert sum(s["c"] for s in sums.values()) == 5
