"""python -m bench rollback — how fast the closed loop acts, with real processes.

One process tree on this machine: the web app (gunicorn), a Celery worker and beat, the
local pool supervisor with a real tritonserver replica, the gateway, and a load
generator at --rate requests/s (default 200). For each of --runs rounds, one canary of
each kind on the endpoint (default plan 5 → 25 → 50 → 100 %):
  healthy   the same model as stable (an A/A test: any rollback is a false rollback)
  slow      30 % slower than stable end to end (sleep = 0.3 × the measured p50)
  errors    fails 5 % of requests
Measured per case: seconds from the candidate's first traffic to its weight being 0
(slow, errors: traffic_stopped_at) or 100 % (healthy: entering promoting), and the
client-visible errors (non-200 replies) during the rollout.

Writes var/bench/rollback.json. Goal: median ≤ 10 s to roll back slow and errors, zero
false rollbacks. Not a test.

Options: --runs N (3), --rate R (200), --step-min-seconds S (5; the floor each healthy
step holds before the judge's pass may advance it), --database-url / --broker-url
(default: a fresh database on the local PostgreSQL and Redis db 9 when they answer,
else SQLite and the filesystem broker in the bench's own VAR_DIR).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _fresh_postgres(name: str) -> str:
    """A fresh database on the local PostgreSQL when it answers, else ""."""
    import socket

    try:
        socket.create_connection(("127.0.0.1", 5432), timeout=0.5).close()
        import psycopg

        with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgres://postgres@127.0.0.1:5432/{name}"
    except Exception:  # no local PostgreSQL: the bench falls back to SQLite and says so
        return ""


def _local_redis(db: int) -> str:
    import socket

    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=0.5).close()
        return f"redis://127.0.0.1:6379/{db}"
    except OSError:
        return ""


def _environment(args) -> dict:
    from deployments.tritonserver import free_port

    base = Path(os.environ.get("VAR_DIR", ROOT / "var")).resolve()
    os.environ.setdefault("BENCH_DIR", str(base / "bench"))
    var = base / "bench-rollback"
    shutil.rmtree(var, ignore_errors=True)
    var.mkdir(parents=True)
    env = {
        "VAR_DIR": str(var), "ARTIFACT_ROOT": str(var / "artifacts"), "POOLS_DIR": str(var / "pools"),
        "DATABASE_URL": args.database_url or _fresh_postgres("modelplane_bench_rollback") or f"sqlite:///{var / 'db.sqlite3'}",
        "CELERY_BROKER_URL": args.broker_url or _local_redis(9) or "filesystem://",
        "PORT": str(free_port()), "GATEWAY_PORT": str(free_port()), "DJANGO_SETTINGS_MODULE": "config.settings",
        "PYTHONUNBUFFERED": "1", "MONITORING_PUBLIC_URL": "http://127.0.0.1",
    }
    env["GATEWAY_METRICS_URL"] = f"http://127.0.0.1:{env['GATEWAY_PORT']}/metrics"
    os.environ.update(env)
    return dict(os.environ)  # children need PATH & co. too (Triton starts its python stub through it)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench rollback")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--step-min-seconds", type=float, default=5.0)
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", ""))
    parser.add_argument("--broker-url", default=os.environ.get("BENCH_BROKER_URL", ""))
    args = parser.parse_args(argv)
    import signal

    # A SIGTERM (e.g. from `timeout`) unwinds like Ctrl-C so the child processes are stopped.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    env = _environment(args)

    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group, Permission
    from django.core.management import call_command
    from rest_framework.authtoken.models import Token

    from bench.common import print_table, write_json
    from bench.harness import Load, package_artifact, spawn, stop, wait_for
    from deployments.models import PoolModel, PoolModelState, Rollout
    from deployments.rollout_machine import TERMINAL, State
    from deployments.services import endpoints as endpoint_services
    from deployments.services import pools as pool_services
    from deployments.services import rollouts as rollout_services
    from registry.models import Event, Role, TeamMembership
    from tests.make_onnx import write as write_onnx

    call_command("migrate", interactive=False, verbosity=0)
    var = Path(env["VAR_DIR"])
    User = get_user_model()
    user = User.objects.create_user("bench", password=None)
    team = Group.objects.create(name="bench")
    TeamMembership.objects.create(user=user, team=team, role=Role.ADMIN)
    gateway_user = User.objects.create_user("gateway", password=None)
    gateway_user.user_permissions.add(Permission.objects.get(codename="read_routes"))
    env["GATEWAY_TOKEN"] = Token.objects.create(user=gateway_user).key
    onnx_path = write_onnx(var / "ctr.onnx")
    python = sys.executable
    procs = {
        "web": spawn([python, "-m", "gunicorn", "config.wsgi", f"--bind=127.0.0.1:{env['PORT']}", "--workers=2", "--threads=4"], env, var / "web.log"),
        "worker": spawn([python, "-m", "celery", "-A", "config", "worker", "-Q", "control", "--concurrency=2", "--loglevel=WARNING",
                         "--without-gossip", "--without-mingle"], env, var / "worker.log"),
        "beat": spawn([python, "-m", "celery", "-A", "config", "beat", "--loglevel=WARNING", f"--schedule={var / 'beat'}"], env, var / "beat.log"),
        "pools": spawn([python, "manage.py", "run_pools", "--interval", "0.5", "--stop-replicas-on-exit"], env, var / "pools.log"),
    }
    gateway_url = f"http://127.0.0.1:{env['GATEWAY_PORT']}"
    results: dict[str, list[dict]] = {"healthy": [], "slow": [], "errors": []}
    load = None
    try:
        print(f"bench rollback: starting web, worker, beat, pools (logs in {var})", flush=True)
        stable = package_artifact(team, onnx_path, var)
        pool = pool_services.pool_create(user=user, name="bench", team=team, replicas=1)
        endpoint = endpoint_services.endpoint_create(user=user, name="ctr", pool=pool, stable_artifact=stable, slo_p99_ms=250,
                                                    slo_error_rate=0.01, public=True)  # the load has no key
        wait_for(lambda: PoolModel.objects.filter(artifact=stable, state=PoolModelState.READY).exists(), timeout=120, what="stable READY")
        procs["gateway"] = spawn([python, "-m", "gateway", f"--port={env['GATEWAY_PORT']}", "--host=127.0.0.1",
                                  f"--routes-url=http://127.0.0.1:{env['PORT']}/api/v1/gateway/routes"], env, var / "gateway.log")
        import requests

        def serving() -> bool:
            try:
                return requests.post(f"{gateway_url}/v2/models/ctr/infer", data=Load("").body, timeout=2).status_code == 200
            except requests.RequestException:
                return False

        wait_for(serving, timeout=60, what="gateway serving ctr")
        load = Load(f"{gateway_url}/v2/models/ctr/infer", rate=args.rate, threads=max(4, int(args.rate // 40))).start()
        time.sleep(20)  # warm: the first seconds after start-up are not the steady state
        settled = time.time() - 10
        baseline = sorted(r[3] for r in load.records if r[1] == 200 and r[0] >= settled)
        p50 = baseline[len(baseline) // 2]
        print(f"bench rollback: stable p50 through the gateway {p50 * 1000:.2f} ms at {args.rate:g} req/s", flush=True)
        kinds = {"healthy": {}, "slow": {"delay_s": 0.3 * p50}, "errors": {"error_rate": 0.05}}
        for run in range(args.runs):
            for case, inject in kinds.items():
                candidate = package_artifact(team, onnx_path, var, **inject)
                rollout = rollout_services.rollout_start(
                    user=user, endpoint=endpoint, candidate=candidate, step_min_seconds=args.step_min_seconds,
                    step_min_requests=100, step_deadline_seconds=180, promote_grace_seconds=2,
                )
                onset_wall = time.time()
                done = wait_for(lambda: (r := Rollout.objects.get(pk=rollout.pk)).state in TERMINAL and r, timeout=400,
                                what=f"{case} rollout #{rollout.pk} finished")
                started = done.traffic_started_at
                promoted = Event.objects.filter(object_type="deployments.rollout", object_id=str(rollout.pk), to_state=State.PROMOTING).first()
                if done.traffic_stopped_at:
                    acted, outcome = (done.traffic_stopped_at - started).total_seconds(), "rolled back"
                elif promoted:
                    acted, outcome = (promoted.time - started).total_seconds(), "promoted"
                else:
                    acted, outcome = None, done.state
                errors = load.errors_since(onset_wall)
                statuses = load.error_statuses_since(onset_wall)
                error_times = load.error_times_since(onset_wall)
                traffic_at = (started.timestamp() - onset_wall) if started else None
                results[case].append({"rollout": rollout.pk, "outcome": outcome, "seconds": acted, "client_errors": errors,
                                      "client_error_statuses": statuses, "client_errors_at_s": error_times[:50],
                                      "traffic_started_at_s": traffic_at, "reason": done.reason[:300]})
                where = f"at {error_times[:5]} s, traffic from {traffic_at:.1f} s " if errors and traffic_at is not None else ""
                print(f"  run {run + 1} {case:8s} #{rollout.pk}: {outcome} after {acted if acted is None else round(acted, 1)} s, "
                      f"{errors} client errors {statuses or ''} {where}— {done.reason[:120]}", flush=True)
                if done.state == State.SUCCEEDED:
                    endpoint.refresh_from_db()  # the candidate is the new stable
                time.sleep(2)
    finally:
        if load:
            load.stop()
        for name in ("gateway", "pools", "beat", "worker", "web"):
            stop(procs.get(name))

    def summary(case, expected):
        rows = results[case]
        times = [r["seconds"] for r in rows if r["outcome"] == expected and r["seconds"] is not None]
        return {
            "runs": len(rows), "as_expected": len(times),
            "median_s": round(statistics.median(times), 2) if times else None,
            "max_s": round(max(times), 2) if times else None,
            "client_errors": sum(r["client_errors"] for r in rows),
            "false_rollbacks": sum(1 for r in rows if r["outcome"] == "rolled back") if case == "healthy" else None,
        }

    table = {"healthy": summary("healthy", "promoted"), "slow": summary("slow", "rolled back"), "errors": summary("errors", "rolled back")}
    print_table(
        ["case", "runs", "as expected", "median s", "max s", "client errors", "false rollbacks"],
        [[case, s["runs"], s["as_expected"], s["median_s"], s["max_s"], s["client_errors"], "" if s["false_rollbacks"] is None else s["false_rollbacks"]]
         for case, s in table.items()],
    )
    path = write_json("rollback", {
        "rate_rps": args.rate, "runs": args.runs, "step_min_seconds": args.step_min_seconds, "stable_p50_ms": round(p50 * 1000, 3),
        "cases": table, "runs_detail": results,
        "goals": {"median_rollback_s": 10, "false_rollbacks": 0},
        "false_rollback_count": table["healthy"]["false_rollbacks"],
        "database": env["DATABASE_URL"].split("@")[-1], "broker": env["CELERY_BROKER_URL"].split("@")[-1],
    })
    print(f"wrote {path}")
    return 0
