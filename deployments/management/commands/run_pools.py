"""The pool supervisor: keeps every local pool's tritonserver replicas up.

Each tick (default 1 s; --steady-interval while every local pool is steady) it reconciles every local pool (deployments.services.reconcile),
and each Kubernetes pool every --kubernetes-every seconds (apply, then load what the pool
serves on pods that lack it, e.g. new pods the autoscaler added). For local pools it
starts missing replicas, restarts crashed or hung ones with backoff, reloads on them
what the pool serves, and records what it saw. Replicas run in their own sessions and
survive this process: a restarted supervisor re-adopts them through their pid files, and
kills tritonserver processes under POOLS_DIR that belong to no pool (no orphans).
`--stop-replicas-on-exit` stops them too (for `make run` shutting everything down).
"""

import logging
import signal
import time

from django.core.management.base import BaseCommand
from django.db import close_old_connections

from config.heartbeats import heartbeat_record
from deployments.drivers import driver_for
from deployments.models import PoolDriver, PoolStatus, ServingPool
from deployments.selectors.pools import local_pools_steady
from deployments.services.pools import pools_root
from deployments.services.reconcile import pool_reconcile
from serving import tritonserver

log = logging.getLogger("deployments.run_pools")
BATCH = 50  # pools per tick


class Command(BaseCommand):
    help = "Supervise local serving pools: restart crashed replicas, reload their models, re-adopt after a restart."

    def add_arguments(self, parser):
        parser.add_argument("--interval", type=float, default=1.0, help="seconds between ticks")
        parser.add_argument(
            "--steady-interval",
            type=float,
            default=None,
            help="seconds between ticks while every local pool is steady (all replicas and models ready); "
            "default: --interval",
        )
        parser.add_argument("--once", action="store_true", help="one tick, then exit")
        parser.add_argument(
            "--stop-replicas-on-exit", action="store_true", help="stop every local replica when this exits"
        )
        parser.add_argument(
            "--kubernetes-every", type=float, default=15.0, help="seconds between reconciles of a Kubernetes pool"
        )

    def handle(self, *args, interval, once, stop_replicas_on_exit, kubernetes_every, steady_interval=None, **options):
        self.stopping = False
        self.kubernetes_every, self.kubernetes_seen = kubernetes_every, {}

        def stop(signum, frame):
            self.stopping = True

        if not once:
            signal.signal(signal.SIGTERM, stop)
            signal.signal(signal.SIGINT, stop)
        self.stdout.write(f"run_pools: supervising local pools under {pools_root()} every {interval}s", ending="\n")
        self.stdout.flush()
        while not self.stopping:
            started = time.monotonic()
            if not once:
                close_old_connections()  # a long-running loop: drop connections the database closed
            self.tick()
            if once:
                break
            wait = interval
            if steady_interval is not None and steady_interval > interval and local_pools_steady():
                wait = steady_interval  # nothing moving: a replica's death is seen within this
            while not self.stopping and time.monotonic() - started < wait:
                time.sleep(0.05)
        if stop_replicas_on_exit:
            for pool in ServingPool.objects.filter(driver=PoolDriver.LOCAL):
                driver_for(pool).stop_all()
        self.stdout.write("run_pools: stopped", ending="\n")

    def tick(self) -> None:
        pools = list(
            ServingPool.objects.filter(driver=PoolDriver.LOCAL)
            .exclude(status=PoolStatus.DELETING)
            .order_by("updated_at")[:BATCH]
        )
        # Kubernetes pools less often: each reconcile is a server-side apply of four objects.
        now = time.monotonic()
        for pool in (
            ServingPool.objects.filter(driver=PoolDriver.KUBERNETES)
            .exclude(status=PoolStatus.DELETING)
            .order_by("updated_at")[:BATCH]
        ):
            if now - self.kubernetes_seen.get(pool.pk, -1e9) >= self.kubernetes_every:
                self.kubernetes_seen[pool.pk] = now
                pools.append(pool)
        for pool in pools:
            if self.stopping:
                return
            try:
                pool_reconcile(pool_id=pool.pk)
            except Exception:  # one broken pool must not stop the supervision of the others
                log.exception("reconcile of pool %s failed", pool.name)
        self.sweep_orphans()
        self.heartbeat(len(pools))

    def sweep_orphans(self) -> None:
        """Kill tritonserver processes under POOLS_DIR whose pool no longer exists."""
        known = {
            str(p)
            for p in ServingPool.objects.filter(driver=PoolDriver.LOCAL).values_list("model_repository", flat=True)
        }
        for pid, cmdline in tritonserver.tritonservers_under(pools_root()):
            repo = next((a.split("=", 1)[1] for a in cmdline if a.startswith("--model-repository=")), "")
            if repo not in known:
                log.warning("killing orphan tritonserver %s (%s)", pid, repo)
                tritonserver.kill_group(pid)

    def heartbeat(self, pools: int) -> None:
        """Tell /healthz this supervisor lives (the "pools" heartbeat)."""
        try:
            heartbeat_record(name="pools", detail={"pools": pools})
        except Exception:  # noqa: BLE001 - no heartbeat table yet: supervision goes on
            pass
