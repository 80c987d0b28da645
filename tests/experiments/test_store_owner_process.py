"""The embedded store's one owner, a real `manage.py run_experiment_data` process, behind the
web door: captured requests go gateway writer → NATS JetStream → the owner's chdb store, and a
dataset asked of the API by a process that never opens the store is built by the owner and
answered as any build (201, its figures); a bad window is still the door's own 400.

The records' times are set an hour back (the window's attribution must have closed); everything
else is the real writer, log, reader, store and process."""

import asyncio
import json
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from deployments.selectors.gateway_routes import team_label
from experiments.eventlog import nats_answers
from experiments.eventlog.reader import NatsReader
from experiments.models import Dataset
from experiments.reference import data as reference
from experiments.services import dataset_requests
from gateway.telemetry.eventlog import NatsLog
from gateway.telemetry.exposures import ExposureLog
from harness.processes import spawn, stop
from tests.experiments.captured import serve

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
NATS_URL = "nats://127.0.0.1:4222"
N = 120


def _publish_captured(prefix, endpoint, experiment, start):
    """N served and captured single-item requests over an hour from `start`, as the gateway logs them."""
    log_rows = reference.generate(N, seed=5)
    arms = [a.name for a in experiment.arms.all()]

    async def go():
        log = ExposureLog(None, log=NatsLog(NATS_URL, prefix))
        log.teams = {endpoint.name: team_label(endpoint.team)}
        for i in range(N):
            inputs = [
                {"name": "dense", "shape": [1, reference.N_DENSE], "datatype": "FP32", "data": log_rows.dense[i].tolist()},
                {"name": "sparse", "shape": [1, reference.N_SPARSE], "datatype": "INT64", "data": log_rows.sparse[i].tolist()},
            ]  # fmt: skip
            body = json.dumps({"inputs": inputs}).encode()
            log.record(f"q{i}", experiment.public_id, endpoint.name, arms[i % 2], f"u{i}", None, None, (0.5, body))
            record = log.buffer[-1]  # served an hour ago: its attribution window has closed
            log.buffer[-1] = (*record[:5], start.timestamp() + i * 3600 / N, *record[6:])
        while log.buffer:
            await log.flush()
        await log.close()

    asyncio.run(go())


def test_the_owner_builds_what_the_web_door_asks(
    mlflow_store, subprocess_env, team_a, deployer, artifact_factory, deployer_api, tmp_path, monkeypatch
):
    if not nats_answers(NATS_URL):
        pytest.fail("nats-server with JetStream must answer on 127.0.0.1:4222")
    prefix = f"t{uuid.uuid4().hex[:10]}"
    endpoint, experiment = serve(team_a, deployer, artifact_factory, name="owner-ep")
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
    _publish_captured(prefix, endpoint, experiment, start)

    env = dict(
        subprocess_env,
        EXPERIMENT_STORE=f"chdb:{tmp_path / 'store'}",
        EVENT_LOG_URL=NATS_URL,
        EVENT_LOG_PREFIX=prefix,
        VAR_DIR=str(tmp_path / "var"),
    )
    log_path = tmp_path / "experiment-data.log"
    owner = spawn([sys.executable, "manage.py", "run_experiment_data"], env, log_path)
    monkeypatch.setattr(dataset_requests, "store_readable_here", lambda: False)  # as the web process
    try:
        body = {
            "endpoint": endpoint.name,
            "name": "owned",
            "experiment": experiment.public_id,
            "start": start.isoformat(),
            "end": (start + timedelta(hours=1)).isoformat(),
        }
        for _ in range(30):  # the owner ingests the log within a run or two
            reply = deployer_api.post("/api/v1/datasets/", body, format="json")
            if reply.status_code != 400 or reply.json().get("code") != "no_captures":
                break
            assert owner.poll() is None, log_path.read_text()[-3000:]
            time.sleep(0.5)
        assert reply.status_code == 201, (reply.content, log_path.read_text()[-2000:])
        assert reply.json()["statistics"]["rows"] == N and reply.json()["lineage"]["endpoint"] == endpoint.name
        late = deployer_api.post(
            "/api/v1/datasets/", {**body, "end": datetime.now(UTC).isoformat()}, format="json"
        )  # refused at the door: the owner is not asked
        assert late.status_code == 400 and late.json()["code"] == "attribution_open"
    finally:
        stop(owner)
        NatsReader(NATS_URL, prefix).delete_streams()
    dataset = Dataset.objects.get()
    assert (tmp_path / "var" / "datasets").is_dir() and dataset.path.startswith(str(tmp_path / "var"))
