"""The closed loop with real processes: the web app (live server), a Celery worker and
beat on the real broker, the local pool supervisor with real tritonserver replicas, the
gateway polling the route table, a load generator, and a local webhook receiver.

Three rollouts on one endpoint, in order:
1. restart safety: SIGKILL the worker and restart beat mid-canary; the rollout stays at
   its step with its step timer intact, and the loop carries on judging;
2. a candidate that fails 20 % of requests is rolled back by the judge with no
   operator, clients see no errors (failover), and the alert reaches the webhook;
3. a healthy candidate is promoted to stable.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import requests
from django.conf import settings
from django.contrib.auth.models import Permission
from rest_framework.authtoken.models import Token

from deployments import rollout_services, tritonserver
from deployments import services as pool_services
from deployments.models import Endpoint, PoolModel, PoolModelState, Rollout
from deployments.rollout_machine import State
from monitoring.models import Alert, Verdict
from registry import storage
from registry.models import Artifact, ArtifactStatus, Build, BuildStatus, ModelVersion, RegisteredModel, VersionSource
from tests import factories
from tests.conftest import CeleryWorker, require_service, wait_for_line
from tests.deployments.packaging import write_model_dir
from tests.gateway.conftest import GatewayProcess

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

FLAKY = '''

# --- injected for the test: fail a share of requests like a bad model version would ---
import random as _random

_serve = TritonPythonModel.execute


def _flaky_execute(self, requests):
    responses = _serve(self, requests)
    return [pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError("injected failure"))
            if _random.random() < {rate} else r for r in responses]


TritonPythonModel.execute = _flaky_execute
'''


def wait_for(check, *, timeout: float, what: str, interval: float = 0.25):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


def artifact(team, onnx_path, tmp_path, *, error_rate: float = 0.0) -> Artifact:
    model = RegisteredModel.objects.filter(name="ctr").first() or factories.registered_model(team, name="ctr")
    version = ModelVersion.objects.create(model=model, version=model.versions.count() + 1, source=VersionSource.UPLOAD,
                                          file_sha256="0" * 64, file_path="x.onnx")
    build = Build.objects.create(version=version, targets=["onnx-fp32"], status=BuildStatus.SUCCEEDED)
    name = f"ctr__v{version.version}__onnx-fp32"
    staged = write_model_dir(tmp_path / "staging", name, onnx_path)
    if error_rate:
        with open(staged / "1" / "model.py", "a") as fh:
            fh.write(FLAKY.replace("{rate}", str(error_rate)))
    rel, sha = storage.put_dir(staged)
    shutil.rmtree(tmp_path / "staging", ignore_errors=True)
    return Artifact.objects.create(version=version, build=build, variant="onnx-fp32", status=ArtifactStatus.SERVABLE,
                                   triton_model_name=name, path=rel, sha256=sha)


class Webhook:
    def __init__(self):
        self.received = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.received.append(json.loads(body or b"{}"))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"


class Load:
    """~rate requests/s against the gateway from a few threads; records statuses and variants."""

    def __init__(self, url: str, rate: float = 120.0, threads: int = 3):
        self.url, self.interval, self.threads = url, threads / rate, threads
        self.statuses, self.variants, self.stop_event = [], [], threading.Event()
        rng = np.random.default_rng(0)
        self.body = json.dumps({"inputs": [
            {"name": "dense", "shape": [1, 13], "datatype": "FP32", "data": rng.normal(size=13).round(4).tolist()},
            {"name": "sparse", "shape": [1, 26], "datatype": "INT64", "data": rng.integers(0, 5000, size=26).tolist()},
        ]})

    def _run(self):
        session = requests.Session()
        while not self.stop_event.is_set():
            started = time.monotonic()
            try:
                response = session.post(self.url, data=self.body, headers={"Content-Type": "application/json"}, timeout=5)
                self.statuses.append(response.status_code)
                self.variants.append(response.headers.get("X-Model-Variant", ""))
            except requests.RequestException:
                self.statuses.append(0)
            time.sleep(max(0.0, self.interval - (time.monotonic() - started)))

    def start(self):
        self.workers = [threading.Thread(target=self._run, daemon=True) for _ in range(self.threads)]
        for worker in self.workers:
            worker.start()
        return self

    def stop(self):
        self.stop_event.set()
        for worker in self.workers:
            worker.join(10)


def spawn(args, env, log_path):
    log = open(log_path, "ab")
    proc = subprocess.Popen(args, cwd=settings.BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    return proc


def stop(proc, sig=signal.SIGTERM):
    if proc and proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def test_closed_loop_with_real_processes(live_server, subprocess_env, tmp_path, pools_dir, team_a, deployer, onnx_path):
    require_service("postgres", "redis")
    tritonserver.find_binary()
    webhook = Webhook()
    gateway_user = factories.user("gateway-svc")
    gateway_user.user_permissions.add(Permission.objects.get(codename="read_routes"))
    gateway = GatewayProcess(tmp_path, {"GATEWAY_ROUTES_URL": f"{live_server.url}/api/v1/gateway/routes",
                                        "GATEWAY_TOKEN": Token.objects.create(user=gateway_user).key,
                                        "GATEWAY_POLL_INTERVAL_MS": "250"})
    env = {**subprocess_env, "POOLS_DIR": str(pools_dir), "MONITORING_ALERT_WEBHOOKS": webhook.url,
           "GATEWAY_METRICS_URL": f"{gateway.url}/metrics", "MONITORING_PUBLIC_URL": live_server.url}
    beat_args = [sys.executable, "-m", "celery", "-A", "config", "beat", "--loglevel=INFO", f"--schedule={tmp_path / 'beat-schedule'}"]
    procs = {"pools": spawn([sys.executable, "manage.py", "run_pools", "--interval", "0.3"], env, tmp_path / "pools.log"),
             "beat": spawn(beat_args, env, tmp_path / "beat.log")}
    worker = CeleryWorker(env, tmp_path / "worker.log", queues="control").start()
    load = None
    try:
        stable = artifact(team_a, onnx_path, tmp_path)
        pool = pool_services.pool_create(user=deployer, name="loop", team=team_a, replicas=1)
        endpoint = rollout_services.endpoint_create(user=deployer, name="ctr", pool=pool, stable_artifact=stable,
                                                    slo_p99_ms=500, slo_error_rate=0.02)
        wait_for(lambda: PoolModel.objects.filter(artifact=stable, state=PoolModelState.READY).exists(), timeout=90, what="stable READY")
        gateway.start(timeout=30)
        load = Load(f"{gateway.url}/v2/models/ctr/infer").start()
        wait_for(lambda: load.statuses.count(200) > 50, timeout=30, what="traffic through the gateway")

        # 1. restart safety mid-canary ------------------------------------------------------------
        slow = artifact(team_a, onnx_path, tmp_path)
        rollout = rollout_services.rollout_start(user=deployer, endpoint=endpoint, candidate=slow, steps_bp=[2000, 10000],
                                                 step_min_seconds=600, step_deadline_seconds=900)
        wait_for(lambda: Rollout.objects.get(pk=rollout.pk).state == State.CANARY, timeout=90, what="canary")
        before = Rollout.objects.get(pk=rollout.pk)
        wait_for(lambda: Verdict.objects.filter(rollout_id=rollout.pk).exists(), timeout=30, what="first verdict")
        worker.kill(signal.SIGKILL)
        stop(procs["beat"], signal.SIGKILL)
        procs["beat"] = spawn(beat_args, env, tmp_path / "beat-2.log")
        worker = CeleryWorker(env, tmp_path / "worker-2.log", queues="control").start()
        seen = Verdict.objects.filter(rollout_id=rollout.pk).count()
        wait_for(lambda: Verdict.objects.filter(rollout_id=rollout.pk).count() > seen + 2, timeout=30, what="judging after restart")
        after = Rollout.objects.get(pk=rollout.pk)
        assert (after.state, after.step_index, after.step_started_at) == (State.CANARY, 0, before.step_started_at)
        assert 2000 / 10000 - 0.08 < load.variants[-200:].count(f"v{slow.version.version}-onnx-fp32") / 200 < 2000 / 10000 + 0.08
        rollout_services.rollout_rollback(user=deployer, rollout=after, reason="end of the restart check")
        wait_for(lambda: Rollout.objects.get(pk=rollout.pk).state == State.ROLLED_BACK, timeout=60, what="manual rollback done")

        # 2. a bad candidate is rolled back by the judge, clients see no errors ------------------
        errors_before = len(load.statuses) - load.statuses.count(200)
        bad = artifact(team_a, onnx_path, tmp_path, error_rate=0.2)
        rollout = rollout_services.rollout_start(user=deployer, endpoint=endpoint, candidate=bad, steps_bp=[2000, 10000],
                                                 step_min_seconds=60, step_deadline_seconds=120)
        wait_for(lambda: Rollout.objects.get(pk=rollout.pk).traffic_started_at, timeout=90, what="bad candidate gets traffic")
        onset = Rollout.objects.get(pk=rollout.pk).traffic_started_at
        rolled = wait_for(lambda: (r := Rollout.objects.get(pk=rollout.pk)).traffic_stopped_at and r, timeout=60, what="automatic rollback")
        assert rolled.state in (State.ROLLING_BACK, State.ROLLED_BACK) and "judge" in rolled.reason
        assert (rolled.traffic_stopped_at - onset).total_seconds() < 30
        alert = Alert.objects.get(rollout_id=rollout.pk, kind="rollout_rolled_back")
        assert alert.severity == "critical" and alert.evidence["checks"]
        delivered = wait_for(lambda: [m for m in webhook.received if m.get("alert", {}).get("rollout_id") == rollout.pk],
                             timeout=30, what="webhook delivery")
        assert "text" in delivered[0] and "rolled back" in delivered[0]["text"]
        assert len(load.statuses) - load.statuses.count(200) == errors_before  # failover: no client-visible errors
        wait_for(lambda: Rollout.objects.get(pk=rollout.pk).state == State.ROLLED_BACK, timeout=60, what="bad candidate unloaded")

        # 3. a healthy candidate is promoted --------------------------------------------------------
        good = artifact(team_a, onnx_path, tmp_path)
        rollout = rollout_services.rollout_start(user=deployer, endpoint=endpoint, candidate=good, steps_bp=[5000, 10000],
                                                 step_min_seconds=2, step_min_requests=50, step_deadline_seconds=120,
                                                 promote_grace_seconds=1)
        wait_for(lambda: Rollout.objects.get(pk=rollout.pk).state in (State.SUCCEEDED, State.ROLLED_BACK, State.FAILED),
                 timeout=150, what="healthy rollout finished")
        done = Rollout.objects.get(pk=rollout.pk)
        assert done.state == State.SUCCEEDED, done.reason
        assert Endpoint.objects.get(pk=endpoint.pk).stable_artifact_id == good.pk
        wait_for(lambda: load.variants[-1] == f"v{good.version.version}-onnx-fp32", timeout=10, what="gateway serving the new stable")
    finally:
        if load:
            load.stop()
        worker.stop()
        gateway.stop()
        for proc in procs.values():
            stop(proc)
        webhook.server.shutdown()
