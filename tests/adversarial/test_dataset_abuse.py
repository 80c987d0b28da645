# ruff: noqa: F811  (the fixtures imported from tests/experiments are arguments of the test)
"""Dataset builds attacked at the REST API (surfaces/datasets.py), against a live server over a
real chdb store holding two teams' captured traffic, beside the second team's own use.

The abuser (a deployer of team A) sends another team's endpoint, experiment and dataset ids,
absurd and huge windows, malformed and oversized bodies, and builds past its team's bound.
Each is a clear 4xx naming what is wrong (never a 5xx), and nothing of team A is written.
Beside it team B keeps reading its datasets and builds one: tolerance, every one of its
replies a 2xx, its median read latency at most twice its own median before the attack plus
100 ms, and its build made as before.
"""

from __future__ import annotations

import statistics
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
import requests
from rest_framework.authtoken.models import Token

from experiments.models import Dataset, DatasetBuildRequest, DatasetRequestStatus
from harness import factories
from registry.models import Role
from tests.experiments.captured import column_store, serve, traffic  # noqa: F401  (a fixture)
from tests.experiments.conftest import empty_mlflow_db, mlflow_store  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


class Neighbour(threading.Thread):
    """Team B: reads its datasets again and again (list and detail)."""

    def __init__(self, base: str, token: str, dataset_id: str):
        super().__init__(daemon=True)
        self.base, self.dataset_id = base, dataset_id
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Token {token}"
        self.stop = threading.Event()
        self.results: list[tuple[int, float]] = []

    def run(self):
        turn = 0
        while not self.stop.is_set():
            path = "datasets/" if turn % 2 else f"datasets/{self.dataset_id}/"
            started = time.monotonic()
            try:
                status = self.session.get(f"{self.base}/api/v1/{path}", timeout=10).status_code
            except requests.RequestException:
                status = -1
            self.results.append((status, time.monotonic() - started))
            turn += 1
            time.sleep(0.02)


def _body(endpoint, experiment, start, end, **extra):
    return {
        "endpoint": endpoint.name,
        "name": "clicks",
        "experiment": experiment.public_id,
        "start": start.isoformat(),
        "end": end.isoformat(),
        **extra,
    }


def _abuse_cases(own, theirs, start, end):
    """(what, request kwargs, expected statuses, a word the reply names) of the abuser."""
    (endpoint, experiment), (their_endpoint, their_experiment, their_dataset) = own, theirs
    good = _body(endpoint, experiment, start, end)
    return [
        ("another team's endpoint", {"json": {**good, "endpoint": their_endpoint.name}}, {400}, "endpoint"),
        ("another team's experiment", {"json": {**good, "experiment": their_experiment.public_id}}, {400}, "experiment"),
        ("an end at the calendar's last second", {"json": {**good, "end": "9999-12-31T23:59:59Z"}}, {400}, "end"),
        ("from year 1", {"json": {**good, "start": "0001-01-01T00:00:00Z"}}, {400}, "end"),
        ("ten years", {"json": {**good, "start": (end - timedelta(days=3650)).isoformat()}}, {400}, "end"),
        ("an end in the future", {"json": {**good, "end": (datetime.now(UTC) + timedelta(days=1)).isoformat()}}, {400}, "end"),
        ("start after end", {"json": {**good, "start": end.isoformat(), "end": start.isoformat()}}, {400}, "start"),
        ("a date that is no date", {"json": {**good, "start": "2026-13-45T99:00:00Z"}}, {400}, "start"),
        ("a name of 10 000 characters", {"json": {**good, "name": "n" * 10_000}}, {400}, "name"),
        ("a NUL in the name", {"json": {**good, "name": "a\x00b"}}, {400}, "name"),
        ("an endpoint that is a list", {"json": {**good, "endpoint": [endpoint.name] * 1000}}, {400}, "endpoint"),
        ("not JSON", {"data": b"{endpoint: ", "headers": {"Content-Type": "application/json"}}, {400}, "JSON"),
        ("a JSON array", {"json": [good]}, {400}, ""),
        ("nested past any depth", {"data": b"[" * 5000 + b"]" * 5000, "headers": {"Content-Type": "application/json"}}, {400}, ""),
        ("another team's dataset", {"method": "GET", "path": f"datasets/{their_dataset}/"}, {404}, "dataset"),
        ("an id that is no dataset id", {"method": "GET", "path": "datasets/ds-" + "f" * 40 + "/"}, {404}, ""),
        # last, and on a connection of its own: the server refuses it unread
        ("a body of 12 MiB", {"data": b'{"name": "' + b"x" * (12 << 20) + b'"}', "headers": {"Content-Type": "application/json", "Connection": "close"}}, {400, 413}, ""),
    ]  # fmt: skip


def test_dataset_abuse_is_refused_and_the_neighbour_holds(
    live_server,
    column_store,
    team_a,
    team_b,
    deployer,
    artifact_factory,
    tmp_path,
    settings,
    mlflow_store,
):
    settings.VAR_DIR = tmp_path
    nina = factories.user("nina")
    factories.member(nina, team_b, Role.DEPLOYER)
    own = serve(team_a, deployer, artifact_factory, name="ds-a")
    their_endpoint, their_experiment = serve(team_b, nina, artifact_factory, name="ds-b")
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=3)
    end = start + timedelta(hours=1)
    traffic(column_store, *own, start, n=60)
    traffic(column_store, their_endpoint, their_experiment, start, n=60)

    def session(user):
        s = requests.Session()
        s.headers["Authorization"] = f"Token {Token.objects.get_or_create(user=user)[0].key}"
        return s

    theirs, mine = session(nina), session(deployer)
    api = f"{live_server.url}/api/v1/"
    first = theirs.post(f"{api}datasets/", json=_body(their_endpoint, their_experiment, start, end), timeout=60)
    assert first.status_code == 201, first.text
    their_dataset = first.json()["id"]

    neighbour = Neighbour(live_server.url, theirs.headers["Authorization"].split()[1], their_dataset)
    neighbour.start()
    time.sleep(1.5)
    before = len(neighbour.results)
    try:
        for what, kwargs, expected, names in _abuse_cases(
            own, (their_endpoint, their_experiment, their_dataset), start, end
        ):
            kwargs = dict(kwargs)
            method, path = kwargs.pop("method", "POST"), kwargs.pop("path", "datasets/")
            # a case that closes its connection goes on one of its own (requests.request, no
            # pool): the session's next request must not race the server's close of it
            alone = kwargs.get("headers", {}).get("Connection") == "close"
            sender = requests.request if alone else mine.request
            if alone:
                kwargs["headers"] = {**kwargs["headers"], "Authorization": mine.headers["Authorization"]}
            reply = sender(method, f"{api}{path}", timeout=60, **kwargs)
            assert reply.status_code in expected, (what, reply.status_code, reply.text[:300])
            assert names.lower() in reply.text.lower(), (what, reply.text[:300])
        # two long builds of team A under way: a third is a 429; team B's bound is its own
        for _ in range(2):
            DatasetBuildRequest.objects.create(
                team=team_a, endpoint=own[0], name="clicks", window_start=start, window_end=end,
                created_by=deployer, status=DatasetRequestStatus.RUNNING,
            )  # fmt: skip
        busy = mine.post(f"{api}datasets/", json=_body(*own, start, end), timeout=60)
        assert busy.status_code == 429 and busy.json()["code"] == "dataset_builds_busy", busy.text
        again = theirs.post(f"{api}datasets/", json=_body(their_endpoint, their_experiment, start, end), timeout=60)
        assert again.status_code == 201 and again.json()["version"] == 2, again.text
    finally:
        neighbour.stop.set()
        neighbour.join(15)

    assert not Dataset.objects.filter(team=team_a).exists()
    assert not DatasetBuildRequest.objects.exclude(status=DatasetRequestStatus.RUNNING).exists()
    calm = [t for _, t in neighbour.results[:before]]
    during = neighbour.results[before:]
    assert calm and during, (len(calm), len(during))
    assert all(200 <= status < 300 for status, _ in neighbour.results), sorted({s for s, _ in neighbour.results})
    limit = 2 * statistics.median(calm) + 0.1
    assert statistics.median(t for _, t in during) <= limit, (statistics.median(t for _, t in during), limit)
