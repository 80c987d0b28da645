"""make bench-experiments, parts 2 and 4: feedback ingest and the analysis tick at scale.

Feedback ingest, side by side in one run on the same data (PostgreSQL: COPY into a
temporary table, then one INSERT … SELECT that attributes every event in the server):
- the stream door: entries of `batch_size` events on the Redis feedback stream exactly as
  the gateway relays them, drained by experiments.services.ingest.ingest_feedback (the
  Celery task's code: parse by the shared rules, one transaction per read, attribution,
  ack, trim) — what a busy gateway feeds;
- the API door: the same batches POSTed to /api/v1/feedback/ in-process with the team's
  inference key (DRF's JSON parsing included).
Half of each batch's events name exposures that exist (attributed), the rest unknown ids.

The analysis tick: `n` running experiments (an endpoint, two arms and 200 units of
exposures and clicks each), one experiments.services.ticks.experiments_analyze_all, the
time per tick and per experiment. Everything made here is deleted afterwards.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path


def _fixture(tag: str):
    """A throw-away team, pool, two artifacts and endpoint with a running experiment."""
    from deployments.services.keys import inference_key_create
    from experiments.services import online as services
    from harness import factories
    from harness.onnx import write as write_onnx

    work = Path(tempfile.mkdtemp(prefix="bench-exp-"))
    onnx = write_onnx(work / "m.onnx")
    team = factories.team(tag)
    user = factories.user(f"{tag}-u")
    factories.member(user, team, "deployer")
    pool = factories.pool(team, ready_replicas=1)
    stable = factories.artifact(team, onnx, work, model_name=tag)
    candidate = factories.artifact(team, onnx, work, model_name=tag)
    endpoint = factories.endpoint(pool, stable, name=tag)
    exp = services.experiment_create(user=user, endpoint=endpoint, name="bench", candidates=[candidate])
    services.experiment_start(user=user, experiment=exp)
    _, secret = inference_key_create(user=user, team=team, name="bench")
    return {
        "team": team,
        "user": user,
        "pool": pool,
        "endpoint": endpoint,
        "experiment": exp,
        "key": secret,
        "stable": stable,
        "candidate": candidate,
        "work": work,
        "endpoints": [endpoint],
        "experiments": [exp],
    }


def _another_experiment(fx: dict, i: int):
    """One more endpoint of the fixture's pool and team running an experiment of the same two artifacts."""
    from experiments.services import online as services
    from harness import factories

    endpoint = factories.endpoint(fx["pool"], fx["stable"], name=f"{fx['endpoint'].name}-{i}")
    exp = services.experiment_create(user=fx["user"], endpoint=endpoint, name="bench", candidates=[fx["candidate"]])
    services.experiment_start(user=fx["user"], experiment=exp)
    fx["endpoints"].append(endpoint)
    fx["experiments"].append(exp)
    return endpoint, exp


def _expose(exp, units: int, per_unit: int, prefix: str) -> list[str]:
    from django.utils import timezone

    from experiments.store import default_store

    arms = list(exp.arms.all())
    now = timezone.now()
    rows = [
        {"request_id": f"{prefix}-{a.pk}-{u}-{j}", "experiment": exp.pk, "arm": a.pk, "unit_key": f"u{u}", "time": now}
        for a in arms
        for u in range(units)
        for j in range(per_unit)
    ]
    default_store().write_exposures(rows)
    return [r["request_id"] for r in rows]


def feedback_ingest(batches: int, batch_size: int) -> dict:
    import redis
    from django.conf import settings
    from django.db import connection
    from rest_framework.test import APIClient

    from experiments.models import Exposure, Feedback
    from experiments.services import ingest

    if connection.vendor != "postgresql":
        return {"skipped": f"COPY needs PostgreSQL (DATABASE_URL); this database is {connection.vendor}"}
    if not settings.EXPOSURE_STREAM_URL:
        return {"skipped": "no Redis stream (EXPOSURE_STREAM_URL or CELERY_BROKER_URL=redis://…)"}
    tag = f"bench-fb-{int(time.time())}"
    fx = _fixture(tag)
    exp, endpoint = fx["experiment"], fx["endpoint"]
    rids = _expose(exp, batch_size // 4, 1, tag)  # two arms: batch_size / 2 exposures named per batch
    client = redis.Redis.from_url(settings.EXPOSURE_STREAM_URL)
    client.delete(ingest.FEEDBACK_STREAM)
    out = {
        "batch_size": batch_size,
        "batches": batches,
        "events": batches * batch_size,
        "load_avg_before": os.getloadavg(),
    }

    def events(door: str, b: int) -> list[dict]:
        return [
            {"event_id": f"{door}-{b}-{i}", "type": "click", "request_id": rids[i] if i < len(rids) else f"none-{i}"}
            for i in range(batch_size)
        ]

    try:
        # the stream door: entries as the gateway writes them, old enough to be ingested at once
        past = int((time.time() - 10) * 1000)
        for b in range(batches):
            body = json.dumps(events("s", b), separators=(",", ":"))
            client.xadd(ingest.FEEDBACK_STREAM, {"e": endpoint.name, "k": "k-bench", "b": body}, id=f"{past}-{b + 1}")
        t0 = time.perf_counter()
        totals = ingest.ingest_feedback(client)
        stream_s = time.perf_counter() - t0
        assert totals["received"] == batches * batch_size, totals
        out["stream"] = {"seconds": stream_s, "events_per_s": batches * batch_size / stream_s, "counts": totals}
        out["stream_left"] = client.xlen(ingest.FEEDBACK_STREAM)
        # the API door: the same batches through DRF with the team's key
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {fx['key']}")
        t0 = time.perf_counter()
        for b in range(batches):
            r = api.post(
                "/api/v1/feedback/",
                {"endpoint": endpoint.name, "events": events("a", b)},
                format="json",
                SERVER_NAME="localhost",
            )
            assert r.status_code == 202, r.content[:300]
        api_s = time.perf_counter() - t0
        out["api"] = {"seconds": api_s, "events_per_s": batches * batch_size / api_s}
        t0 = time.perf_counter()
        r = api.post(
            "/api/v1/feedback/",
            {"endpoint": endpoint.name, "events": events("a", 0)},
            format="json",
            SERVER_NAME="localhost",
        )
        out["api_duplicate_batch_events_per_s"] = batch_size / (time.perf_counter() - t0)
        assert r.json()["duplicates"] == batch_size
        out["load_avg_after"] = os.getloadavg()
    finally:
        Feedback.objects.filter(endpoint_name=endpoint.name).delete()
        Exposure.objects.filter(experiment=exp).delete()
        _cleanup([fx])
    return out


def analysis_tick(n: int, units: int = 100) -> dict:
    from django.db import connection
    from django.utils import timezone

    from experiments.models import Experiment, Exposure, Feedback
    from experiments.services import ticks
    from experiments.store import default_store

    tag = f"bench-an-{int(time.time())}"
    t0 = time.perf_counter()
    fx = _fixture(tag)
    try:
        for i in range(n):
            endpoint, exp = (fx["endpoint"], fx["experiment"]) if i == 0 else _another_experiment(fx, i)
            rids = _expose(exp, units, 2, f"{tag}-{i}")
            clicks = [
                {"event_id": f"c{j}", "type": "click", "request_id": rid, "time": timezone.now()}
                for j, rid in enumerate(rids[::5])
            ]
            default_store().write_feedback(
                team=fx["team"], endpoint_name=endpoint.name, experiments=[exp], events=clicks
            )
            if (i + 1) % 100 == 0:
                print(f"  {i + 1}/{n} experiments prepared", flush=True)
        setup_s = time.perf_counter() - t0
        ids = [x.pk for x in fx["experiments"]]
        others = Experiment.objects.filter(state="running").exclude(pk__in=ids).count()
        load = os.getloadavg()
        t0 = time.perf_counter()
        tick = ticks.experiments_analyze_all(budget_s=3600)
        seconds = time.perf_counter() - t0
        return {
            "experiments": n,
            "other_running": others,
            "units_per_arm": units,
            "setup_seconds": setup_s,
            "tick_seconds": seconds,
            "ms_per_experiment": 1000 * seconds / max(1, tick["analysed"]),
            "tick": tick,
            "load_avg": load,
            "load_avg_after": os.getloadavg(),
            "database": connection.vendor,
        }
    finally:
        ids = [x.pk for x in fx["experiments"]]
        Feedback.objects.filter(experiment_id__in=ids).delete()
        Feedback.objects.filter(endpoint_name__startswith=tag).delete()
        Exposure.objects.filter(experiment_id__in=ids).delete()
        _cleanup([fx])


def _cleanup(fixtures: list[dict]) -> None:
    import shutil

    from experiments.models import Experiment

    for fx in fixtures:
        Experiment.objects.filter(pk__in=[x.pk for x in fx["experiments"]]).delete()
        for row in (*fx["endpoints"], fx["pool"]):
            try:
                row.delete()
            except Exception:  # noqa: BLE001 - protected rows (artifacts, keys) stay; they are labelled bench-*
                pass
        shutil.rmtree(fx["work"], ignore_errors=True)


def columnar_store(experiments: int = 10_000, exposures: int = 2_000_000, events: int = 200_000) -> dict:
    """The columnar store (chdb, in this process) alone: exposures written per second, feedback
    judged and written per second (batches of 20 000, half attributed), and the statistics
    statement over `experiments` running experiments (the tick's one pass; no Django rows)."""
    import uuid

    import numpy as np

    from experiments.columnar.stats import STATS_SQL
    from experiments.store import columnar_store as open_store

    store = open_store("chdb", db=f"bench_{uuid.uuid4().hex[:10]}")
    try:
        rng = np.random.default_rng(0)
        t0 = time.perf_counter()
        batch = 200_000
        now = time.time() - 600
        for start in range(0, exposures, batch):
            n = min(batch, exposures - start)
            exp = rng.integers(1, experiments + 1, n)
            store.write_exposures(
                [
                    {"request_id": f"r{start + i}", "experiment": int(exp[i]), "arm": int(exp[i]) * 2 + (i & 1),
                     "unit_key": f"u{(start + i) % 50_000}", "time": now, "team": 1}
                    for i in range(n)
                ]
            )  # fmt: skip
        exposure_s = time.perf_counter() - t0

        class Team:
            pk = 1

        class Exp:
            def __init__(self, pk):
                self.pk, self.state, self.attribution_window_s = pk, "running", 3600

        t0 = time.perf_counter()
        for start in range(0, events, 20_000):
            evs = [
                {"event_id": f"e{start + i}", "type": "click", "value": 1.0, "time": now + 1,
                 "request_id": f"r{(start + i) * 7 % exposures}" if i % 2 else f"none-{i}"}
                for i in range(20_000)
            ]  # fmt: skip
            store.write_feedback(
                team=Team(), endpoint_name="bench", experiments=[Exp(e) for e in range(1, 101)], events=evs
            )
        feedback_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        rows = store.conn.frame(STATS_SQL.replace("{db}", store.db), {"exps": list(range(1, experiments + 1))})
        stats_s = time.perf_counter() - t0
        return {
            "experiments": experiments,
            "exposures": exposures,
            "exposures_per_s": exposures / exposure_s,
            "feedback_events": events,
            "feedback_events_per_s": events / feedback_s,
            "stats_query_s": stats_s,
            "stats_rows": int(len(rows)),
            "load_avg": os.getloadavg(),
        }
    finally:
        store.drop()
