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
import signal
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from deployments.models import Endpoint, Rollout
from deployments.rollout_machine import State
from deployments.services import rollouts as rollout_services
from harness.artifacts import package_artifact
from harness.closed_loop import ClosedLoop
from harness.processes import wait_for
from monitoring.models import Alert, MetricSample, Verdict
from serving import tritonserver
from tests.conftest import require_service

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


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


def test_closed_loop_with_real_processes(live_server, subprocess_env, tmp_path, pools_dir, team_a, deployer, onnx_path):
    require_service("postgres", "redis")
    tritonserver.find_binary()
    webhook = Webhook()
    try:
        with ClosedLoop(
            live_server.url,
            subprocess_env,
            tmp_path,
            pools_dir,
            env={"MONITORING_ALERT_WEBHOOKS": webhook.url, "OUTBOUND_ALLOWED_HOSTS": "127.0.0.1"},
        ) as loop:
            # at the product's latency defaults: the judge compares latency window by window, so
            # four test workers sharing two cores slow both arms alike (no raised margin)
            stable, pool, endpoint = loop.serve(team_a, deployer, onnx_path, pool="loop", slo_error_rate=0.02)
            load = loop.load("ctr", rate=120, threads=3, warm=50)

            # 1. restart safety mid-canary ------------------------------------------------------------
            slow = package_artifact(team_a, onnx_path, tmp_path)
            rollout = rollout_services.rollout_start(
                user=deployer,
                endpoint=endpoint,
                candidate=slow,
                steps_bp=[2000, 10000],
                step_min_seconds=600,
                step_deadline_seconds=900,
            )
            wait_for(lambda: Rollout.objects.get(pk=rollout.pk).state == State.CANARY, timeout=90, what="canary")
            before = Rollout.objects.get(pk=rollout.pk)
            wait_for(lambda: Verdict.objects.filter(rollout_id=rollout.pk).exists(), timeout=30, what="first verdict")
            loop.crash_control_plane(signal.SIGKILL)
            seen = Verdict.objects.filter(rollout_id=rollout.pk).count()
            wait_for(
                lambda: Verdict.objects.filter(rollout_id=rollout.pk).count() > seen + 2,
                timeout=30,
                what="judging after restart",
            )
            after = Rollout.objects.get(pk=rollout.pk)
            assert (after.state, after.step_index, after.step_started_at) == (State.CANARY, 0, before.step_started_at)
            assert (
                2000 / 10000 - 0.08
                < load.variants[-200:].count(f"v{slow.version.version}-onnx-fp32") / 200
                < 2000 / 10000 + 0.08
            )
            rollout_services.rollout_rollback(user=deployer, rollout=after, reason="end of the restart check")
            wait_for(
                lambda: Rollout.objects.get(pk=rollout.pk).state == State.ROLLED_BACK,
                timeout=60,
                what="manual rollback done",
            )

            # 2. a bad candidate is rolled back by the judge, clients see no errors ------------------
            phase_start = len(load.records)
            bad = package_artifact(team_a, onnx_path, tmp_path, error_rate=0.2)
            rollout = rollout_services.rollout_start(
                user=deployer,
                endpoint=endpoint,
                candidate=bad,
                steps_bp=[2000, 10000],
                step_min_seconds=60,
                step_deadline_seconds=120,
            )
            wait_for(
                lambda: Rollout.objects.get(pk=rollout.pk).traffic_started_at,
                timeout=90,
                what="bad candidate gets traffic",
            )
            onset = Rollout.objects.get(pk=rollout.pk).traffic_started_at
            rolled = wait_for(
                lambda: (r := Rollout.objects.get(pk=rollout.pk)).traffic_stopped_at and r,
                timeout=60,
                what="automatic rollback",
            )
            assert rolled.state in (State.ROLLING_BACK, State.ROLLED_BACK) and "judge" in rolled.reason
            assert (rolled.traffic_stopped_at - onset).total_seconds() < 30
            alert = wait_for(
                lambda: Alert.objects.filter(rollout_id=rollout.pk, kind="rollout_rolled_back").first(),
                timeout=15,
                what="rollback alert",
            )  # raised right after the transition commits
            assert alert.severity == "critical" and alert.evidence["checks"]
            delivered = wait_for(
                lambda: [m for m in webhook.received if m.get("alert", {}).get("rollout_id") == rollout.pk],
                timeout=30,
                what="webhook delivery",
            )
            assert "text" in delivered[0] and "rolled back" in delivered[0]["text"]
            # Failover: no client sees the bad candidate's failures. (Overload of this 2-core
            # machine can still time out a few requests on stable; those are bounded, not zero.)
            bad_variant = f"v{bad.version.version}-onnx-fp32"
            phase = load.records[phase_start:]
            assert [r for r in phase if r[1] != 200 and r[2] == bad_variant] == []
            assert sum(1 for r in phase if r[1] != 200) <= max(3, len(phase) // 100), Counter(r[1] for r in phase)
            wait_for(
                lambda: Rollout.objects.get(pk=rollout.pk).state == State.ROLLED_BACK,
                timeout=60,
                what="bad candidate unloaded",
            )

            # 3. a healthy candidate is promoted --------------------------------------------------------
            good = package_artifact(team_a, onnx_path, tmp_path)
            rollout = rollout_services.rollout_start(
                user=deployer,
                endpoint=endpoint,
                candidate=good,
                steps_bp=[5000, 10000],
                step_min_seconds=2,
                step_min_requests=50,
                step_deadline_seconds=120,
                promote_grace_seconds=1,
            )
            wait_for(
                lambda: Rollout.objects.get(pk=rollout.pk).state in (State.SUCCEEDED, State.ROLLED_BACK, State.FAILED),
                timeout=150,
                what="healthy rollout finished",
            )
            done = Rollout.objects.get(pk=rollout.pk)
            assert done.state == State.SUCCEEDED, done.reason
            assert Endpoint.objects.get(pk=endpoint.pk).stable_artifact_id == good.pk
            wait_for(
                lambda: load.variants[-1] == f"v{good.version.version}-onnx-fp32",
                timeout=10,
                what="gateway serving the new stable",
            )
            # the gateway's sampled prediction scores reached the store (the PSI guardrail's feed)
            assert MetricSample.objects.filter(
                endpoint="ctr", variant=f"v{stable.version.version}-onnx-fp32", metric__startswith="score_bin:"
            ).exists()
    finally:
        webhook.server.shutdown()
