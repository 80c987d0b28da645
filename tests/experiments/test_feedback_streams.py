"""The feedback ingest is bounded in events per run and fair across sources (real Redis and
PostgreSQL, the gateway's own relay writing the streams; no processes).

Team A floods its own key's stream; team B sends one keyed click. Whatever A queued, B's
click is attributed by the first run that finds it ready, A's events are taken at most a
run's budget at a time, an entry larger than a share is committed in parts, and a run cut
off mid-entry (or run twice) stores nothing twice."""

import asyncio
import json
import time

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from experiments.models import Feedback
from experiments.selectors.streams import endpoint_lags, stream_lags
from experiments.services import feedback_streams, ingest
from experiments.services import online as services
from experiments.store import default_store
from gateway.contracts.feedback_rules import feedback_stream
from gateway.telemetry.exposures import ExposureLog
from gateway.telemetry.feedback_stream import FeedbackRelay
from harness import factories
from registry.models import Role
from tests.conftest import require_service

pytestmark = pytest.mark.django_db(transaction=True)
PAST_MS = int((time.time() + 3600) * 1000)  # every entry is ready (the cutoff is past them all)


@pytest.fixture
def client():
    require_service("redis")
    conn = redis.Redis.from_url(settings.EXPOSURE_STREAM_URL)
    ingest.streams_delete(conn)
    yield conn
    ingest.streams_delete(conn)


@pytest.fixture
def teams(team_a, team_b, deployer, artifact_factory):
    bea = factories.user("bea")
    factories.member(bea, team_b, Role.DEPLOYER)
    out = {}
    for team, user, name in ((team_a, deployer, "red"), (team_b, bea, "blue")):
        pool = factories.pool(team, ready_replicas=1)
        endpoint = factories.endpoint(pool, artifact_factory(team, model_name=name), name=name)
        exp = services.experiment_create(
            user=user, endpoint=endpoint, name=f"{name}-exp", candidates=[artifact_factory(team, model_name=name)]
        )
        services.experiment_start(user=user, experiment=exp)
        arm = exp.arms.get(is_control=False)
        out[name] = {"endpoint": endpoint, "experiment": exp, "arm": arm}
    return out


def expose(exp, arm, request_ids, unit="u"):
    now = timezone.now()
    default_store().write_exposures(
        [{"request_id": r, "experiment": exp.pk, "arm": arm.pk, "unit_key": unit, "time": now} for r in request_ids]
    )


def relay(endpoint: str, key_id: str, events: list) -> None:
    """Queue a batch the way the gateway's door does (gateway/telemetry/feedback_stream.py, its Lua script)."""

    async def go():
        log = ExposureLog(settings.EXPOSURE_STREAM_URL)
        try:
            relay = FeedbackRelay(log, floor_per_s=20, floor_burst=100)
            await relay.relay(endpoint, events, key_id, uses={}, expiries={}, experiment="")
        finally:
            await log.close()

    asyncio.run(go())


def clicks(prefix: str, n: int, rid: str = "r-red") -> list:
    return [{"event_id": f"{prefix}-{i}", "type": "conversion", "request_id": rid} for i in range(n)]


def test_a_flood_costs_its_own_stream_and_the_other_teams_click_goes_in_the_same_run(client, teams):
    red, blue = teams["red"], teams["blue"]
    expose(red["experiment"], red["arm"], ["r-red"])
    expose(blue["experiment"], blue["arm"], ["r-blue"])
    for i in range(12):  # 12 batches of 4 000 events on red's key: 96 entries of 500
        relay("red", "k-red", clicks(f"red{i}", 4000))
    relay("blue", "k-blue", [{"event_id": "b1", "type": "click", "request_id": "r-blue"}])
    assert client.xlen(feedback_stream("red", "k-red")) == 96
    budget = 5000
    first = feedback_streams.ingest_feedback(client, cutoff_ms=PAST_MS, budget=budget)
    assert Feedback.objects.get(event_id="b1").status == "attributed"  # the other team's click: this run
    assert first["received"] <= budget + 500  # a run's work is bounded in events, whatever waits
    assert Feedback.objects.filter(endpoint_name="red").count() == first["received"] - 1
    lags = endpoint_lags(stream_lags(client))
    assert lags["red"]["entries"] > 0 and lags["blue"]["entries"] == 0  # the backlog is red's alone
    runs = 1
    while client.xlen(feedback_stream("red", "k-red")):
        feedback_streams.ingest_feedback(client, cutoff_ms=PAST_MS, budget=budget)
        runs += 1
        assert runs < 30
    assert Feedback.objects.filter(endpoint_name="red").count() == 48_000  # every event once
    assert runs >= 48_000 // (budget + 500)


def test_an_entry_bigger_than_a_share_is_committed_in_parts_and_a_cut_off_run_stores_nothing_twice(client, teams):
    red = teams["red"]
    expose(red["experiment"], red["arm"], ["r-red"])
    events = clicks("big", 4000)
    # one entry of 4 000 events, as gateways before per-source streams wrote (no split at the door)
    client.xadd(ingest.FEEDBACK_STREAM, {"e": "red", "k": "k-red", "b": json.dumps(events)})
    totals = feedback_streams.ingest_feedback(client, cutoff_ms=PAST_MS, budget=1500)
    assert totals["received"] == 1500 and totals["parts"] == 1 and totals["batches"] == 0
    assert client.xpending(ingest.FEEDBACK_STREAM, ingest.GROUP)["pending"] == 1  # not acknowledged yet
    # a run cut off after its part was stored and before its progress was kept: the part comes again
    client.hset(
        feedback_streams.PARTS, f"{ingest.FEEDBACK_STREAM} {client.xrange(ingest.FEEDBACK_STREAM)[0][0].decode()}", 1000
    )
    again = feedback_streams.ingest_feedback(client, cutoff_ms=PAST_MS, budget=1500)
    assert again["duplicates"] == 500 and again["received"] == 1500
    while client.xlen(ingest.FEEDBACK_STREAM):
        feedback_streams.ingest_feedback(client, cutoff_ms=PAST_MS, budget=1500)
    assert Feedback.objects.filter(endpoint_name="red").count() == 4000
    assert not client.hlen(feedback_streams.PARTS)


def test_one_run_at_a_time(client, teams):
    lock = client.lock(ingest.LOCK, timeout=10)
    assert lock.acquire(blocking=False)
    try:
        assert ingest.ingest_once(client) == {"busy": "another ingest run is in progress"}
    finally:
        lock.release()
    assert "busy" not in ingest.ingest_once(client)


def test_each_run_records_each_endpoints_lag_and_alerts_the_one_past_the_threshold(client, teams, settings):
    from experiments.services import ingest_lag
    from monitoring.models import Alert, MetricSample

    settings.FEEDBACK_LAG_ALERT_S = 30
    old = f"{int((time.time() - 120) * 1000)}-0"  # red's oldest entry has waited two minutes
    client.xadd(feedback_stream("red", "k-red"), {"e": "red", "k": "k-red", "b": "[]"}, id=old)
    relay("blue", "k-blue", [{"event_id": "b1", "type": "click", "request_id": "r-blue"}])
    client.sadd("modelplane:feedback:streams", feedback_stream("red", "k-red"))
    lags = ingest_lag.lag_record(client)
    assert lags["red"]["lag_s"] >= 120 and lags["blue"]["lag_s"] < 30
    samples = dict(MetricSample.objects.filter(metric="feedback_lag_s").values_list("endpoint", "value"))
    assert samples["red"] >= 120 and samples["blue"] < 30
    assert MetricSample.objects.get(endpoint="red", metric="feedback_lag_s").variant == "feedback-ingest"
    alert = Alert.objects.get(kind="feedback_ingest_lag")
    assert alert.endpoint == "red" and alert.team == teams["red"]["endpoint"].team and "waited 12" in alert.reason
