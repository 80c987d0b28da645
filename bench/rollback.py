"""python -m bench rollback — how fast and how right the closed loop acts, with real processes.

One process tree on this machine: the web app (gunicorn), a Celery worker and beat, the
local pool supervisor with a real tritonserver replica, the gateway, and a load
generator. Two models: the demo CTR model and a two-tower ranker the bench builds itself
(bench/twotower.py: other inputs, other tables), each behind its own endpoint. For each
model and each rate in --rates (default 200 and 20 req/s), --runs rounds of one canary
of each kind:
  healthy   the same model as stable (A/A: any rollback is a false rollback)
  slow      30 % slower than stable end to end (sleep = 0.3 × the measured p50)
  errors    fails 2.5 % of requests
The plan is the one the platform suggests for the rate (monitoring/judge/forecast.py: 10/25/
50/100 % at 200 req/s, 50/100 % at 20 req/s) unless --steps is given; every rollout has
the fair baseline unless --no-fair-baseline. Measured per rollout: seconds from the
candidate's first traffic to its weight being 0 (slow, errors: traffic_stopped_at) or
100 % (healthy: entering promoting); client-visible errors (non-200 replies); for A/A,
the first step's p50 latency of candidate over baseline and over stable (the share
asymmetry the fair baseline removes). Prints the distribution of times (min, median,
p90, max) per model, rate and case and writes var/bench/rollback.json.

Goals: ≥ 20 A/A rollouts → 0 rollbacks; slow and errors rolled back every
time, median ≤ 10 s, max ≤ 15 s; 0 client-visible errors. Not a test.

Default plan (--default-plan): every rollout starts as `modelplane rollout start`
without --steps starts it: the steps the rollout forecast suggests for the endpoint's
observed traffic (monitoring/api/forecast.endpoint_forecast, what the CLI and the form
read; asked before each rollout), everything else the server's defaults (30 s and 200
requests a step, 600 s deadline, 30 s promote grace, fair baseline, the endpoint's
on_inconclusive), and endpoints with the demo's SLO (p99 50 ms, seed_demo). The issue's
case: `--models demo --cases healthy --rates 20 --runs 20 --default-plan`, goal a healthy
candidate promoted in ≥ 19 of 20 runs. The load average before and after goes to the JSON.

Options: --runs N (5: 20 A/A rollouts over 2 models × 2 rates), --rates 200,20,
--models demo,twotower, --cases healthy,slow,errors, --steps 5,25,50,100 (percent),
--default-plan, --no-fair-baseline, --step-min-seconds S (5), --step-deadline-seconds S (180),
--out NAME (var/bench/NAME.json), --database-url / --broker-url (default: a fresh database on the local PostgreSQL and
Redis db 9 when they answer, else SQLite and the filesystem broker in the bench's own
VAR_DIR).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO_SLO_P99_MS = 50.0  # config/management/commands/seed_demo.py: the endpoint the case ran on


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
    from serving.tritonserver import free_port

    base = Path(os.environ.get("VAR_DIR", ROOT / "var")).resolve()
    os.environ.setdefault("BENCH_DIR", str(base / "bench"))
    var = base / "bench-rollback"
    shutil.rmtree(var, ignore_errors=True)
    var.mkdir(parents=True)
    env = {
        "VAR_DIR": str(var),
        "ARTIFACT_ROOT": str(var / "artifacts"),
        "POOLS_DIR": str(var / "pools"),
        "DATABASE_URL": args.database_url
        or _fresh_postgres("modelplane_bench_rollback")
        or f"sqlite:///{var / 'db.sqlite3'}",
        "CELERY_BROKER_URL": args.broker_url or _local_redis(9) or "filesystem://",
        "PORT": str(free_port()),
        "GATEWAY_PORT": str(free_port()),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "PYTHONUNBUFFERED": "1",
        "MONITORING_PUBLIC_URL": "http://127.0.0.1",
    }
    env["GATEWAY_METRICS_URL"] = f"http://127.0.0.1:{env['GATEWAY_PORT']}/metrics"
    os.environ.update(env)
    return dict(os.environ)  # children need PATH & co. too (Triton starts its python stub through it)


def _arguments(argv):
    parser = argparse.ArgumentParser(prog="python -m bench rollback")
    parser.add_argument("--runs", type=int, default=5, help="rounds per model and rate (each: one rollout per case)")
    parser.add_argument("--rates", default="200,20", help="requests/s, comma-separated")
    parser.add_argument("--models", default="demo,twotower")
    parser.add_argument("--cases", default="healthy,slow,errors")
    parser.add_argument(
        "--steps", default="", help="percent per step, e.g. 5,25,50,100 (default: the suggested plan per rate)"
    )
    parser.add_argument(
        "--default-plan",
        action="store_true",
        help="the CLI's default plan: the forecast's steps, the server's defaults, the demo's SLO (50 ms)",
    )
    parser.add_argument("--no-fair-baseline", action="store_true")
    parser.add_argument("--step-min-seconds", type=float, default=5.0)
    parser.add_argument("--step-deadline-seconds", type=float, default=180.0)
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", ""))
    parser.add_argument("--broker-url", default=os.environ.get("BENCH_BROKER_URL", ""))
    parser.add_argument("--out", default="rollback", help="results go to var/bench/OUT.json")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = _arguments(argv)
    if args.default_plan and (args.steps or args.no_fair_baseline):
        print("--default-plan takes the forecast's steps and the fair baseline: drop --steps/--no-fair-baseline")
        return 2
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

    from bench import twotower
    from bench.common import print_table, write_json
    from bench.rollback_report import HEADERS, first_step_latency, summarize, table_rows
    from deployments.models import PoolModel, PoolModelState, Rollout
    from deployments.rollout_machine import TERMINAL, State
    from deployments.services import endpoints as endpoint_services
    from deployments.services import pools as pool_services
    from harness.artifacts import package_artifact
    from harness.load import Load
    from harness.onnx import write as write_onnx
    from harness.processes import spawn, stop, wait_for
    from registry.models import Event, Role, TeamMembership

    call_command("migrate", interactive=False, verbosity=0)
    var = Path(env["VAR_DIR"])
    User = get_user_model()
    user = User.objects.create_user("bench", password=None)
    team = Group.objects.create(name="bench")
    TeamMembership.objects.create(user=user, team=team, role=Role.ADMIN)
    gateway_user = User.objects.create_user("gateway", password=None)
    gateway_user.user_permissions.add(Permission.objects.get(codename="read_routes"))
    env["GATEWAY_TOKEN"] = Token.objects.create(user=gateway_user).key
    models = {
        "demo": {"onnx": write_onnx(var / "ctr.onnx"), "write_dir": None, "body": None, "model_name": "ctr"},
        "twotower": {
            "onnx": twotower.write(var / "twotower.onnx"),
            "write_dir": twotower.write_model_dir,
            "body": twotower.request_body(),
            "model_name": twotower.NAME,
        },
    }
    models = {name: models[name] for name in args.models.split(",") if name}
    rates = [float(r) for r in args.rates.split(",") if r]
    cases = [c for c in args.cases.split(",") if c]
    python = sys.executable
    procs = {
        "web": spawn(
            [python, "-m", "gunicorn", "config.wsgi", f"--bind=127.0.0.1:{env['PORT']}", "--workers=2", "--threads=4"],
            env,
            var / "web.log",
        ),
        "worker": spawn(
            [
                python,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                "-Q",
                "control",
                "--concurrency=2",
                "--loglevel=WARNING",
                "--without-gossip",
                "--without-mingle",
            ],
            env,
            var / "worker.log",
        ),
        "beat": spawn(
            [python, "-m", "celery", "-A", "config", "beat", "--loglevel=WARNING", f"--schedule={var / 'beat'}"],
            env,
            var / "beat.log",
        ),
        "pools": spawn(
            [python, "manage.py", "run_pools", "--interval", "0.5", "--stop-replicas-on-exit"], env, var / "pools.log"
        ),
    }
    gateway_url = f"http://127.0.0.1:{env['GATEWAY_PORT']}"
    rows: list[dict] = []
    load_before = os.getloadavg()
    load = None
    scenarios = []
    import requests

    try:
        print(f"bench rollback: starting web, worker, beat, pools (logs in {var})", flush=True)
        pool = pool_services.pool_create(user=user, name="bench", team=team, replicas=1)
        endpoints = {}
        for name, spec in models.items():
            stable = package_artifact(
                team, spec["onnx"], var, model_name=spec["model_name"], write_dir=spec["write_dir"]
            )
            endpoints[name] = endpoint_services.endpoint_create(
                user=user,
                name=name,
                pool=pool,
                stable_artifact=stable,
                slo_p99_ms=DEMO_SLO_P99_MS if args.default_plan else 250,
                slo_error_rate=0.01,
                public=True,
            )  # the load has no key
            wait_for(
                lambda: PoolModel.objects.filter(artifact=stable, state=PoolModelState.READY).exists(),
                timeout=120,
                what=f"{name} stable READY",
            )
        procs["gateway"] = spawn(
            [
                python,
                "-m",
                "gateway",
                f"--port={env['GATEWAY_PORT']}",
                "--host=127.0.0.1",
                f"--routes-url=http://127.0.0.1:{env['PORT']}/api/v1/gateway/routes",
            ],
            env,
            var / "gateway.log",
        )
        for name, spec in models.items():
            body = spec["body"] or Load("").body
            wait_for(
                lambda: _serves(requests, f"{gateway_url}/v2/models/{name}/infer", body),
                timeout=60,
                what=f"gateway serving {name}",
            )
        for name, spec in models.items():
            for rate in rates:
                endpoint = endpoints[name]
                endpoint.refresh_from_db()
                load = Load(
                    f"{gateway_url}/v2/models/{name}/infer",
                    rate=rate,
                    threads=max(2, int(rate // 40)),
                    body=spec["body"],
                ).start()
                time.sleep(20)  # warm: the first seconds after start-up are not the steady state
                settled = time.time() - 10
                latencies = sorted(r[3] for r in load.records if r[1] == 200 and r[0] >= settled)
                p50 = latencies[len(latencies) // 2]
                steps = _steps(args, user, endpoint, rate)
                scenarios.append(
                    {"model": name, "rate_rps": rate, "stable_p50_ms": round(p50 * 1000, 3), "steps_bp": steps}
                )
                print(
                    f"bench rollback: {name} at {rate:g} req/s: stable p50 through the gateway {p50 * 1000:.2f} ms; "
                    f"steps {[s / 100 for s in steps]} %",
                    flush=True,
                )
                inject = {"healthy": {}, "slow": {"delay_s": 0.3 * p50}, "errors": {"error_rate": 0.025}}
                for run in range(args.runs):
                    for case in cases:
                        candidate = package_artifact(
                            team,
                            spec["onnx"],
                            var,
                            model_name=spec["model_name"],
                            write_dir=spec["write_dir"],
                            **inject[case],
                        )
                        rollout, observed_rps = _start(args, user, endpoint, candidate, steps)
                        onset_wall = time.time()
                        done = wait_for(
                            lambda: (r := Rollout.objects.get(pk=rollout.pk)).state in TERMINAL and r,
                            timeout=900,
                            what=f"{case} rollout #{rollout.pk} finished",
                        )
                        started = done.traffic_started_at
                        promoted = Event.objects.filter(
                            object_type="deployments.rollout", object_id=str(rollout.pk), to_state=State.PROMOTING
                        ).first()
                        if done.traffic_stopped_at and started:
                            acted, outcome = (done.traffic_stopped_at - started).total_seconds(), "rolled back"
                        elif promoted and started:
                            acted, outcome = (promoted.time - started).total_seconds(), "promoted"
                        else:
                            acted, outcome = None, done.state
                        errors = load.errors_since(onset_wall)
                        row = {
                            "model": name,
                            "rate": rate,
                            "case": case,
                            "run": run + 1,
                            "rollout": rollout.pk,
                            "outcome": outcome,
                            "seconds": acted,
                            "client_errors": errors,
                            "client_error_statuses": load.error_statuses_since(onset_wall),
                            "client_errors_at_s": load.error_times_since(onset_wall)[:50],
                            "traffic_started_at_s": round(started.timestamp() - onset_wall, 2) if started else None,
                            "fair_baseline": bool(rollout.baseline_model),
                            "steps_bp": list(rollout.steps_bp),
                            "observed_rate_rps": observed_rps,
                            "reason": done.reason[:300],
                            "latency": first_step_latency(done) if case == "healthy" else None,
                        }
                        rows.append(row)
                        ratio = row["latency"] or {}
                        print(
                            f"  {name} {rate:g} req/s run {run + 1} {case:8s} #{rollout.pk}: {outcome} after "
                            f"{acted if acted is None else round(acted, 1)} s, {errors} client errors"
                            + (
                                f", p50 cand/baseline {ratio.get('ratio_vs_baseline')} cand/stable {ratio.get('ratio_vs_stable')}"
                                if ratio
                                else ""
                            )
                            + f" — {done.reason[:100]}",
                            flush=True,
                        )
                        if done.state == State.SUCCEEDED:
                            endpoint.refresh_from_db()  # the candidate is the new stable
                        time.sleep(3)
                load.stop()
                load = None
    except KeyboardInterrupt:
        print("bench rollback: interrupted; reporting what ran", flush=True)
    finally:
        if load:
            load.stop()
        for name in ("gateway", "pools", "beat", "worker", "web"):
            stop(procs.get(name))

    load_after = os.getloadavg()
    summary = summarize(rows)
    if args.default_plan:
        print("plan: the CLI's default (the forecast's steps for the observed traffic, the server's defaults)")
    print_table(HEADERS, table_rows(summary))
    print(f"load average (1/5/15 min) before {_load(load_before)}, after {_load(load_after)}")
    path = write_json(
        args.out,
        {
            "runs": args.runs,
            "rates_rps": rates,
            "models": list(models),
            "cases": cases,
            "fair_baseline": not args.no_fair_baseline,
            "default_plan": args.default_plan,
            "step_min_seconds": 30.0 if args.default_plan else args.step_min_seconds,
            "step_deadline_seconds": 600.0 if args.default_plan else args.step_deadline_seconds,
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in load_after],
            "scenarios": scenarios,
            "summary": summary,
            "rollouts": rows,
            "goals": {
                "aa_false_rollbacks": 0,
                "rollback_median_s": 10,
                "rollback_max_s": 15,
                "client_errors": 0,
                "default_plan_promoted": "19 of 20 at 20 req/s",
            },
            "database": env["DATABASE_URL"].split("@")[-1],
            "broker": env["CELERY_BROKER_URL"].split("@")[-1],
        },
    )
    print(f"wrote {path}")
    return 0


def _steps(args, user, endpoint, rate: float) -> list[int]:
    """The plan's steps: --steps, the forecast's for the observed traffic (--default-plan: the
    CLI's), else the suggestion for the bench's own plan at `rate`."""
    from harness.processes import wait_for
    from monitoring.api.forecast import endpoint_forecast
    from monitoring.judge.forecast import suggest_steps
    from monitoring.services.canary import judge_config_for

    if args.steps:
        return [int(float(p) * 100) for p in args.steps.split(",")]
    if args.default_plan:  # the forecast reads the collector's samples: let it see the load first
        wait_for(
            lambda: endpoint_forecast(user=user, name=endpoint.name)["observed_rate_rps"],
            timeout=90,
            what=f"the forecast seeing {endpoint.name}'s traffic",
        )
        return endpoint_forecast(user=user, name=endpoint.name)["suggested_steps_bp"]
    return suggest_steps(
        rate,
        judge_config_for(endpoint),
        step_deadline_seconds=args.step_deadline_seconds,
        step_min_seconds=args.step_min_seconds,
        step_min_requests=100,
        baseline=not args.no_fair_baseline,
    )


def _start(args, user, endpoint, candidate, steps):
    """(the rollout, the observed req/s the forecast planned for: --default-plan only)."""
    from deployments.services import rollouts as rollout_services
    from monitoring.api.forecast import endpoint_forecast

    if args.default_plan:  # what `modelplane rollout start` sends without --steps: the forecast's steps, no more
        forecast = endpoint_forecast(user=user, name=endpoint.name)
        rollout = rollout_services.rollout_start(
            user=user, endpoint=endpoint, candidate=candidate, steps_bp=forecast["suggested_steps_bp"]
        )
        return rollout, forecast["observed_rate_rps"]
    rollout = rollout_services.rollout_start(
        user=user,
        endpoint=endpoint,
        candidate=candidate,
        steps_bp=steps,
        step_min_seconds=args.step_min_seconds,
        step_min_requests=100,
        step_deadline_seconds=args.step_deadline_seconds,
        promote_grace_seconds=2,
        fair_baseline=not args.no_fair_baseline,
    )
    return rollout, None


def _load(load: tuple) -> str:
    return " / ".join(f"{x:.2f}" for x in load)


def _serves(requests, url: str, body: str) -> bool:
    try:
        return requests.post(url, data=body, timeout=2).status_code == 200
    except requests.RequestException:
        return False
