"""A local pool end to end through the API, a real Celery worker and the `run_pools`
supervisor (both child processes on the test database and broker): create, load a
packaged artifact, infer through tritonclient, a failed load that leaves the pool as it
was with Triton's message, SIGKILL a replica and see it come back serving its model
without an operator, unload with drain, delete with no process left behind.
"""

import os
import signal
import subprocess
import sys
from io import StringIO

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
from django.conf import settings
from django.core.management import call_command

from deployments.models import ServingPool
from harness import factories
from harness.processes import wait_for, wait_for_line
from registry.models import Event
from serving import tritonserver
from serving.triton import TritonHTTP
from tests.conftest import require_service

pytestmark = pytest.mark.integration


@pytest.fixture
def supervisor(subprocess_env, tmp_path, pools_dir):
    env = {**subprocess_env, "POOLS_DIR": str(pools_dir)}
    log_path = tmp_path / "run_pools.log"
    log = open(log_path, "ab")
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "run_pools", "--interval", "0.3"],
        cwd=settings.BASE_DIR,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    # Waited for in the test, after the worker started: the two start up side by side.
    yield lambda: wait_for_line(log_path, "run_pools: supervising", timeout=60, proc=proc)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def infer(grpc_url, name, dense, sparse):
    client = grpcclient.InferenceServerClient(grpc_url)
    feeds = [
        grpcclient.InferInput("dense", list(dense.shape), "FP32"),
        grpcclient.InferInput("sparse", list(sparse.shape), "INT64"),
    ]
    feeds[0].set_data_from_numpy(dense)
    feeds[1].set_data_from_numpy(sparse)
    return client.infer(name, feeds).as_numpy("ctr")


def test_local_pool_lifecycle(
    subprocess_env, celery_worker, supervisor, deployer_api, team_a, onnx_path, tmp_path, pools_dir
):
    require_service("redis", "postgres")
    try:
        tritonserver.find_binary()
    except tritonserver.TritonNotAvailable as exc:
        pytest.skip(str(exc))
    celery_worker(queues="control")
    supervisor()  # up and supervising
    good = factories.artifact(team_a, onnx_path, tmp_path)
    broken = factories.artifact(team_a, onnx_path, tmp_path, broken=True)
    api = deployer_api

    created = api.post("/api/v1/pools/", {"name": "life", "team": "team-a", "replicas": 2}, format="json")
    assert created.status_code == 201, created.json()
    try:
        detail = lambda: api.get("/api/v1/pools/life/").json()  # noqa: E731
        wait_for(lambda: detail()["status"] == "ready", timeout=60, what="pool ready")

        # load: READY only when every replica says so
        assert api.post("/api/v1/pools/life/load/", {"artifact": good.pk}, format="json").status_code == 202
        model = good.triton_model_name
        body = wait_for(
            lambda: (d := detail()) and d["models"] and d["models"][0]["state"] == "ready" and d,
            timeout=60,
            what="model ready",
        )
        assert body["models"][0]["replica_ready"] == {"r0": True, "r1": True}
        assert body["live"]["readiness"][model] == {"r0": True, "r1": True}
        rng = np.random.default_rng(3)
        dense, sparse = (
            rng.normal(size=(5, 13)).astype(np.float32),
            rng.integers(0, 5000, size=(5, 26)).astype(np.int64),
        )
        expected = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"]).run(
            ["ctr"], {"dense": dense, "sparse": sparse}
        )[0]
        replicas = {r["name"]: r for r in body["replica_set"]}
        for replica in replicas.values():
            np.testing.assert_allclose(infer(replica["grpc_url"], model, dense, sparse), expected, rtol=1e-5, atol=1e-6)
        stats = detail()["live"]["statistics"]["models"][model]
        assert stats["success"] >= 2 and stats["compute_us_avg"] > 0

        # a model that fails to load: Triton's message shown, the pool serves what it did
        assert api.post("/api/v1/pools/life/load/", {"artifact": broken.pk}, format="json").status_code == 202
        failed = wait_for(
            lambda: next(
                (
                    m
                    for m in detail()["models"]
                    if m["triton_model_name"] == broken.triton_model_name and m["state"] == "failed"
                ),
                None,
            ),
            timeout=60,
            what="broken model failed",
        )
        assert "Protobuf parsing failed" in failed["error"]
        assert detail()["live"]["readiness"][model] == {"r0": True, "r1": True}

        # SIGKILL a replica: the supervisor restarts it and reloads its model, no operator
        os.killpg(replicas["r0"]["pid"], signal.SIGKILL)
        body = wait_for(
            lambda: (
                (d := detail())
                and {r["name"]: r for r in d["replica_set"]}["r0"]["restarts"] == 1
                and d["live"]["readiness"].get(model) == {"r0": True, "r1": True}
                and d
            ),
            timeout=60,
            what="r0 restarted and serving again",
        )
        r0 = {r["name"]: r for r in body["replica_set"]}["r0"]
        assert (
            r0["status"] == "ready"
            and r0["pid"] != replicas["r0"]["pid"]
            and r0["grpc_url"] == replicas["r0"]["grpc_url"]
        )
        np.testing.assert_allclose(infer(r0["grpc_url"], model, dense, sparse), expected, rtol=1e-5, atol=1e-6)

        # a second supervisor (a restarted control plane) re-adopts the running replicas
        running = {r["name"]: (r["pid"], r["restarts"]) for r in detail()["replica_set"]}
        call_command("run_pools", "--once", stdout=StringIO())
        assert {r["name"]: (r["pid"], r["restarts"]) for r in detail()["replica_set"]} == running
        pool_id = str(ServingPool.objects.get(name="life").pk)
        actions = set(
            Event.objects.filter(object_type="deployments.servingpool", object_id=pool_id).values_list(
                "action", flat=True
            )
        )
        assert {"created", "model_loaded", "model_load_failed", "replica_restarted", "model_reloaded"} <= actions

        # unload drains, then the model is gone from every replica
        assert (
            api.post("/api/v1/pools/life/unload/", {"model": model, "drain_timeout_s": 10}, format="json").status_code
            == 202
        )
        wait_for(
            lambda: not any(m["triton_model_name"] == model for m in detail()["models"]),
            timeout=60,
            what="model unloaded",
        )
        unloaded = Event.objects.get(object_id=pool_id, action="model_unloaded")
        assert unloaded.data["model"] == model and unloaded.data["drain"]["pending"] == 0
        for replica in detail()["replica_set"]:
            assert not TritonHTTP(replica["http_url"]).is_model_ready(model)

        # scale down: the leaving replica first drops out of routing (stopped) while it still runs
        r1_pid = {r["name"]: r for r in detail()["replica_set"]}["r1"]["pid"]
        assert api.post("/api/v1/pools/life/scale/", {"replicas": 1}, format="json").status_code == 202
        wait_for(
            lambda: {r["name"]: r["status"] for r in detail()["replica_set"]}.get("r1") == "stopped",
            timeout=30,
            what="r1 retiring",
        )
        assert tritonserver.process_state(r1_pid) == "running"
        wait_for(lambda: [r["name"] for r in detail()["replica_set"]] == ["r0"], timeout=30, what="r1 removed")
        wait_for(lambda: tritonserver.process_state(r1_pid) != "running", timeout=20, what="r1 process stopped")
        assert Event.objects.filter(object_id=pool_id, action="replica_retiring").exists()
    finally:
        pids = [r["pid"] for r in api.get("/api/v1/pools/life/").json().get("replica_set", [])]
        assert api.delete("/api/v1/pools/life/").status_code == 202
        wait_for(lambda: api.get("/api/v1/pools/life/").status_code == 404, timeout=60, what="pool deleted")
    assert not any(tritonserver.process_state(pid) == "running" for pid in pids)
    assert tritonserver.tritonservers_under(pools_dir) == []


@pytest.mark.django_db
def test_supervisor_kills_tritonservers_of_pools_that_no_longer_exist(pools_dir):
    """A server left behind by a pool whose row is gone (e.g. deleted while the control
    plane was down) is an orphan: one supervisor tick kills it."""
    try:
        tritonserver.find_binary()
    except tritonserver.TritonNotAvailable as exc:
        pytest.skip(str(exc))
    ghost = tritonserver.TritonProcess(
        model_repository=pools_dir / "ghost" / "models", work_dir=pools_dir / "ghost" / "replicas" / "r0"
    )
    ghost.start()
    try:
        ghost.wait_live(60)
        assert [pid for pid, _ in tritonserver.tritonservers_under(pools_dir)] == [ghost.process.pid]
        call_command("run_pools", "--once", stdout=StringIO())
        # killed and reaped by the tick (this test process is its parent, so the sweep reaps it)
        assert tritonserver.process_state(ghost.process.pid) != "running"
    finally:
        ghost.stop()
    assert tritonserver.tritonservers_under(pools_dir) == []


@pytest.mark.django_db
def test_a_load_asked_before_any_replica_is_up_waits_and_then_loads(deployer, team_a, onnx_path, tmp_path, pools_dir):
    """An endpoint created together with its pool asks the load before a replica is up
    (a CI run of `make run`'s demo lost its stable model this way: the load failed with
    "no ready replica" and nothing asked again). The load now waits, saying so, and the
    pool's reconcile (run_pools) loads it once a replica is ready: a real tritonserver."""
    from deployments.drivers import driver_for
    from deployments.models import PoolModelState
    from deployments.services import pools as pool_services
    from deployments.services import reconcile

    try:
        tritonserver.find_binary()
    except tritonserver.TritonNotAvailable as exc:
        pytest.skip(str(exc))
    pool = pool_services.pool_create(user=deployer, name="early", team=team_a, replicas=1)
    artifact = factories.artifact(team_a, onnx_path, tmp_path)
    pool_model = pool_services.pool_load_request(user=deployer, pool=pool, artifact=artifact)
    waiting = reconcile.pool_model_load(pool_model_id=pool_model.pk)  # no replica started yet
    assert (waiting.state, waiting.error) == (PoolModelState.LOADING, reconcile.WAITING)
    try:

        def loaded():
            reconcile.pool_reconcile(pool_id=pool.pk)  # what run_pools does every tick
            pool_model.refresh_from_db()
            return pool_model.state != PoolModelState.LOADING and pool_model

        done = wait_for(loaded, timeout=90, what="the waiting load done")
        assert (done.state, done.error, done.replica_ready) == (PoolModelState.READY, "", {"r0": True})
        [replica] = [r for r in driver_for(pool).replicas() if r.ready]
        assert TritonHTTP(replica.http_url).is_model_ready(artifact.triton_model_name)
    finally:
        driver_for(pool).stop_all()
