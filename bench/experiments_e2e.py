"""make bench-experiments, part 6: the experiment data path end to end, with its parts running.

A real gateway (`python -m gateway`, one worker, a real tritonserver behind it) publishing on a
NATS JetStream log of its own prefix, and a real `manage.py run_experiment_data` process owning
a chdb store (EXPERIMENT_STORE=chdb:<tmp>), reading the log; PostgreSQL and Redis as the
platform runs them. Measured in one run:

1. ingest end to end: exposures published by the gateway's own writer (gateway/telemetry/exposures.py over
   gateway/telemetry/eventlog.py, in this process: the inference path cannot make 100k requests/s on two
   cores) and feedback batches POSTed to the gateway's door (POST /v2/feedback with the team's
   key, half citing those exposures); events/s from the first publish until the log holds
   nothing unacknowledged (acknowledged only after the store committed);
2. the API door: POST /api/v1/feedback/ (in-process Django, the team's key) publishing onto the
   same log; events/s at the door;
3. the store stopped: the owner killed for `outage_s` while exposures go on at `outage_rate`/s;
   restarted, the time the backlog takes to drain;
4. every exposure and event id counted once: a replayed exposure batch and a resent feedback
   batch are in the log twice and in the store once; the store is read at the end (the owner
   stopped, this process opens it) and compared with what was published.

Prints a table and returns the figures (bench/experiments.py writes them). Not a test.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

NATS_URL = os.environ.get("BENCH_NATS_URL", "nats://127.0.0.1:4222")  # a server of its own when the shared one is full
ROOT = Path(__file__).resolve().parent.parent


def _publish_exposures(prefix: str, endpoint, experiment, arms, rids: list[str], *, rate: float | None = None) -> float:
    """Exposures of `rids` through the gateway's writer onto the log; seconds taken. `rate`: paced."""
    from deployments.selectors.gateway_routes import team_label
    from gateway.telemetry.eventlog import NatsLog
    from gateway.telemetry.exposures import ExposureLog

    async def go() -> float:
        log = ExposureLog(None, log=NatsLog(NATS_URL, prefix), capacity=len(rids) + 1, batch=5000)
        log.teams = {endpoint.name: team_label(endpoint.team)}
        started = time.perf_counter()
        step = 5000
        for i in range(0, len(rids), step):
            for j, rid in enumerate(rids[i : i + step]):
                log.record(rid, experiment.public_id, endpoint.name, arms[(i + j) % 2], f"u{(i + j) % 20000}", None)
            while log.buffer:
                await log.flush()
            if rate:
                ahead = (i + step) / rate - (time.perf_counter() - started)
                if ahead > 0:
                    await asyncio.sleep(ahead)
        await log.close()
        return time.perf_counter() - started

    return asyncio.run(go())


def _drained(reader, *, timeout: float, owner=None) -> float | None:
    """Seconds until the log holds nothing unacknowledged (exposures and every feedback source)."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if owner is not None and owner.poll() is not None:
            raise RuntimeError("the experiment-data process exited")
        waiting = reader.exposures_waiting()[0] + sum(reader.waiting(s) for s in reader.feedback_subjects())
        if waiting == 0:
            return time.perf_counter() - started
        time.sleep(0.5)
    return None


def _feedback_door(stack, tenant, batches: list[list[dict]], clients: int = 4) -> tuple[float, dict]:
    """POST every batch to the gateway's door (retrying a 503/429 as a client does); (seconds, statuses)."""
    import requests

    statuses: dict[int, int] = {}

    def send(batch):
        session = requests.Session()
        body = json.dumps({"endpoint": tenant.name, "events": batch})
        while True:
            reply = stack.feedback(tenant, body.encode(), session=session)
            statuses[reply.status_code] = statuses.get(reply.status_code, 0) + 1
            if reply.status_code == 202:
                return
            time.sleep(0.2)

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(send, batches))
    return time.perf_counter() - started, statuses


def _events(tag: str, n: int, rids: list[str], offset: int = 0) -> list[dict]:
    """n click events, half citing exposures of `rids`, half request ids nobody served."""
    return [
        {"event_id": f"{tag}{offset + i}", "type": "click",
         "request_id": rids[(offset + i) * 7 % len(rids)] if i % 2 else f"{tag}-none-{offset + i}"}
        for i in range(n)
    ]  # fmt: skip


def _api_door(tenant, events: list[list[dict]]) -> float:
    from rest_framework.test import APIClient

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {tenant.key}")
    started = time.perf_counter()
    for batch in events:
        reply = api.post(
            "/api/v1/feedback/", {"endpoint": tenant.name, "events": batch}, format="json", SERVER_NAME="localhost"
        )
        assert reply.status_code == 202 and reply.json().get("queued"), reply.content
    return time.perf_counter() - started


def data_path(
    *, exposures: int = 300_000, feedback: int = 100_000, api_events: int = 50_000, outage_s: float = 60.0,
    outage_rate: float = 20_000.0,
) -> dict:  # fmt: skip
    from django.conf import settings

    from experiments.eventlog.reader import NatsReader
    from harness import factories
    from harness.feedback_stack import FeedbackStack
    from harness.onnx import write as write_onnx
    from harness.processes import spawn, stop

    work = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    tag = f"e2e{uuid.uuid4().hex[:6]}"
    prefix = f"bench{tag}"
    store_path = work / "store"
    team = factories.team(f"bench-{tag}")
    user = factories.user(f"bench-{tag}-u")
    factories.member(user, team, "deployer")
    stack = FeedbackStack(
        work,
        write_onnx(work / "m.onnx"),
        settings.EXPOSURE_STREAM_URL or settings.CELERY_BROKER_URL,
        gateway_env={
            "GATEWAY_EVENT_LOG_URL": NATS_URL,
            "GATEWAY_EVENT_LOG_PREFIX": prefix,
            "GATEWAY_FEEDBACK_EVENTS_PER_S": "10000000",
            "GATEWAY_MAX_BODY_BYTES": str(4 << 20),
        },
    )
    tenant = stack.add(team, user, f"bench-{tag}", public=False)
    owner_env = dict(
        os.environ,
        EXPERIMENT_STORE=f"chdb:{store_path}",
        EVENT_LOG_URL=NATS_URL,
        EVENT_LOG_PREFIX=prefix,
        VAR_DIR=str(work / "var"),
        FEEDBACK_INGEST_EVENTS_PER_RUN=os.environ.get("FEEDBACK_INGEST_EVENTS_PER_RUN", "100000"),
        PYTHONPATH=str(ROOT),
    )
    out: dict = {"load_avg_before": os.getloadavg(), "prefix": prefix}
    owner = None
    settings.EVENT_LOG_URL, settings.EVENT_LOG_PREFIX = NATS_URL, prefix  # the API door publishes on this log
    with stack:
        reader = NatsReader(NATS_URL, prefix)
        try:
            endpoint, experiment = tenant.endpoint, tenant.experiment
            arms = [a.name for a in experiment.arms.order_by("pk")]
            owner = spawn([sys.executable, "manage.py", "run_experiment_data"], owner_env, work / "owner-1.log")
            time.sleep(3)
            # 1. end to end: exposures through the gateway's writer, feedback through the gateway's door
            rids = [f"{tag}-r{i}" for i in range(exposures)]
            batches = [_events("g", 2000, rids, offset) for offset in range(0, feedback, 2000)]
            started = time.perf_counter()
            with ThreadPoolExecutor(1) as pool:
                publishing = pool.submit(_publish_exposures, prefix, endpoint, experiment, arms, rids)
                door_s, door_statuses = _feedback_door(stack, tenant, batches)
                publish_s = publishing.result()
            drain_s = _drained(reader, timeout=600, owner=owner)
            total_s = time.perf_counter() - started
            out["end_to_end"] = {
                "exposures": exposures, "feedback_events": feedback, "exposure_publish_s": publish_s,
                "gateway_door_s": door_s, "gateway_door_events_per_s": feedback / door_s,
                "gateway_door_statuses": door_statuses, "seconds": total_s,
                "drained_after_publish_s": drain_s, "events_per_s": (exposures + feedback) / total_s,
            }  # fmt: skip
            # 4. duplicates: the first 20 000 exposures published again, the first feedback batch resent
            _publish_exposures(prefix, endpoint, experiment, arms, rids[:20_000])
            _feedback_door(stack, tenant, batches[:1], clients=1)
            # 2. the API door onto the same log
            api_batches = [_events("a", 1000, rids, offset) for offset in range(0, api_events, 1000)]
            api_s = _api_door(tenant, api_batches)
            out["api_door"] = {
                "events": api_events,
                "batch": 1000,
                "seconds": api_s,
                "events_per_s": api_events / api_s,
            }
            out["api_drained_s"] = _drained(reader, timeout=300, owner=owner)
            # 3. the store stopped under outage_rate exposures/s, then restarted
            stop(owner)
            outage_rids = [f"{tag}-o{i}" for i in range(int(outage_s * outage_rate))]
            load_during = os.getloadavg()
            published_s = _publish_exposures(prefix, endpoint, experiment, arms, outage_rids, rate=outage_rate)
            waiting = reader.exposures_waiting()[0]
            owner = spawn([sys.executable, "manage.py", "run_experiment_data"], owner_env, work / "owner-2.log")
            backlog_s = _drained(reader, timeout=900, owner=owner)
            out["outage"] = {
                "seconds": outage_s, "rate": outage_rate, "exposures": len(outage_rids),
                "published_s": published_s, "messages_waiting_at_restart": waiting,
                "drained_after_restart_s": backlog_s, "load_avg": load_during,
            }  # fmt: skip
            time.sleep(2)
        finally:
            stop(owner)
            out["counted"] = _count(store_path, experiment, tag)
            reader.delete_streams()
            reader.close()
    published = exposures + len(outage_rids)
    events = feedback + api_events
    out["counted"].update(
        exposures_published=published + 20_000, exposures_expected=published,
        feedback_published=events + 2000, feedback_expected=events,
        exposures_lost=published - out["counted"]["exposures"], events_lost=events - out["counted"]["feedback"],
    )  # fmt: skip
    out["load_avg_after"] = os.getloadavg()
    return out


def _count(store_path: Path, experiment, tag: str) -> dict:
    """What the owner's store holds for this run: exposures (each request id once) and feedback rows."""
    from django.conf import settings

    from experiments.store import columnar_store

    store = columnar_store(f"chdb:{store_path}", db=settings.EXPERIMENT_STORE_DB)
    db = store.db
    exposures = store.frame(
        f"SELECT uniqExact(request_id) AS n, count() AS rows FROM {db}.exposures WHERE experiment = {experiment.pk}"
    )
    feedback = store.frame(f"SELECT count() AS n FROM {db}.feedback WHERE endpoint = '{experiment.endpoint.name}'")
    return {
        "exposures": int(exposures["n"][0]),
        "exposure_rows_before_merge": int(exposures["rows"][0]),
        "feedback": int(feedback["n"][0]),
    }


def main(argv: list[str]) -> int:
    import argparse

    import django

    parser = argparse.ArgumentParser(prog="python -m bench experiments_e2e")
    parser.add_argument("--exposures", type=int, default=300_000)
    parser.add_argument("--feedback", type=int, default=100_000)
    parser.add_argument("--api-events", type=int, default=50_000)
    parser.add_argument("--outage-s", type=float, default=60.0)
    parser.add_argument("--outage-rate", type=float, default=20_000.0)
    parser.add_argument("--json", default="", help="Write the figures here too.")
    parser.add_argument("--tick-experiments", type=int, default=10_000, help="0: skip the tick at scale.")
    parser.add_argument("--skip-data-path", action="store_true")
    args = parser.parse_args(argv)
    django.setup()
    out = {}
    if args.tick_experiments:
        print(f"the whole analysis tick at {args.tick_experiments:,} running experiments (chdb) ...", flush=True)
        out["tick"] = t = tick_at_scale(args.tick_experiments)
        print(f"  {t['experiments']:,} experiments: tick {t['tick_seconds']:.1f} s ({t['ms_per_experiment']:.2f} ms each), "
              f"{t['tick']}, load {t['load_avg'][0]:.1f}", flush=True)  # fmt: skip
    if args.skip_data_path:
        if args.json:
            Path(args.json).write_text(json.dumps(out, default=str))
        return 0
    out |= data_path(
        exposures=args.exposures, feedback=args.feedback, api_events=args.api_events, outage_s=args.outage_s,
        outage_rate=args.outage_rate,
    )  # fmt: skip
    print_e2e(out)
    if args.json:
        Path(args.json).write_text(json.dumps(out, default=str))
    return 0


def print_e2e(out: dict) -> None:
    from bench.common import print_table

    e, a, o, c = out["end_to_end"], out["api_door"], out["outage"], out["counted"]
    print_table(
        ["what", "figure", "detail"],
        [
            ["ingest end to end (gateway → NATS → chdb)", f"{e['events_per_s']:,.0f} events/s",
             f"{e['exposures']:,} exposures + {e['feedback_events']:,} feedback in {e['seconds']:.1f} s"],
            ["  the gateway's feedback door", f"{e['gateway_door_events_per_s']:,.0f} events/s",
             f"batches of 2 000, 4 clients; {e['gateway_door_statuses']}"],
            ["the API door (onto the log)", f"{a['events_per_s']:,.0f} events/s", f"batches of {a['batch']:,}"],
            [f"store stopped {o['seconds']:.0f} s under {o['rate']:,.0f} exposures/s",
             f"drained in {o['drained_after_restart_s'] or float('nan'):.1f} s",
             f"{o['exposures']:,} exposures, {o['messages_waiting_at_restart']} messages waiting"],
            ["lost", f"{c['exposures_lost']} exposures, {c['events_lost']} events",
             f"stored {c['exposures']:,} of {c['exposures_expected']:,}; {c['feedback']:,} of {c['feedback_expected']:,}"],
            ["duplicates counted once", f"{c['exposures_published'] - c['exposures']:,} exposures, "
             f"{c['feedback_published'] - c['feedback']:,} events",
             "a replayed exposure batch and a resent feedback batch"],
            ["load average (1 min) before / after", f"{out['load_avg_before'][0]:.1f} / {out['load_avg_after'][0]:.1f}", ""],
        ],
    )  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))


def _clone(row, **changes):
    """A new unsaved row with `row`'s field values and `changes` (bulk set-up only)."""
    model = type(row)
    values = {f.attname: getattr(row, f.attname) for f in model._meta.concrete_fields if not f.primary_key}
    return model(**{**values, **changes})


def tick_at_scale(n: int = 10_000, units: int = 100, store_path: Path | None = None) -> dict:
    """The whole analysis tick (statistics pass, guardrails, analysis, saved readings) over `n`
    running experiments with a chdb store in this process: one experiment made through the
    services, n - 1 bulk copies of its endpoint, experiment and arms (set-up only), `units` units
    of exposures per arm each, a fifth of them clicked."""
    from django.conf import settings

    from bench import experiments_scale as sc
    from deployments.models import Endpoint
    from experiments.models import Arm, Experiment
    from experiments.services import ticks
    from experiments.store import columnar_store

    tag = f"bench-tick-{uuid.uuid4().hex[:6]}"
    fx = sc._fixture(tag)
    started = time.perf_counter()
    store = columnar_store(f"chdb:{store_path or Path(tempfile.mkdtemp(prefix='bench-tick-')) / 'store'}",
                           db=settings.EXPERIMENT_STORE_DB)  # fmt: skip
    base_ep, base_exp = fx["endpoint"], Experiment.objects.get(pk=fx["experiment"].pk)  # running, started
    base_arms = list(base_exp.arms.order_by("pk"))
    others = list(Experiment.objects.filter(state="running").exclude(pk=base_exp.pk).values_list("pk", flat=True))
    Experiment.objects.filter(pk__in=others).update(state="stopped")  # only this benchmark's experiments run
    try:
        endpoints = Endpoint.objects.bulk_create(
            [_clone(base_ep, name=f"{tag}-{i}") for i in range(1, n)], batch_size=2000
        )
        experiments = Experiment.objects.bulk_create(
            [_clone(base_exp, endpoint_id=ep.pk, token_key=uuid.uuid4().hex) for ep in endpoints], batch_size=2000
        )
        Arm.objects.bulk_create(
            [_clone(arm, experiment_id=x.pk) for x in experiments for arm in base_arms], batch_size=5000
        )
        every = [base_exp.pk] + [x.pk for x in experiments]
        arms = {}
        for exp_id, arm_id in Arm.objects.filter(experiment_id__in=every).values_list("experiment_id", "pk"):
            arms.setdefault(exp_id, []).append(arm_id)
        now = time.time() - 60
        rows, clicks = [], []
        for exp_id in every:
            for arm_id in arms[exp_id]:
                for u in range(units):
                    rid = f"{exp_id}-{arm_id}-{u}"
                    rows.append({"request_id": rid, "experiment": exp_id, "arm": arm_id, "unit_key": f"u{u}",
                                 "time": now, "team": fx["team"].pk})  # fmt: skip
                    if u % 5 == 0:
                        clicks.append({"event_id": f"c-{rid}", "type": "click", "request_id": rid,
                                       "time": datetime.fromtimestamp(now + 1, UTC)})  # fmt: skip
            if len(rows) >= 200_000:
                store.write_exposures(rows)
                rows = []
        if rows:
            store.write_exposures(rows)
        running = list(Experiment.objects.filter(pk__in=every))
        for i in range(0, len(clicks), 50_000):
            store.write_feedback(
                team=fx["team"], endpoint_name=base_ep.name, experiments=running, events=clicks[i : i + 50_000]
            )
        setup_s = time.perf_counter() - started
        load = os.getloadavg()
        t0 = time.perf_counter()
        tick = ticks.experiments_analyze_all(budget_s=3600, store=store)
        seconds = time.perf_counter() - t0
        return {
            "experiments": len(every), "units_per_arm": units, "exposures": len(every) * 2 * units,
            "setup_s": setup_s, "tick_seconds": seconds, "ms_per_experiment": 1000 * seconds / max(1, tick["analysed"]),
            "tick": tick, "stats_pass_s": tick.get("stats_pass_s"), "load_avg": load, "load_avg_after": os.getloadavg(), "store": "chdb",
        }  # fmt: skip
    finally:
        Experiment.objects.filter(endpoint__name__startswith=f"{tag}-").delete()
        Endpoint.objects.filter(name__startswith=f"{tag}-").delete()
        Experiment.objects.filter(pk__in=others).update(state="running")
        sc._cleanup([fx])
        store.drop()
