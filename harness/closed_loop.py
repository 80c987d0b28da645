"""The closed loop as real processes around a test's live server, started once here for every
test that needs it: the pool supervisor (`run_pools`), Celery beat, Celery workers, and a
gateway that polls the live server's route table with a service account's token; then a
served endpoint (a stable on its own pool, READY) and a steady load through the gateway.

    with ClosedLoop(live_server.url, subprocess_env, tmp_path, pools_dir) as loop:
        stable, pool, endpoint = loop.serve(team_a, deployer, onnx_path, pool="low")
        load = loop.load("ctr", rate=20)
        ...

Leaving the block stops the load, the workers, the gateway and the processes (in that order).
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness.gateway import GatewayProcess
from harness.load import Load
from harness.processes import CeleryWorker, spawn, stop, wait_for


class ClosedLoop:
    def __init__(
        self,
        live_server_url: str,
        subprocess_env: dict,
        work: Path,
        pools_dir: Path,
        *,
        env: dict | None = None,
        queues: tuple[str, ...] = ("control",),
        gateway_env: dict | None = None,
        beat_args: tuple[str, ...] = ("--loglevel=INFO",),
    ):
        from django.contrib.auth.models import Permission
        from rest_framework.authtoken.models import Token

        from harness import factories

        self.live_server_url, self.work = live_server_url, work
        account = factories.user("gateway-svc")
        account.user_permissions.add(Permission.objects.get(codename="read_routes"))
        self.gateway = GatewayProcess(
            work,
            {
                "GATEWAY_ROUTES_URL": f"{live_server_url}/api/v1/gateway/routes",
                "GATEWAY_TOKEN": Token.objects.create(user=account).key,
                "GATEWAY_POLL_INTERVAL_MS": "250",
                **(gateway_env or {}),
            },
        )
        self.env = {
            **subprocess_env,
            "POOLS_DIR": str(pools_dir),
            "GATEWAY_METRICS_URL": f"{self.gateway.url}/metrics",
            "MONITORING_PUBLIC_URL": live_server_url,
            **(env or {}),
        }
        self.env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)  # a browser test's; never a child's
        self.queues, self.beat_args = queues, beat_args
        self.procs: dict = {}
        self.workers: list[CeleryWorker] = []
        self.loads: list[Load] = []

    def __enter__(self) -> ClosedLoop:
        try:
            self.procs["pools"] = spawn(
                [sys.executable, "manage.py", "run_pools", "--interval", "0.3", "--stop-replicas-on-exit"],
                self.env,
                self.work / "pools.log",
            )
            self._start_beat_and_workers("")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        for load in self.loads:
            load.stop()
        for worker in self.workers:
            worker.stop()
        self.gateway.stop()
        for proc in self.procs.values():
            stop(proc)

    def _start_beat_and_workers(self, suffix: str) -> None:
        beat = [sys.executable, "-m", "celery", "-A", "config", "beat", *self.beat_args]
        self.procs["beat"] = spawn(
            [*beat, f"--schedule={self.work / 'beat-schedule'}"], self.env, self.work / f"beat{suffix}.log"
        )
        self.workers = []
        for queue in self.queues:  # one by one: a worker that fails to start leaves the others stoppable
            self.workers.append(CeleryWorker(self.env, self.work / f"worker-{queue}{suffix}.log", queues=queue))
            self.workers[-1].start()

    def crash_control_plane(self, sig) -> None:
        """Kill beat and every worker with `sig` (as an OOM kill or a lost node would), then start
        them again (logs `beat-2.log`, `worker-<queue>-2.log`)."""
        for worker in self.workers:
            worker.kill(sig)
        stop(self.procs["beat"], sig)
        self._start_beat_and_workers("-2")

    def serve(self, team, deployer, onnx_path: Path, *, pool: str, name: str = "ctr", **endpoint_fields):
        """A stable artifact on a new one-replica pool behind a public endpoint `name` (the load
        has no key), READY, and the gateway started on its table: (stable, pool, endpoint)."""
        from deployments.models import PoolModel, PoolModelState
        from deployments.services import endpoints as endpoint_services
        from deployments.services import pools as pool_services
        from harness.artifacts import package_artifact

        stable = package_artifact(team, onnx_path, self.work)
        served_on = pool_services.pool_create(user=deployer, name=pool, team=team, replicas=1)
        fields = {"slo_p99_ms": 500, "public": True, **endpoint_fields}
        endpoint = endpoint_services.endpoint_create(
            user=deployer, name=name, pool=served_on, stable_artifact=stable, **fields
        )
        wait_for(
            lambda: PoolModel.objects.filter(artifact=stable, state=PoolModelState.READY).exists(),
            timeout=90,
            what="stable READY",
        )
        self.gateway.start(timeout=30)
        return stable, served_on, endpoint

    def load(self, endpoint: str, *, rate: float, threads: int, warm: int, users: int = 0) -> Load:
        """A steady load on `endpoint` through the gateway, once `warm` replies were 200 (`users`:
        each request as one of that many users, harness.load.Load)."""
        load = Load(f"{self.gateway.url}/v2/models/{endpoint}/infer", rate=rate, threads=threads, users=users).start()
        self.loads.append(load)
        wait_for(lambda: load.statuses.count(200) > warm, timeout=30, what="traffic through the gateway")
        return load
