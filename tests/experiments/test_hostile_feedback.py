"""Experiment results no outsider can forge or stop, at the control plane:
each case below was reproduced against `make run` and fails on the code before it.

Real PostgreSQL and Redis (the stream the gateway writes), no mocks: feedback and stream
entries are what a hostile client or a broken writer would send."""

import json
import time
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from deployments.services.keys import inference_key_create
from experiments import tasks
from experiments.models import DeadLetter, Experiment, Exposure, Feedback
from experiments.services import ingest, ticks
from experiments.services import online as services
from experiments.services.retention import retention_run
from experiments.store import default_store
from gateway.contracts.feedback_rules import sign_exposure
from harness import factories
from monitoring.models import Alert
from tests.conftest import require_service

HUGE = "1" + "0" * 400  # 10^400: no float64 holds it


@pytest.fixture
def two_teams(team_a, team_b, deployer, artifact_factory):
    """Team A's public endpoint `ctr-a` and team B's keyed endpoint `ctr-b`, each running an experiment."""
    bob_deployer = factories.user("bea")
    factories.member(bob_deployer, team_b, "deployer")
    out = {}
    for team, user, name, public in ((team_a, deployer, "ctr-a", True), (team_b, bob_deployer, "ctr-b", False)):
        pool = factories.pool(team, ready_replicas=1)
        stable, candidate = artifact_factory(team, model_name=name), artifact_factory(team, model_name=name)
        endpoint = factories.endpoint(pool, stable, name=name, public=public)
        exp = services.experiment_create(user=user, endpoint=endpoint, name=f"exp-{name}", candidates=[candidate])
        services.experiment_start(user=user, experiment=exp)
        _, secret = inference_key_create(user=user, team=team, name=f"key-{name}")
        out[name] = {"endpoint": endpoint, "experiment": exp, "key": secret, "user": user}
    return out


def _expose(exp, request_ids, *, unit="u1", at=None):
    arm = exp.arms.get(is_control=False)
    default_store().write_exposures(
        [
            {"request_id": rid, "experiment": exp.pk, "arm": arm.pk, "unit_key": unit, "time": at or timezone.now()}
            for rid in request_ids
        ]
    )


def _post(client, endpoint, events, key=None):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {key}"} if key else {}
    return client.post(
        "/api/v1/feedback/",
        json.dumps({"endpoint": endpoint, "events": events}),
        content_type="application/json",
        **headers,
    )


@pytest.mark.django_db
def test_poison_values_are_a_400_at_the_api(two_teams, client):
    a = two_teams["ctr-a"]
    body = '{"endpoint": "ctr-a", "events": [{"event_id": "e1", "type": "value", "request_id": "r1", "value": VALUE}]}'
    for value in (HUGE, "1.7e308", "-1e10"):
        res = client.post(
            "/api/v1/feedback/",
            body.replace("VALUE", value),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {a['key']}",
        )
        assert res.status_code == 400, (value, res.content)
        assert "events[0].value" in res.json()["detail"] and "1e9" in res.json()["detail"]
    old = _post(
        client,
        "ctr-a",
        [{"event_id": "e2", "type": "click", "request_id": "r1", "time": "0001-01-01T00:00:00Z"}],
        a["key"],
    )
    assert old.status_code == 400 and "events[0].time" in old.json()["detail"]
    long_unit = _post(client, "ctr-a", [{"event_id": "e3", "type": "click", "unit_key": "u" * 30_000}], a["key"])
    assert long_unit.status_code == 400 and "events[0].unit_key" in long_unit.json()["detail"]
    assert Feedback.objects.count() == 0


@pytest.mark.django_db
def test_anonymous_and_cross_team_feedback_is_refused_even_on_a_public_endpoint(two_teams, client):
    a, b = two_teams["ctr-a"], two_teams["ctr-b"]
    _expose(a["experiment"], [f"r{i}" for i in range(5)])
    clicks = [{"event_id": f"c{i}", "type": "click", "unit_key": "u1"} for i in range(5)]
    anonymous = _post(client, "ctr-a", clicks)
    assert anonymous.status_code == 401 and "key of its team" in anonymous.json()["detail"]
    assert _post(client, "ctr-a", clicks, key=b["key"]).status_code == 401  # team B's key is nobody on ctr-a
    assert _post(client, "ctr-a", [{**clicks[0], "unit_key": "u" * 201}]).status_code == 401  # no key: 401 before 400
    assert Feedback.objects.count() == 0
    ok = _post(client, "ctr-a", clicks, key=a["key"])
    assert ok.status_code == 202 and ok.json()["attributed"] == 5


@pytest.mark.django_db
def test_exposure_tokens_authenticate_only_where_accepted_and_cannot_be_forged(two_teams, client):
    a = two_teams["ctr-a"]
    exp = a["experiment"]
    arm = exp.arms.get(is_control=False).name
    _expose(exp, ["r-tok"])
    token = sign_exposure(bytes.fromhex(exp.token_key), exp.public_id, "ctr-a", arm, "r-tok", time.time(), 3600, "u1")
    event = {"event_id": "t1", "type": "click", "exposure_token": token}
    assert _post(client, "ctr-a", [event]).status_code == 401  # the experiment does not accept tokens yet
    Experiment.objects.filter(pk=exp.pk).update(feedback_tokens=True)
    forged = sign_exposure(b"\0" * 32, exp.public_id, "ctr-a", arm, "r-tok", time.time(), 3600, "u1")
    assert _post(client, "ctr-a", [{**event, "exposure_token": forged}]).status_code == 401
    other_endpoint = sign_exposure(
        bytes.fromhex(exp.token_key), exp.public_id, "ctr-b", arm, "r-tok", time.time(), 3600, "u1"
    )
    assert _post(client, "ctr-a", [{**event, "exposure_token": other_endpoint}]).status_code == 401
    mixed = _post(client, "ctr-a", [event, {"event_id": "t2", "type": "click", "unit_key": "u1"}])
    assert mixed.status_code == 401  # a unit key needs the team's key, token or not
    res = _post(client, "ctr-a", [event])
    assert res.status_code == 202 and res.json()["attributed"] == 1
    assert Feedback.objects.get(event_id="t1").request_id == "r-tok"


@pytest.mark.django_db
def test_the_api_door_bounds_what_one_token_carries_like_the_gateways(two_teams, client):
    """The API takes the gateway's token rules (feedback_rules.check_tokens) and counts what
    earlier batches took from an exposure in the store: a replay is a 409 there too, a keyless
    batch is one unit's, an expired token or one of an ended experiment is refused; team B's
    feedback beside it is all stored."""
    a, b = two_teams["ctr-a"], two_teams["ctr-b"]
    exp = a["experiment"]
    Experiment.objects.filter(pk=exp.pk).update(feedback_tokens=True, attribution_window_s=600)
    arm = exp.arms.get(is_control=False).name
    _expose(exp, ["r1", "r2", "r3"])
    key = bytes.fromhex(exp.token_key)

    def token(rid, unit="u1", at=None, ttl=600):
        return sign_exposure(key, exp.public_id, "ctr-a", arm, rid, at or time.time(), ttl, unit)

    def click(i, tok, kind="click", **extra):
        return {"event_id": f"a{i}", "type": kind, "exposure_token": tok, **extra}

    assert _post(client, "ctr-a", [click(1, token("r1"))]).status_code == 202
    replay = _post(client, "ctr-a", [click(2, token("r1"))])  # another event id, the same exposure's click
    assert replay.status_code == 409 and replay.json()["code"] == "exposure_allowance_exceeded"
    assert "events[0].exposure_token" in replay.json()["detail"]
    keyed_replay = _post(client, "ctr-a", [click(3, token("r1"))], key=a["key"])
    assert keyed_replay.status_code == 409  # the team's key does not make a replay count
    many = _post(client, "ctr-a", [click(4, token("r2", "u2")), click(5, token("r3", "u3"))])
    assert many.status_code == 400 and many.json()["code"] == "one_unit_per_batch"
    expired = _post(client, "ctr-a", [click(6, token("r2", at=time.time() - 700))])
    assert expired.status_code == 401 and expired.json()["code"] == "exposure_token_expired"
    big = _post(client, "ctr-a", [click(7 + i, token("r2"), "value", value=4000) for i in range(3)])
    assert big.status_code == 409  # 12 000 in absolute value: more than one exposure carries
    b_ok = _post(client, "ctr-b", [{"event_id": "b1", "type": "click", "unit_key": "u1"}], key=b["key"])
    assert b_ok.status_code == 202
    Experiment.objects.filter(pk=exp.pk).update(state="stopped")  # ended: its tokens no longer count
    ended = _post(client, "ctr-a", [click(20, token("r3", "u3"))])
    assert ended.status_code == 401
    assert Feedback.objects.filter(team=a["endpoint"].team).count() == 1  # only the first click was taken
    assert Feedback.objects.filter(team=b["endpoint"].team).count() == 1


@pytest.mark.django_db
def test_ids_are_scoped_per_team_and_duplicates_leak_nothing(two_teams, client):
    a, b = two_teams["ctr-a"], two_teams["ctr-b"]
    # the same client-chosen request ids in both tenants: each keeps its own exposures
    _expose(a["experiment"], [f"req-{i}" for i in range(10)], unit="ua")
    _expose(b["experiment"], [f"req-{i}" for i in range(10)], unit="ub")
    assert Exposure.objects.filter(request_id="req-3").count() == 2
    # an attacker (team A) pre-claims event ids evt-0..99; team B's own evt-5 is not a duplicate
    claimed = _post(
        client,
        "ctr-a",
        [{"event_id": f"evt-{i}", "type": "click", "request_id": f"req-{i}"} for i in range(10)],
        a["key"],
    )
    assert claimed.json()["attributed"] == 10
    mine = _post(
        client,
        "ctr-b",
        [{"event_id": f"evt-{i}", "type": "click", "request_id": f"req-{i}"} for i in range(10)],
        b["key"],
    )
    assert mine.json() == {"received": 10, "duplicates": 0, "attributed": 10, "late": 0, "unknown": 0, "refused": 0}
    b_arm = b["experiment"].arms.get(is_control=False)
    assert Feedback.objects.filter(arm=b_arm, status="attributed").count() == 10
    # team A's clicks by B's request ids never reach B's experiment
    assert Feedback.objects.filter(team=a["endpoint"].team, experiment=b["experiment"]).count() == 0


@pytest.mark.django_db
def test_a_click_dated_before_its_impression_is_not_attributed(two_teams, client):
    a = two_teams["ctr-a"]
    _expose(a["experiment"], ["r-now"])
    before = (timezone.now() - timedelta(hours=1)).isoformat()
    res = _post(
        client, "ctr-a", [{"event_id": "early", "type": "click", "request_id": "r-now", "time": before}], a["key"]
    )
    assert res.json()["unknown"] == 1 and res.json()["attributed"] == 0


@pytest.fixture
def stream():
    require_service("redis")
    client = redis.Redis.from_url(settings.EXPOSURE_STREAM_URL)
    ingest.streams_delete(client)
    yield client
    ingest.streams_delete(client)


@pytest.mark.django_db
def test_a_poison_stream_entry_is_dead_lettered_and_never_blocks_the_stream(two_teams, stream):
    a, b = two_teams["ctr-a"], two_teams["ctr-b"]
    exp_b = b["experiment"]
    arm_b = exp_b.arms.get(is_control=False).name
    now = time.time()
    stream.xadd(ingest.EXPOSURE_STREAM, {"n": 1, "b": json.dumps([["rb1", exp_b.public_id, arm_b, "ub", now, 0.5]])})
    stream.xadd(ingest.EXPOSURE_STREAM, {"n": 1, "b": "{not json"})
    stream.xadd(ingest.EXPOSURE_STREAM, {"n": 1, "b": json.dumps([["rb2", exp_b.public_id, arm_b, "ub", now, 0.5]])})
    poison = '[{"event_id": "p1", "type": "value", "request_id": "ra", "value": ' + HUGE + "}]"
    past = int((now - 10) * 1000)
    stream.xadd(ingest.FEEDBACK_STREAM, {"e": "ctr-a", "k": "k1", "b": poison}, id=f"{past}-1")
    good = json.dumps([{"event_id": "g1", "type": "click", "request_id": "rb1"}])
    stream.xadd(ingest.FEEDBACK_STREAM, {"e": "ctr-b", "k": "k2", "b": good}, id=f"{past}-2")
    unkeyed = json.dumps([{"event_id": "g2", "type": "click", "unit_key": "ub"}])
    stream.xadd(ingest.FEEDBACK_STREAM, {"e": "ctr-b", "k": "", "b": unkeyed}, id=f"{past}-3")

    totals = ingest.ingest_once(stream)
    assert totals["exposures"] == 2 and totals["dead_letters"] == 1
    assert totals["attributed"] == 1 and totals["invalid"] == 2
    reasons = sorted(d.reason for d in DeadLetter.objects.all())
    assert len(reasons) == 3 and any("1e9" in r for r in reasons) and any("exposure_token" in r for r in reasons)
    assert Alert.objects.filter(kind="experiment_dead_letter").exists()
    # acknowledged and trimmed: nothing is left to replay, and the stream holds no memory for it
    assert stream.xlen(ingest.EXPOSURE_STREAM) == 0 and stream.xlen(ingest.FEEDBACK_STREAM) == 0
    assert ingest.ingest_once(stream)["attributed"] == 0
    # the experiment whose stream carried the poison still analyses
    result = services.experiment_analyze(experiment_id=exp_b.pk)
    assert result["arms"][arm_b]["clicks"] == 1
    del a


@pytest.mark.django_db
def test_streams_are_trimmed_after_acknowledgement_under_a_flood(two_teams, stream):
    exp_b = two_teams["ctr-b"]["experiment"]
    arm_b = exp_b.arms.get(is_control=False).name
    now = time.time()
    for i in range(300):
        records = [[f"f{i}-{j}", exp_b.public_id, arm_b, f"u{j}", now, None] for j in range(20)]
        stream.xadd(ingest.EXPOSURE_STREAM, {"n": 20, "b": json.dumps(records)})
    before = stream.memory_usage(ingest.EXPOSURE_STREAM)
    assert ingest.ingest_exposures(stream)["exposures"] == 6000
    assert stream.xlen(ingest.EXPOSURE_STREAM) == 0
    assert (stream.memory_usage(ingest.EXPOSURE_STREAM) or 0) < before / 10


@pytest.mark.django_db
def test_feedback_rate_per_key_bounds_the_rows_a_flood_adds(two_teams, client, settings):
    settings.FEEDBACK_EVENTS_PER_S_PER_KEY = 200
    a = two_teams["ctr-a"]
    statuses = []
    t0 = time.time()
    for i in range(10):
        events = [{"event_id": f"fl-{i}-{j}", "type": "click", "unit_key": f"nobody-{j}"} for j in range(100)]
        statuses.append(_post(client, "ctr-a", events, a["key"]).status_code)
    seconds = int(time.time()) - int(t0) + 1
    assert 429 in statuses
    assert Feedback.objects.count() <= 200 * seconds  # the flood's rows are bounded by the rate
    res = _post(client, "ctr-a", [{"event_id": "x", "type": "click", "unit_key": "u"}] * 1, a["key"])
    assert res.status_code in (202, 429) and ("Retry-After" in res.headers) == (res.status_code == 429)


@pytest.mark.django_db
def test_retention_deletes_old_unknown_feedback_and_ended_experiments_rows(two_teams, client):
    a = two_teams["ctr-a"]
    _post(
        client, "ctr-a", [{"event_id": f"n{i}", "type": "click", "unit_key": f"nobody-{i}"} for i in range(5)], a["key"]
    )
    _expose(a["experiment"], ["keep"])
    assert Feedback.objects.filter(status="unknown").count() == 5
    assert retention_run(now=timezone.now() + timedelta(days=8))["unknown_feedback"] == 5
    assert Exposure.objects.filter(request_id="keep").exists()  # a running experiment's rows stay


@pytest.mark.django_db
def test_extreme_values_cannot_stop_analysis_and_one_broken_experiment_never_skips_another(two_teams, client):
    a, b = two_teams["ctr-a"], two_teams["ctr-b"]
    exp_a, exp_b = a["experiment"], b["experiment"]
    _expose(exp_a, ["ra1", "ra2"])
    default_store().write_feedback(  # rows written before the bounds existed: PostgreSQL's float SUM overflows
        team=a["endpoint"].team,
        endpoint_name="ctr-a",
        experiments=[exp_a],
        events=[
            {
                "event_id": f"big{i}",
                "type": "value",
                "value": 1.7e308,
                "request_id": f"ra{i + 1}",
                "time": timezone.now(),
            }
            for i in range(2)
        ],
    )
    assert services.experiment_analyze(experiment_id=exp_a.pk)["arms"]  # numeric sums: no overflow, no 500
    page = client
    page.force_login(a["user"])
    assert page.get(f"/experiments/{exp_a.pk}/").status_code == 200
    # break team A's experiment for good (its control arm is gone); team B's is analysed all the same
    exp_a.arms.filter(is_control=True).delete()
    tick = ticks.experiments_analyze_all()
    assert tick["analysed"] == 1 and tick["failed"] == 1
    exp_a.refresh_from_db()
    exp_b.refresh_from_db()
    assert exp_a.analysis_error and exp_b.analyzed_at and not exp_b.analysis_error
    assert Alert.objects.filter(kind="experiment_analysis_failed", endpoint="ctr-a").exists()


@pytest.mark.django_db
def test_every_running_experiment_is_analysed_each_tick(team_a, deployer, artifact_factory):
    pool = factories.pool(team_a, ready_replicas=1)
    for i in range(50):
        stable, candidate = artifact_factory(team_a), artifact_factory(team_a)
        endpoint = factories.endpoint(pool, stable, name=f"many-{i}")
        exp = services.experiment_create(user=deployer, endpoint=endpoint, name=f"e{i}", candidates=[candidate])
        services.experiment_start(user=deployer, experiment=exp)
    tick = tasks.analyze()  # the beat task's body: every running experiment, not the first 20
    assert tick == {"running": 50, "analysed": 50, "failed": 0, "left": 0, "ship_moved": 0}
    assert not Experiment.objects.filter(state="running", analyzed_at__isnull=True).exists()
