"""User-affinity vs round-robin routing of a generative recommender (bench/gr.py's routing row).

Two real tritonservers serve the same gr-fp32 model behind the real gateway; each replica's
prefix cache holds about CACHE_SHARE (60 %) of the users (its byte bound from one user's full-window
entry, measured in-process with the same runtime), so a replica can keep its half of the users
but not all of them. Clients (`concurrency` closed-loop workers, each with its own users, one
request of a user at a time) send each user's history with one new event per request, as a
session grows. The same run twice, with fresh caches: the route entry with `affinity: user`
(gateway/table/affinity.py) and without (the gateway's least-outstanding pick, ties round robin).

Per mode: requests/s, client p50/p99, and the cache results the replicas report (hit and
grown reuse the cached prefix; miss and rebased encode the window). The two modes run at the
same concurrency, so "requests/s at equal p99" is read off them: when affinity's p99 is not
higher, its requests/s ratio is a lower bound of the ratio at equal p99 (latency rises with
load on both curves).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import requests

from harness.gateway import GatewayProcess, start_triton
from harness.gr import kserve_signature, metric_value
from registry.gr import runtime as rt
from registry.gr.triton import request_body, write_gr_model

CACHE_SHARE = 0.6  # of all users, per replica: enough for its half under affinity, not for all
MODELS = {"round_robin": "gr__v1__gr-fp32-c1", "affinity": "gr__v2__gr-fp32-c1"}  # one per mode: fresh caches
RESULTS = ("hit", "grown", "rebased", "miss")


def entry_bytes(graphs_paths: dict, items: rt.ItemMap, history: tuple, max_history: int, user: str) -> int:
    """Bytes one user's full-window entry takes in the prefix cache (the same runtime as Triton's)."""
    cache = rt.PrefixCache(1 << 40)
    recommender = rt.Recommender(
        rt.Graphs(graphs_paths), trie=None, items=items, levels=1, codes_per_level=1, max_history=max_history
    )
    recommender.cache = cache
    recommender.prefix(user, tuple(history[-max_history:]))
    return cache.bytes


def _table(replicas: list[str], mode: str) -> dict:
    affinity, model = mode == "affinity", MODELS[mode]
    variant = {
        "name": "v1-gr-fp32-c1",
        "model_version": "1",
        "triton_model": model,
        "role": "stable",
        "weight_bp": 10000,
        "replicas": replicas,
        "signature": kserve_signature(model),
    }
    entry = {"name": "recs", "auth": {"public": True}, "timeout_ms": 10000, "variants": [variant]}
    if affinity:
        entry["affinity"] = "user"
    return {"version": f"bench-{mode}", "endpoints": [entry]}


def _drive(url: str, sessions: list[list], seconds: float, concurrency: int) -> list[float]:
    """Closed loop: worker w sends the sessions w, w + concurrency, ... in turn, one new event each."""
    latencies: list[float] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def worker(index: int) -> None:
        mine = sessions[index::concurrency]
        turn, local = 0, []
        with requests.Session() as session:
            while time.monotonic() < stop_at:
                user, history, events = mine[turn % len(mine)]
                step = turn // len(mine)  # this user's request number
                sent = list(history) + [events[k % len(events)] for k in range(step + 1)]  # one more event
                started = time.perf_counter()
                reply = session.post(url, json=request_body(user, sent[-256:], top_k=10), timeout=30)
                local.append(time.perf_counter() - started)
                reply.raise_for_status()
                turn += 1
        with lock:
            latencies.extend(local)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies


def _lookups(servers, model: str) -> dict:
    out = dict.fromkeys(RESULTS, 0.0)
    for server in servers:
        text = requests.get(server.metrics_url, timeout=10).text
        for result in RESULTS:
            out[result] += metric_value(text, "gr_cache_lookups_total", model=model, result=result)
    return out


def measure(
    *,
    graphs: dict,
    catalog_dir: Path,
    serving: dict,
    items: rt.ItemMap,
    users: list[tuple[tuple, int]],
    catalog_items: list[int],
    work: Path,
    seconds: float,
    concurrency: int,
) -> dict:
    full_window = tuple(catalog_items[: serving["max_history"]])  # sessions grow to the whole window
    per_user = entry_bytes(graphs, items, full_window, serving["max_history"], "user-0000")
    cache_bytes = int(per_user * len(users) * CACHE_SHARE)
    for model in MODELS.values():
        write_gr_model(
            work / "routing-repo",
            model,
            graphs=graphs,
            catalog_dir=catalog_dir,
            serving=serving,
            default_beam_width=32,
            cache_max_bytes=cache_bytes,
        )
    sessions = [
        (f"user-{u:04d}", history, [catalog_items[(u * 13 + k * 7) % len(catalog_items)] for k in range(64)])
        for u, (history, _) in enumerate(users)
    ]
    servers = [
        start_triton(work / f"routing-triton-{i}", work / "routing-repo", list(MODELS.values())) for i in range(2)
    ]
    out = {"replicas": 2, "users": len(users), "concurrency": concurrency, "seconds_per_mode": seconds}
    out["cache_bytes_per_replica"], out["entry_bytes"] = cache_bytes, per_user
    try:
        for mode, model in MODELS.items():
            routes = work / f"routes-{mode}.json"
            routes.write_text(json.dumps(_table([s.http_url for s in servers], mode)))
            gateway = GatewayProcess(work, {"GATEWAY_ROUTES_FILE": str(routes)}).start()
            try:
                url = f"{gateway.url}/v2/models/recs/infer"
                _drive(url, sessions, min(2.0, seconds / 4), concurrency)  # warm-up: connections, caches
                before = _lookups(servers, model)
                started = time.monotonic()
                latencies = np.array(_drive(url, sessions, seconds, concurrency)) * 1000
                elapsed = time.monotonic() - started
                after = _lookups(servers, model)
            finally:
                gateway.stop()
            counts = {r: after[r] - before[r] for r in RESULTS}
            total = sum(counts.values()) or 1.0
            out[mode] = {
                "requests_per_s": len(latencies) / elapsed,
                "p50_ms": float(np.percentile(latencies, 50)),
                "p99_ms": float(np.percentile(latencies, 99)),
                "requests": int(len(latencies)),
                "cache_reuse_rate": (counts["hit"] + counts["grown"]) / total,
                "cache_results": counts,
            }
    finally:
        for server in servers:
            server.stop()
    out["requests_per_s_ratio"] = out["affinity"]["requests_per_s"] / out["round_robin"]["requests_per_s"]
    out["affinity_p99_not_higher"] = out["affinity"]["p99_ms"] <= out["round_robin"]["p99_ms"]
    return out
