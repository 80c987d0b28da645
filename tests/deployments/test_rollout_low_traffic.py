"""The closed loop at modest traffic with the fair baseline, with real processes (the
web app as live server, a Celery worker and beat, the local pool supervisor with a real
tritonserver, the gateway, a load generator at 20 req/s):

1. a healthy candidate (the same model: A/A) promotes with a short plan (50 → 100 %) at the
   judge's defaults while a CPU hog (a busy-looping process) runs beside the pool's replica:
   the gateway splits stable / baseline / candidate, the copy of the stable is loaded under
   its own name and unloaded at the end, and clients see no errors (the judge compares the
   arms window by window, so the host's load both arms share is not the candidate's);
2. a real slower candidate (a python-backend model sleeping 30 % of the stable's p50 more
   per request: smaller than the issue's +50 %, so the harder case) is rolled back at the
   defaults, judged against the equally loaded baseline.
"""

import sys

import pytest

from deployments.models import PoolModel, PoolModelState, Rollout
from deployments.rollout_machine import TERMINAL, State
from deployments.services import rollouts as rollout_services
from harness.artifacts import package_artifact
from harness.closed_loop import ClosedLoop
from harness.processes import spawn, stop, wait_for
from monitoring.models import Verdict
from registry.names import baseline_variant_name, variant_name
from serving import tritonserver
from tests.conftest import require_service

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_healthy_candidate_promotes_at_20_rps_and_a_slow_one_is_rolled_back(
    live_server, subprocess_env, tmp_path, pools_dir, team_a, deployer, onnx_path
):
    require_service("postgres", "redis")
    tritonserver.find_binary()
    with ClosedLoop(live_server.url, subprocess_env, tmp_path, pools_dir) as loop:
        stable, pool, endpoint = loop.serve(team_a, deployer, onnx_path, pool="low", slo_error_rate=0.02)
        load = loop.load("ctr", rate=20, threads=2, warm=40)
        served = sorted(r[3] for r in load.records if r[1] == 200)
        p50 = served[len(served) // 2]

        # 1. A/A at 20 req/s, 50 -> 100 %, a CPU hog beside the replica: promotes ---------------------
        phase = len(load.records)
        twin = package_artifact(team_a, onnx_path, tmp_path)
        hog = spawn([sys.executable, "-c", "while True: pass"], loop.env, tmp_path / "hog.log")
        loop.procs["hog"] = hog  # stopped with the loop if an assertion fails first
        rollout = rollout_services.rollout_start(
            user=deployer,
            endpoint=endpoint,
            candidate=twin,
            steps_bp=[5000, 10000],
            step_min_seconds=5,
            step_min_requests=50,
            step_deadline_seconds=150,
            promote_grace_seconds=1,
        )
        assert rollout.baseline_model
        done = wait_for(
            lambda: (r := Rollout.objects.get(pk=rollout.pk)).state in TERMINAL and r, timeout=240, what="A/A finished"
        )
        assert hog.poll() is None  # it ran the whole rollout
        stop(loop.procs.pop("hog"))
        assert done.state == State.SUCCEEDED, done.reason
        seen = set(load.variants[phase:])
        assert (
            baseline_variant_name(stable) in seen and variant_name(twin) in seen
        )  # the gateway split stable/baseline/candidate
        assert [r for r in load.records[phase:] if r[1] != 200] == []
        verdict = Verdict.objects.filter(rollout_id=rollout.pk, step=0).latest("id")
        assert verdict.stable_variant == baseline_variant_name(stable)  # judged against the copy
        assert all("progress" in c for c in verdict.checks if c["outcome"] != "skipped")
        wait_for(
            lambda: PoolModel.objects.get(triton_model_name=rollout.baseline_model).state == PoolModelState.UNLOADED,
            timeout=60,
            what="baseline copy unloaded",
        )

        # 2. 30 % slower: rolled back ------------------------------------------------------------------------
        slow = package_artifact(team_a, onnx_path, tmp_path, delay_s=0.3 * p50)
        rollout = rollout_services.rollout_start(
            user=deployer,
            endpoint=endpoint,
            candidate=slow,
            steps_bp=[5000, 10000],
            step_min_seconds=5,
            step_min_requests=50,
            step_deadline_seconds=150,
        )
        done = wait_for(
            lambda: (r := Rollout.objects.get(pk=rollout.pk)).traffic_stopped_at and r,
            timeout=150,
            what="slow rolled back",
        )
        assert done.reason.startswith("judge:") and ("slower" in done.reason or "above" in done.reason), done.reason
