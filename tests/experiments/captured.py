"""Captured traffic written straight into a columnar store (chdb), for dataset tests: an
endpoint in a running experiment, its captured requests and the clicks on them."""

import json
import uuid
from datetime import timedelta

import pytest

from experiments.models import Experiment
from experiments.reference import data as reference
from experiments.services import online as services
from experiments.store import columnar_store
from harness import factories

WINDOW_S = 600


@pytest.fixture
def column_store(settings):
    """A store of the test's own in chdb, also the one EXPERIMENT_STORE names (the API's)."""
    db = f"t_{uuid.uuid4().hex[:12]}"
    store = columnar_store("chdb", db=db)
    settings.EXPERIMENT_STORE, settings.EXPERIMENT_STORE_DB = "chdb", db
    yield store
    store.drop()


def inputs_json(log, i, *, sparse_name="sparse"):
    return json.dumps(
        [
            {"name": "dense", "shape": [1, reference.N_DENSE], "datatype": "FP32", "data": log.dense[i].tolist()},
            {
                "name": sparse_name,
                "shape": [1, reference.N_SPARSE],
                "datatype": "INT64",
                "data": log.sparse[i].tolist(),
            },
        ]
    )


def traffic(store, endpoint, experiment, start, n=200, clicks_every=3):
    """n captured requests over an hour from `start`, with clicks on every third (one of them
    after its window: late, no label), and a click of another team on the same request id."""
    log = reference.generate(n, seed=3)
    arms = list(experiment.arms.all())
    rows, events = [], []
    for i in range(n):
        t = start + timedelta(seconds=i * 3600 / n)
        rows.append(
            {
                "team": endpoint.team_id,
                "endpoint": endpoint.name,
                "experiment": experiment.pk,
                "variant": arms[i % 2].name,
                "propensity": 0.5,
                "request_id": f"q{i}",
                "unit": f"u{i}",
                "time": t,
                "signature": "dense:FP32:[13];sparse:INT64:[26]",
                "inputs": inputs_json(log, i),
            }
        )
        if i % clicks_every == 0:
            delay = WINDOW_S + 60 if i == 3 else 5
            events.append(
                {"event_id": f"c{i}", "type": "click", "request_id": f"q{i}", "time": t + timedelta(seconds=delay)}
            )
    store.write_captures(rows)
    store.write_exposures(
        [
            {
                "request_id": r["request_id"],
                "experiment": experiment.pk,
                "arm": arms[i % 2].pk,
                "unit_key": r["unit"],
                "time": r["time"],
            }
            for i, r in enumerate(rows)
        ]
    )
    store.write_feedback(team=endpoint.team, endpoint_name=endpoint.name, experiments=[experiment], events=events)
    return len([e for i, e in enumerate(events) if e["event_id"] != "c3"])


def serve(team, user, artifact_factory, name="ds-ep"):
    """(endpoint, its running experiment) of `team`: a stable and a candidate artifact, 50/50."""
    pool = factories.pool(team, ready_replicas=1)
    stable, candidate = artifact_factory(team, model_name=name), artifact_factory(team, model_name=name)
    endpoint = factories.endpoint(pool, stable, name=name, public=True)
    experiment = services.experiment_create(
        user=user, endpoint=endpoint, name=name, candidates=[candidate], attribution_window_s=WINDOW_S
    )
    Experiment.objects.filter(pk=experiment.pk).update(state="running")
    experiment.refresh_from_db()
    return endpoint, experiment


@pytest.fixture
def served(team_a, deployer, artifact_factory):
    return serve(team_a, deployer, artifact_factory)
