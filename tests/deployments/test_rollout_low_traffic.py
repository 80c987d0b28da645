"""The closed loop at modest traffic with the fair baseline, with real processes (the
web app as live server, a Celery worker and beat, the local pool supervisor with a real
tritonserver, the gateway, a load generator at 20 req/s):

1. a healthy candidate (the same model: A/A) promotes with a short plan (50 → 100 %):
   the gateway splits stable / baseline / candidate, the copy of the stable is loaded
   under its own name and unloaded at the end, and clients see no errors;
2. a candidate 30 % slower is rolled back, judged against the equally loaded baseline.
"""

import sys

import pytest
from django.contrib.auth.models import Permission
from rest_framework.authtoken.models import Token

from deployments.models import PoolModel, PoolModelState, Rollout
from deployments.rollout_machine import TERMINAL, State
from deployments.services import endpoints as endpoint_services
from deployments.services import pools as pool_services
from deployments.services import rollouts as rollout_services
from harness import factories
from harness.artifacts import package_artifact
from harness.gateway import GatewayProcess
from harness.load import Load
from harness.processes import CeleryWorker, spawn, stop, wait_for
from kernel import tritonserver
from monitoring.models import Verdict
from registry.names import baseline_variant_name, variant_name
from tests.conftest import require_service

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_healthy_candidate_promotes_at_20_rps_and_a_slow_one_is_rolled_back(
    live_server, subprocess_env, tmp_path, pools_dir, team_a, deployer, onnx_path
):
    require_service("postgres", "redis")
    tritonserver.find_binary()
    gateway_user = factories.user("gateway-svc")
    gateway_user.user_permissions.add(Permission.objects.get(codename="read_routes"))
    gateway = GatewayProcess(
        tmp_path,
        {
            "GATEWAY_ROUTES_URL": f"{live_server.url}/api/v1/gateway/routes",
            "GATEWAY_TOKEN": Token.objects.create(user=gateway_user).key,
            "GATEWAY_POLL_INTERVAL_MS": "250",
        },
    )
    env = {
        **subprocess_env,
        "POOLS_DIR": str(pools_dir),
        "GATEWAY_METRICS_URL": f"{gateway.url}/metrics",
        "MONITORING_PUBLIC_URL": live_server.url,
    }
    procs = {
        "pools": spawn(
            [sys.executable, "manage.py", "run_pools", "--interval", "0.3", "--stop-replicas-on-exit"],
            env,
            tmp_path / "pools.log",
        ),
        "beat": spawn(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "beat",
                "--loglevel=INFO",
                f"--schedule={tmp_path / 'beat-schedule'}",
            ],
            env,
            tmp_path / "beat.log",
        ),
    }
    worker = CeleryWorker(env, tmp_path / "worker.log", queues="control").start()
    load = None
    try:
        stable = package_artifact(team_a, onnx_path, tmp_path)
        pool = pool_services.pool_create(user=deployer, name="low", team=team_a, replicas=1)
        endpoint = endpoint_services.endpoint_create(
            user=deployer,
            name="ctr",
            pool=pool,
            stable_artifact=stable,
            slo_p99_ms=500,
            slo_error_rate=0.02,
            public=True,
        )  # the load has no key
        wait_for(
            lambda: PoolModel.objects.filter(artifact=stable, state=PoolModelState.READY).exists(),
            timeout=90,
            what="stable READY",
        )
        gateway.start(timeout=30)
        load = Load(f"{gateway.url}/v2/models/ctr/infer", rate=20, threads=2).start()
        wait_for(lambda: load.statuses.count(200) > 40, timeout=30, what="traffic through the gateway")
        served = sorted(r[3] for r in load.records if r[1] == 200)
        p50 = served[len(served) // 2]

        # 1. A/A at 20 req/s, 50 -> 100 %: promotes ----------------------------------------------------
        phase = len(load.records)
        twin = package_artifact(team_a, onnx_path, tmp_path)
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
    finally:
        if load:
            load.stop()
        worker.stop()
        gateway.stop()
        for proc in procs.values():
            stop(proc)
