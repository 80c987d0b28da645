"""The columnar store (ClickHouse's engine in this process, chdb) behind the ExposureStore
interface: the same verdicts as the PostgreSQL store on the same batches, duplicates counted
once, late and unknown events, two teams' event ids apart, and the per-arm sufficient
statistics of every running experiment in one query per tick."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from experiments import analysis
from experiments.models import Experiment
from experiments.services import online as services
from experiments.store import PostgresStore, columnar_store
from harness import factories


@pytest.fixture
def column_store(settings):
    store = columnar_store("chdb", db=f"t_{uuid.uuid4().hex[:12]}")
    yield store
    store.drop()


def _running(team, user, artifact_factory, name, window_s=600):
    pool = factories.pool(team, ready_replicas=1)
    stable, candidate = artifact_factory(team, model_name=name), artifact_factory(team, model_name=name)
    endpoint = factories.endpoint(pool, stable, name=name, public=True)
    experiment = services.experiment_create(
        user=user, endpoint=endpoint, name=name, candidates=[candidate], attribution_window_s=window_s
    )
    now = datetime.now(UTC)
    Experiment.objects.filter(pk=experiment.pk).update(state="running", started_at=now - timedelta(hours=1))
    experiment.refresh_from_db()
    return endpoint, experiment


def _exposures(experiment, units, per_unit, t0, prefix):
    arms = list(experiment.arms.all())
    return [
        {
            "request_id": f"{prefix}-{a.pk}-{u}-{j}",
            "experiment": experiment.pk,
            "arm": a.pk,
            "unit_key": f"u{u}",
            "time": t0,
            "score": 0.5,
            "team": experiment.endpoint.team_id,
        }
        for a in arms
        for u in range(units)
        for j in range(per_unit)
    ]


def _batch(rows, t0):
    events = [
        {"event_id": f"c-{i}", "type": "click", "value": 1.0, "request_id": r["request_id"], "time": t0}
        for i, r in enumerate(rows[::3])
    ]
    events += [  # late: an hour after its exposure, the window is 10 minutes
        {
            "event_id": "late-1",
            "type": "click",
            "value": 1.0,
            "request_id": rows[1]["request_id"],
            "time": t0 + timedelta(hours=1),
        },
        {"event_id": "unknown-1", "type": "click", "value": 1.0, "request_id": "no-such-request", "time": t0},
        {
            "event_id": "before-1",
            "type": "click",
            "value": 1.0,
            "request_id": rows[2]["request_id"],
            "time": t0 - timedelta(hours=1),
        },
        {"event_id": "unit-1", "type": "conversion", "value": 1.0, "unit_key": "u3", "time": t0 + timedelta(seconds=5)},
        {"event_id": "value-1", "type": "value", "value": 12.5, "request_id": rows[4]["request_id"], "time": t0},
        {"event_id": "c-0", "type": "click", "value": 1.0, "request_id": rows[0]["request_id"], "time": t0},  # repeat
    ]
    return events


@pytest.mark.django_db
def test_same_verdicts_as_postgres_and_duplicates_once(column_store, team_a, deployer, artifact_factory):
    endpoint, experiment = _running(team_a, deployer, artifact_factory, "col-a")
    t0 = datetime.now(UTC) - timedelta(hours=2)
    rows = _exposures(experiment, 20, 2, t0, "r")
    column_store.write_exposures(rows)
    column_store.write_exposures(rows[:10])  # a replay (ingest died before its ack): counted once
    PostgresStore().write_exposures(rows)
    events = _batch(rows, t0)
    got = column_store.write_feedback(team=team_a, endpoint_name=endpoint.name, experiments=[experiment], events=events)
    want = PostgresStore().write_feedback(
        team=team_a, endpoint_name=endpoint.name, experiments=[experiment], events=events
    )
    assert got.as_dict() == want.as_dict()
    assert got.late == 1 and got.unknown == 2 and got.duplicates == 1 and got.attributed > 10
    again = column_store.write_feedback(
        team=team_a, endpoint_name=endpoint.name, experiments=[experiment], events=events
    )
    assert again.duplicates == len(events) and again.attributed == 0
    sums, extras, counts = column_store.arm_sums(experiment)
    pg_sums, pg_extras, pg_counts = PostgresStore().arm_sums(experiment)
    for arm in sums:
        assert {k: float(v) for k, v in sums[arm].items()} == {k: float(v) for k, v in pg_sums[arm].items()}
        assert extras[arm] == pg_extras[arm]
    assert counts == pg_counts
    # unit u3 was exposed in both arms at the same instant: its conversion goes, in every store,
    # to the exposure with the greatest request id (a tie broken by the data, not by storage order)
    tie_arm = max((r for r in rows if r["unit_key"] == "u3"), key=lambda r: r["request_id"])["arm"]
    assert {arm: e.get("conversions", 0) for arm, e in extras.items()} == {
        a.pk: int(a.pk == tie_arm) for a in experiment.arms.all()
    }, (extras, tie_arm)


@pytest.mark.django_db
def test_teams_event_ids_are_their_own(column_store, team_a, team_b, deployer, artifact_factory):
    endpoint_a, exp_a = _running(team_a, deployer, artifact_factory, "col-ta")
    user_b = factories.user("bob-col")
    factories.member(user_b, team_b, "deployer")
    endpoint_b, exp_b = _running(team_b, user_b, artifact_factory, "col-tb")
    t0 = datetime.now(UTC) - timedelta(minutes=5)
    rows_a, rows_b = _exposures(exp_a, 5, 1, t0, "a"), _exposures(exp_b, 5, 1, t0, "b")
    column_store.write_exposures(rows_a + rows_b)
    same_ids = [{"event_id": "e-1", "type": "click", "value": 1.0, "request_id": rows_a[0]["request_id"], "time": t0}]
    a = column_store.write_feedback(team=team_a, endpoint_name=endpoint_a.name, experiments=[exp_a], events=same_ids)
    # team B sends the same event id citing team A's request: a fresh event of B's, matching nothing of B's
    b = column_store.write_feedback(team=team_b, endpoint_name=endpoint_b.name, experiments=[exp_b], events=same_ids)
    assert (a.attributed, a.duplicates) == (1, 0)
    assert (b.unknown, b.duplicates, b.attributed) == (1, 0, 0)
    assert column_store.arm_sums(exp_b)[2]["attributed"] == 0


@pytest.mark.django_db
def test_token_allowance_and_ended_experiment(column_store, team_a, deployer, artifact_factory):
    endpoint, experiment = _running(team_a, deployer, artifact_factory, "col-tok")
    t0 = datetime.now(UTC) - timedelta(minutes=5)
    rows = _exposures(experiment, 2, 1, t0, "t")
    column_store.write_exposures(rows)
    rid = rows[0]["request_id"]
    tok = {"request_id": rid, "token_experiment": experiment.pk, "time": t0, "value": 1.0}
    first = column_store.write_feedback(
        team=team_a,
        endpoint_name=endpoint.name,
        experiments=[experiment],
        events=[{**tok, "event_id": "k1", "type": "click"}, {**tok, "event_id": "k2", "type": "click"}],
    )
    later = column_store.write_feedback(
        team=team_a,
        endpoint_name=endpoint.name,
        experiments=[experiment],
        events=[{**tok, "event_id": "k3", "type": "click"}, {**tok, "event_id": "k4", "type": "conversion"}],
    )
    ended = column_store.write_feedback(
        team=team_a,
        endpoint_name=endpoint.name,
        experiments=[experiment],
        events=[{**tok, "event_id": "k5", "type": "conversion", "refused": True}],
    )
    assert (first.attributed, first.refused) == (1, 1)  # one click per exposure
    assert (later.attributed, later.refused) == (1, 1)  # the click was carried before; a conversion still fits
    assert (ended.refused, ended.attributed) == (0 + 1, 0)


@pytest.mark.django_db
def test_stats_of_many_experiments_in_one_pass(column_store, team_a, deployer, artifact_factory):
    experiments = [_running(team_a, deployer, artifact_factory, f"col-m{i}")[1] for i in range(3)]
    t0 = datetime.now(UTC) - timedelta(minutes=5)
    for i, experiment in enumerate(experiments):
        column_store.write_exposures(_exposures(experiment, 4 + i, 2, t0, f"m{i}"))
    every = column_store.arm_sums_many(experiments)
    for i, experiment in enumerate(experiments):
        sums, _, _ = every[experiment.pk]
        for arm_sums in sums.values():
            assert arm_sums["units"] == 4 + i and arm_sums["n"] == 2 * (4 + i) and arm_sums["c"] == 0
        assert set(sums) == set(experiment.arms.values_list("pk", flat=True))
    assert set(analysis.SUMS) == set(next(iter(every[experiments[0].pk][0].values())))
