"""Datasets through the REST API: build, list, detail, team-scoped like every resource; bad
input is a 400 naming what is wrong and writes nothing; a web process that does not own the
embedded store asks the experiment-data process, which builds between its ingest runs."""

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from experiments.models import Dataset, DatasetBuildRequest
from experiments.services import dataset_requests, datasets
from harness import factories
from registry.models import Role
from tests.experiments.captured import WINDOW_S, traffic


def _window(hours_ago=3):
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=hours_ago)
    return start, start + timedelta(hours=1)


def _body(endpoint, experiment, start, end, extra=None):
    return {
        "endpoint": endpoint.name,
        "name": "ctr",
        "experiment": experiment.public_id,
        "start": start.isoformat(),
        "end": end.isoformat(),
        **(extra or {}),
    }


@pytest.mark.django_db
def test_build_list_and_detail_through_the_api(
    column_store, served, deployer_api, bob_api, tmp_path, settings, mlflow_store, django_assert_max_num_queries
):
    settings.VAR_DIR = tmp_path
    endpoint, experiment = served
    start, end = _window()
    traffic(column_store, endpoint, experiment, start)
    reply = deployer_api.post("/api/v1/datasets/", _body(endpoint, experiment, start, end), format="json")
    assert reply.status_code == 201, reply.content
    body = reply.json()
    assert body["id"].startswith("ds-") and body["version"] == 1 and body["endpoint"] == endpoint.name
    assert body["lineage"]["experiment"] == experiment.public_id and body["statistics"]["rows"] == 200
    assert "path" not in body and str(tmp_path) not in reply.content.decode()  # no server path is shown
    again = deployer_api.post("/api/v1/datasets/", _body(endpoint, experiment, start, end), format="json")
    assert again.status_code == 201 and again.json()["version"] == 2

    with django_assert_max_num_queries(8):
        listed = deployer_api.get("/api/v1/datasets/", {"name": "ctr"}).json()
    assert [d["version"] for d in listed["results"]] == [2, 1]
    detail = deployer_api.get(f"/api/v1/datasets/{body['id']}/").json()
    assert detail["schema"]["features"]["sparse"]["shape"] == [26] and detail["versions"] == []
    # another team sees none of it, and its id reads as unknown
    assert bob_api.get("/api/v1/datasets/").json()["results"] == []
    assert bob_api.get(f"/api/v1/datasets/{body['id']}/").status_code == 404


@pytest.mark.django_db
def test_bad_input_is_a_400_naming_it_and_writes_nothing(
    column_store, served, deployer_api, bob, bob_api, tmp_path, settings, monkeypatch
):
    settings.VAR_DIR = tmp_path
    endpoint, experiment = served
    start, end = _window()
    traffic(column_store, endpoint, experiment, start, n=40)
    now = datetime.now(UTC)
    bob_pool = factories.pool(bob.groups.first(), ready_replicas=1)
    bob_endpoint = factories.endpoint(bob_pool, None, name="bob-ep")
    cases = [
        ({"end": (now - timedelta(seconds=WINDOW_S - 5)).isoformat()}, "end", "attribution_open"),
        ({"start": (now - timedelta(days=60)).isoformat()}, "end", "window_too_long"),
        ({"start": end.isoformat(), "end": start.isoformat()}, "start", "invalid_window"),
        ({"end": "9999-12-31T23:59:59Z"}, "end", None),  # a window past any sane range
        ({"start": (now - timedelta(hours=9)).isoformat(), "end": (now - timedelta(hours=8)).isoformat()}, "start", "no_captures"),
        ({"endpoint": bob_endpoint.name}, "endpoint", "endpoint_not_found"),
        ({"experiment": "exp-999999"}, "experiment", "experiment_not_found"),
        ({"name": "../etc"}, "name", None),
        ({"name": 7}, "name", None),
        ({"start": "yesterday"}, "start", None),
        ({"endpoint": "x" * 5000}, "endpoint", None),
    ]  # fmt: skip
    for extra, field, code in cases:
        reply = deployer_api.post("/api/v1/datasets/", _body(endpoint, experiment, start, end, extra), format="json")
        assert reply.status_code == 400, (extra, reply.content)
        text = reply.content.decode()
        assert field in text, (extra, text)
        if code:
            assert reply.json()["code"] == code, (extra, text)
    monkeypatch.setattr(datasets, "MAX_ROWS", 30)  # 40 captured requests in the window: over the bound
    reply = deployer_api.post("/api/v1/datasets/", _body(endpoint, experiment, start, end), format="json")
    assert reply.status_code == 400 and reply.json()["code"] == "too_many_rows", reply.content
    for raw in (b"[]", b"{", b'{"endpoint": null}'):
        reply = deployer_api.generic("POST", "/api/v1/datasets/", raw, content_type="application/json")
        assert reply.status_code == 400, raw
    # another team may neither build from this endpoint nor name its experiment
    reply = bob_api.post("/api/v1/datasets/", _body(endpoint, experiment, start, end), format="json")
    assert reply.status_code == 400 and reply.json()["code"] == "endpoint_not_found"
    factories.member(bob, endpoint.team, Role.VIEWER)  # a viewer may read, not build
    reply = bob_api.post("/api/v1/datasets/", _body(endpoint, experiment, start, end), format="json")
    assert reply.status_code == 403
    assert not Dataset.objects.exists() and not DatasetBuildRequest.objects.exists()
    assert not (tmp_path / "datasets").exists()


@pytest.mark.django_db
def test_capture_share_out_of_range_is_a_400_naming_it(served, deployer_api):
    endpoint, _ = served
    for value in (-0.1, 1.5, "NaN", "1e309", "all"):
        reply = deployer_api.patch(f"/api/v1/endpoints/{endpoint.name}/", {"capture_share": value}, format="json")
        assert reply.status_code == 400 and "capture_share" in reply.content.decode(), (value, reply.content)
    endpoint.refresh_from_db()
    assert endpoint.capture_share == 0


@pytest.mark.django_db(transaction=True)
def test_a_web_process_asks_the_store_owner(
    column_store, served, deployer, tmp_path, settings, mlflow_store, monkeypatch
):
    """The web process never opens the embedded store: it queues the build and the owner
    (run_experiment_data's loop, here a thread) runs it; a refused build leaves no row; no owner: 503."""
    settings.VAR_DIR = tmp_path
    endpoint, experiment = served
    start, end = _window()
    traffic(column_store, endpoint, experiment, start, n=60)
    monkeypatch.setattr(dataset_requests, "store_readable_here", lambda: False)  # as in the web process
    stop = threading.Event()

    def owner():
        try:
            while not stop.is_set():
                dataset_requests.dataset_requests_run(store=column_store)
                stop.wait(0.1)
        finally:
            connection.close()

    thread = threading.Thread(target=owner, daemon=True)
    thread.start()
    try:
        build = dict(user=deployer, endpoint=endpoint, experiment=experiment, name="ctr", wait_s=30)
        dataset = dataset_requests.dataset_request(start=start, end=end, **build)
        assert dataset.statistics["rows"] == 60 and dataset.version == 1
        with pytest.raises(dataset_requests.PlatformError) as exc:
            dataset_requests.dataset_request(start=start - timedelta(hours=5), end=end - timedelta(hours=5), **build)
        assert exc.value.code == "no_captures" and exc.value.status == 400
    finally:
        stop.set()
        thread.join(10)
    with pytest.raises(dataset_requests.PlatformError) as exc:
        dataset_requests.dataset_request(start=start, end=end, **{**build, "wait_s": 0.5})
    assert exc.value.status == 503 and exc.value.code == "store_owner_unavailable"
    assert Dataset.objects.count() == 1 and not DatasetBuildRequest.objects.exists()
