"""python -m bench collector [--targets 1000] [--hung 0,50] [--ticks 5]: the built-in
collector's tick on many scrape targets (the goal: >= 1,000 targets per 2 s tick).

The targets are real HTTP servers, each on its own loopback address (127.0.x.y, so no two
share a connection, as replicas on different pods do not), served by one aiohttp process:
each a real tritonserver 2.51's /metrics on a CPU host with three models
(tests/monitoring/data/triton_2.51_cpu_metrics.txt, 74 lines; the models renamed per target,
counters growing at every scrape). `--hung N` adds N more targets that accept a connection
and never answer (a wedged replica). Each tick is the real `metrics_collect` (scrapes, parse,
diff, the locked read of the previous counters, one batched write of states and samples
into the configured database).

Measured side by side in one run: the tick before this change (a thread per scrape with
urllib, 64 at once, prometheus_client's parser, Django's bulk_update; re-created here from
the same functions) and the tick now, without and with connections kept alive between
ticks. Reported per tick: wall time (median, max), the collector's CPU seconds (every
thread of this process) and the PostgreSQL backend's (read from /proc: the database runs
on this machine), beside the load average: on a shared machine the wall time follows the
load, the CPU seconds much less. Prints a table, writes var/bench/collector.json.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import re
import resource
import socket
import statistics
import time
from pathlib import Path

from bench.common import print_table, write_json

CAPTURE = Path(__file__).resolve().parents[1] / "tests" / "monitoring" / "data" / "triton_2.51_cpu_metrics.txt"
MODELS = ("ctr__v1__onnx__baseline", "ctr__v2__onnx", "ctr__v1__onnx")
SAMPLE = re.compile(r"^(nv_inference_\w+)(\{[^}]*\}) (\d+)$")


def address(i: int) -> str:
    return f"127.0.{1 + i // 250}.{1 + i % 250}"


def template(i: int) -> str:
    """Target i's exposition as a %-template: its own model names, counters as %(n)d x base."""
    lines = []
    for line in CAPTURE.read_text().splitlines():
        line = line.replace("%", "%%")
        for k, name in enumerate(MODELS):
            line = line.replace(f'model="{name}"', f'model="t{i}m{k}"')
        match = SAMPLE.match(line)
        if match and int(match.group(3)) > 0 and "pending" not in match.group(1):  # failures stay 0
            line = f"{match.group(1)}{match.group(2)} %(n{int(match.group(3))})d"
        lines.append(line)
    return "\n".join(lines) + "\n"


def _serve(port: int, targets: int, hung: int, ready) -> None:
    from aiohttp import web

    templates = [template(i) for i in range(targets)]
    bases = sorted({int(b) for t in templates[:1] for b in re.findall(r"%\(n(\d+)\)d", t)})
    hits = [0] * targets

    async def metrics(request):
        i = request.app["index"][request.transport.get_extra_info("sockname")[0]]
        hits[i] += 1
        values = {f"n{b}": b * hits[i] * 10 for b in bases}
        return web.Response(text=templates[i] % values, content_type="text/plain")

    async def main():
        app = web.Application()
        app["index"] = {address(i): i for i in range(targets)}
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        for i in range(targets):
            await web.TCPSite(runner, address(i), port, backlog=256).start()
        wedged = []
        for i in range(targets, targets + hung):  # listening, never accepting: connects, never answers
            sock = socket.create_server((address(i), port), backlog=64)
            wedged.append(sock)
        ready.set()
        await asyncio.Event().wait()

    asyncio.run(main())


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _backend_cpu(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _backend_pid() -> int | None:
    from django.db import connection

    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    return pid if Path(f"/proc/{pid}").exists() else None


def legacy_tick(*, targets) -> dict:
    """The tick as it was before this change, from the same parse/diff/store functions: a
    thread per scrape (urllib, 64 at once), prometheus_client's parser on the lines of the
    wanted families, every state written by Django's bulk_update."""
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor
    from datetime import UTC, datetime

    from django.db import transaction
    from django.utils import timezone
    from prometheus_client.parser import text_string_to_metric_families

    from monitoring import lock_objects
    from monitoring.collection import collect, triton_samples
    from monitoring.models import ScrapeState
    from monitoring.services.collector import EPOCH
    from monitoring.services.store import samples_store

    def fetch(target):
        try:
            with urllib.request.urlopen(target.url, timeout=1.0) as response:
                return response.read().decode(), datetime.now(tz=UTC)
        except OSError:
            return None, datetime.now(tz=UTC)

    def snapshot(text):
        keep = [line for line in text.splitlines() if line.startswith(triton_samples.TRITON_FAMILIES)]
        out = {}
        for family in text_string_to_metric_families("\n".join(keep) + "\n"):
            for s in family.samples:
                field = triton_samples.TRITON_COUNTERS.get(
                    s.name.removesuffix("_total")
                ) or triton_samples.TRITON_GAUGES.get(s.name)
                key = f"{field}|{s.labels.get('model', '')}|{s.labels.get('version', '')}"
                out[key] = out.get(key, 0.0) + s.value
        return out

    with ThreadPoolExecutor(64) as pool:
        replies = list(pool.map(fetch, targets))
    keys = [t.key for t in targets]
    ScrapeState.objects.bulk_create(
        [ScrapeState(target=k, scraped_at=EPOCH, counters={}) for k in keys], ignore_conflicts=True
    )
    summary, parts, changed = {"scraped": 0}, [], []
    with transaction.atomic():
        states = lock_objects.scrape_states_for_update(keys)
        for target, (text, at) in zip(targets, replies, strict=True):
            state = states[target.key]
            if text is None:
                continue
            current = snapshot(text)
            if state.scraped_at > EPOCH:
                seconds = (at - state.scraped_at).total_seconds()
                parts.append(
                    triton_samples.triton_deltas(state.counters, current, seconds=seconds, models=target.models)
                )
            state.counters, state.scraped_at, state.ok = current, at, True
            changed.append(state)
            summary["scraped"] += 1
        ScrapeState.objects.bulk_update(changed, ["counters", "scraped_at", "ok", "updated_at"], batch_size=500)
        rows = [
            (ep, var, metric, value)
            for (ep, var), totals in collect.merge(*parts).items()
            for metric, value in collect.derive(totals).items()
        ]
        samples_store(rows=rows, at=timezone.now())
    return summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench collector")
    parser.add_argument("--targets", type=int, default=1000)
    parser.add_argument("--hung", default="0,50", help="comma-separated: wedged targets added, one run each")
    parser.add_argument("--ticks", type=int, default=5)
    args = parser.parse_args(argv)
    hung_counts = [int(h) for h in args.hung.split(",") if h.strip()]
    import django

    django.setup()
    from django.core.management import call_command
    from django.test.utils import override_settings

    from monitoring.collection.targets import ScrapeTarget
    from monitoring.collection.triton_samples import TritonModelMap
    from monitoring.models import MetricSample, ScrapeState
    from monitoring.services.collector import metrics_collect
    from serving.tritonserver import free_port

    call_command("migrate", interactive=False, verbosity=0)
    port = free_port()
    ready = multiprocessing.Event()
    server = multiprocessing.Process(
        target=_serve, args=(port, args.targets, max(hung_counts, default=0), ready), daemon=True
    )
    server.start()
    if not ready.wait(120):
        raise SystemExit("the target server did not start")

    def targets_for(n_hung: int):
        return [
            ScrapeTarget(
                kind="triton",
                url=f"http://{address(i)}:{port}/metrics",
                models={
                    f"t{i}m{k}": TritonModelMap(endpoint=f"bench-ep-{i % 50}", variant=variant)
                    for k, variant in enumerate(("stable-baseline", "canary", "stable"))
                },
            )
            for i in range(args.targets + n_hung)
        ]

    ways = [
        ("before: threads, prometheus_client, bulk_update", legacy_tick, {}),
        ("now: one loop, new connection per scrape", metrics_collect, {"MONITORING_SCRAPE_KEEP_ALIVE": False}),
        ("now: one loop, connections kept alive", metrics_collect, {"MONITORING_SCRAPE_KEEP_ALIVE": True}),
    ]
    backend = _backend_pid()
    rows, results = [], []
    try:
        for n_hung in hung_counts:
            targets = targets_for(n_hung)
            for name, tick, overrides in ways:
                ScrapeState.objects.filter(target__contains=f":{port}/metrics").delete()
                walls, cpus, db_cpus, scraped = [], [], [], []
                with override_settings(MONITORING_SCRAPE_MAX_TARGETS=10**6, **overrides):
                    tick(targets=targets)  # the first scrape only records counters
                    for _ in range(args.ticks):
                        wall, cpu, db = time.perf_counter(), _cpu(), _backend_cpu(backend)
                        summary = tick(targets=targets)
                        walls.append(time.perf_counter() - wall)
                        cpus.append(_cpu() - cpu)
                        db_cpus.append(_backend_cpu(backend) - db)
                        scraped.append(summary["scraped"])
                load = os.getloadavg()
                result = {
                    "way": name,
                    "targets": len(targets),
                    "hung": n_hung,
                    "tick_s": walls,
                    "median_tick_s": statistics.median(walls),
                    "cpu_s": cpus,
                    "median_cpu_s": statistics.median(cpus),
                    "db_cpu_s": db_cpus if backend else None,
                    "scraped": scraped,
                    "loadavg": load,
                }
                results.append(result)
                rows.append(
                    [
                        name,
                        f"{args.targets}+{n_hung}",
                        f"{min(scraped)}..{max(scraped)}",
                        f"{result['median_tick_s']:.2f}",
                        f"{max(walls):.2f}",
                        f"{result['median_cpu_s']:.2f}",
                        f"{statistics.median(db_cpus):.2f}" if backend else "n/a",
                        "yes" if result["median_tick_s"] <= 2.0 else "no",
                        f"{load[0]:.1f}",
                    ]
                )
                print(" | ".join(rows[-1]), flush=True)
    finally:
        server.terminate()
        MetricSample.objects.filter(endpoint__startswith="bench-ep-").delete()
        ScrapeState.objects.filter(target__contains=f":{port}/metrics").delete()
    print()
    print_table(
        [
            "tick",
            "targets+hung",
            "scraped/tick",
            "median s",
            "max s",
            "CPU s/tick",
            "DB CPU s/tick",
            "fits 2 s",
            "load 1m",
        ],
        rows,
    )
    path = write_json(
        "collector", {"targets": args.targets, "ticks": args.ticks, "cpus": os.cpu_count(), "runs": results}
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
