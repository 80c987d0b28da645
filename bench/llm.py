"""python -m bench llm — what the gateway adds to LLM streams, against each backend directly.

One process tree on this machine (harness/llm.py starts the backends):
  backends  the project's tiny model (registry/llm/tiny.py) on a real tritonserver (decoupled
            python-backend model, generate extension; kind a), on `transformers serve`
            (OpenAI-compatible; kind b) and behind the provider stand-in (bearer key; kind c);
  gateway   `python -m gateway` (harness/gateway.start_gateway) with a routes file of
            `llm_endpoints`: one public endpoint per backend, and the failover endpoints.
Measured:
  latency   TTFT (request sent -> first token read) and ITL (gaps between tokens), one stream
            at a time, direct and through the gateway, in interleaved rounds (every path once
            per round, shuffled) so outside load hits them alike; added = gateway - direct at
            p50 (goals: <= 1 ms TTFT, <= 0.2 ms ITL). The same client (aiohttp, events read with the gateway's
            own reader, httpx2's EventSource) reads both, so its own cost cancels out.
  streams per core   C concurrent streams through the gateway for a window: tokens/s and the
            gateway's CPU (its process, from /proc); streams per core = C / cores it used, at
            the pace the backend streams (the tiny model on Triton: ~1,500 tokens/s here).
  failover  the first request on an endpoint whose first backend is dead and whose second is
            the live Triton: `refused` (nothing listens: connect fails at once) and `blackhole`
            (a listener whose backlog is full: connect waits out connect_timeout_ms). Failover
            = TTFT - the healthy endpoint's TTFT (- the connect timeout for blackhole); every
            sample is an endpoint of its own so no breaker has seen its dead backend
            (goal: <= 100 ms beyond the connect timeout).
  the load average before and after (2 shared cores: figures are only as quiet as the machine).
A gateway that does not answer the first chat completion with 200 stops the run, saying what
it answered (a benchmark of a path that fails measures nothing).
Writes var/bench/llm.json.

Options: --quick, --rounds N, --max-tokens N, --concurrency 1,8,32, --window S,
--failover-samples N, --no-openai-server (skip transformers serve).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import numpy as np

from bench import procs
from bench.common import print_table, write_json
from gateway.llm.backends import sse_events
from harness.gateway import start_gateway, stop_gateway
from harness.llm import LOOPBACK_RULES, OpenAIServer, ProviderStandIn, TritonLLM, origins, tiny_llm_dir
from harness.processes import free_port
from harness.procstats import cpu_seconds, process_tree

GOALS = {"added_ttft_p50_ms": "<= 1", "added_itl_p50_ms": "<= 0.2", "failover_beyond_connect_timeout_ms": "<= 100"}
CHAT = [{"role": "user", "content": "what is the gateway?"}]
CONNECT_TIMEOUT_MS = 200
PROVIDER_SECRET = "bench-provider-key"


# --- one stream -------------------------------------------------------------------------------------
def _token(kind: str, event: dict) -> str:
    if kind == "triton":
        return event.get("text_output") or ""
    choices = event.get("choices") or [{}]
    return (choices[0].get("delta") or {}).get("content") or choices[0].get("text") or ""


async def stream_once(session: aiohttp.ClientSession, path: dict) -> dict:
    """{ttft, gaps, tokens, ok}: one streamed request; times in seconds."""
    started = time.perf_counter()
    stamps = []
    async with session.post(path["url"], json=path["body"], headers=path.get("headers")) as reply:
        if reply.status != 200:
            await reply.read()
            return {"ok": False, "status": reply.status, "ttft": None, "gaps": [], "tokens": 0}
        async for data in sse_events(reply):  # the gateway's own SSE reader: its cost is on both sides
            if data == "[DONE]":
                break
            if _token(path["kind"], json.loads(data)):
                stamps.append(time.perf_counter())
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    return {"ok": bool(stamps), "ttft": stamps[0] - started if stamps else None, "gaps": gaps, "tokens": len(stamps)}


def _ms(values, q) -> float | None:
    return round(float(np.percentile(values, q)) * 1000, 3) if len(values) else None


# --- the paths ---------------------------------------------------------------------------------------
def direct_paths(backends: dict, max_tokens: int) -> dict:
    paths = {}
    triton = backends["triton"]
    paths["triton"] = {
        "kind": "triton",
        "url": triton.generate_stream_url,
        "body": {"messages_json": json.dumps(CHAT), "max_tokens": max_tokens},
    }
    for name in ("openai_server", "provider"):
        server = backends.get(name)
        if server is None:
            continue
        body = {"model": server.model, "messages": CHAT, "max_tokens": max_tokens, "stream": True}
        headers = {"Authorization": f"Bearer {getattr(server, 'key', 'unused')}"}
        paths[name] = {"kind": "openai", "url": f"{server.url}/v1/chat/completions", "body": body, "headers": headers}
    return paths


def gateway_path(gateway_url: str, endpoint: str, max_tokens: int) -> dict:
    body = {"model": endpoint, "messages": CHAT, "max_tokens": max_tokens, "stream": True}
    return {"kind": "openai", "url": f"{gateway_url}/v1/chat/completions", "body": body}


def _backend(ident: str, kind: str, url: str, model: str, priority: int = 0, secret: str | None = None) -> dict:
    entry = {"id": ident, "kind": kind, "urls": [url], "model": model, "priority": priority}
    entry["connect_timeout_ms"] = CONNECT_TIMEOUT_MS
    if secret:
        entry["secret"] = secret
    return entry


def _endpoint(name: str, backends: list[dict]) -> dict:
    variant = {"name": "stable", "model_version": "1", "role": "stable", "weight_bp": 10000, "backends": backends}
    return {"name": name, "auth": {"public": True}, "timeout_ms": 60000, "context_length": 256, "variants": [variant]}


def route_table(backends: dict, dead: dict, samples: int) -> dict:
    triton = backends["triton"]
    live = lambda ident, priority=0: _backend(ident, "triton", triton.url, triton.name, priority)  # noqa: E731
    endpoints = [_endpoint("bench-triton", [live("triton")])]
    if backends.get("openai_server"):
        server = backends["openai_server"]
        endpoints.append(
            _endpoint("bench-openai_server", [_backend("tserve", "openai", f"{server.url}/v1", server.model)])
        )
    provider = backends["provider"]
    endpoints.append(
        _endpoint(
            "bench-provider",
            [_backend("provider", "openai", f"{provider.url}/v1", provider.model, secret=PROVIDER_SECRET)],
        )
    )
    for how, urls in dead.items():
        for n, url in enumerate(urls[:samples]):
            first = _backend(f"dead-{how}-{n}", "triton", url, triton.name, 0)
            endpoints.append(_endpoint(f"failover-{how}-{n}", [first, live(f"live-{how}-{n}", 1)]))
    return {
        "version": "bench-llm",
        "endpoints": [],
        "llm_endpoints": endpoints,
        "secrets": [{"id": PROVIDER_SECRET, "value": provider.key, "origins": origins(provider.url)}],
        "llm_rules": LOOPBACK_RULES,
    }


def blackhole() -> tuple[socket.socket, socket.socket, str]:
    """A listener that never accepts, its one-slot backlog filled: further connects hang."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    filler = socket.create_connection(listener.getsockname(), timeout=1)
    return listener, filler, f"http://127.0.0.1:{listener.getsockname()[1]}"


async def gateway_answers(session: aiohttp.ClientSession, path: dict) -> None:
    """One chat completion through the gateway, or SystemExit naming its answer."""
    async with session.post(path["url"], json={**path["body"], "max_tokens": 1}) as reply:
        body = await reply.read()
        if reply.status != 200:
            raise SystemExit(f"bench llm: the gateway answered {reply.status} to {path['url']}: {body[:300]!r}")


# --- phases --------------------------------------------------------------------------------------------
async def latency(session, paths: dict, rounds: int) -> dict:
    samples = {label: {"ttft": [], "gaps": [], "errors": 0} for label in paths}
    for _ in range(2):  # warm every path (connections, first-request allocations)
        for path in paths.values():
            await stream_once(session, path)
    for _ in range(rounds):
        order = list(paths)
        random.shuffle(order)
        for label in order:
            result = await stream_once(session, paths[label])
            if not result["ok"]:
                samples[label]["errors"] += 1
                continue
            samples[label]["ttft"].append(result["ttft"])
            samples[label]["gaps"] += result["gaps"]
    return {
        label: {
            "ttft_p50_ms": _ms(s["ttft"], 50),
            "ttft_p99_ms": _ms(s["ttft"], 99),
            "itl_p50_ms": _ms(s["gaps"], 50),
            "itl_p99_ms": _ms(s["gaps"], 99),
            "streams": len(s["ttft"]),
            "errors": s["errors"],
        }
        for label, s in samples.items()
    }


async def concurrent(session, path: dict, streams: int, window: float, pids: list[int]) -> dict:
    deadline = time.monotonic() + window
    totals = {"streams": 0, "tokens": 0, "errors": 0}

    async def worker():
        while time.monotonic() < deadline:
            result = await stream_once(session, path)
            totals["streams" if result["ok"] else "errors"] += 1
            totals["tokens"] += result["tokens"]

    cpu_before, wall_before = sum(cpu_seconds(pids)), time.monotonic()
    await asyncio.gather(*(worker() for _ in range(streams)))
    wall = time.monotonic() - wall_before
    cores = (sum(cpu_seconds(pids)) - cpu_before) / wall if pids else None
    row = {
        "streams_per_s": totals["streams"] / wall,
        "tokens_per_s": totals["tokens"] / wall,
        "errors": totals["errors"],
    }
    if cores is not None:
        row["gateway_cores"] = cores
    return row


async def alternating(session, direct_path, through_path, streams: int, window: float, pids: list[int]) -> dict:
    """Direct and through-the-gateway windows taking turns (four halves each), so the machine's
    other load hits both alike; the gateway's figures over its own windows."""
    direct, through = [], []
    for _ in range(4):
        direct.append(await concurrent(session, direct_path, streams, window / 4, []))
        if through_path is not None:
            through.append(await concurrent(session, through_path, streams, window / 4, pids))
    row = {
        "concurrency": streams,
        "direct_tokens_per_s": round(sum(r["tokens_per_s"] for r in direct) / len(direct), 1),
    }
    if through:
        row["tokens_per_s"] = round(sum(r["tokens_per_s"] for r in through) / len(through), 1)
        row["streams_per_s"] = round(sum(r["streams_per_s"] for r in through) / len(through), 1)
        row["errors"] = sum(r["errors"] for r in through)
        cores = sum(r["gateway_cores"] for r in through) / len(through)
        row["gateway_cores"] = round(cores, 3)
        row["streams_per_core"] = round(streams / cores, 1) if cores > 0 else None
        row["tokens_per_s_per_core"] = round(row["tokens_per_s"] / cores, 1) if cores > 0 else None
        # the gateway's own CPU (its /proc counters) per relayed token
        row["gateway_cpu_us_per_token"] = round(1e6 * cores / row["tokens_per_s"], 1) if row["tokens_per_s"] else None
    return row


async def failover(session, gateway_url: str, healthy_ttft_s: float, dead: dict, samples: int, max_tokens: int):
    out = {}
    for how in dead:
        ttfts = []
        for n in range(samples):
            result = await stream_once(session, gateway_path(gateway_url, f"failover-{how}-{n}", max_tokens))
            if result["ok"]:
                ttfts.append(result["ttft"])
        allowance = CONNECT_TIMEOUT_MS / 1000 if how == "blackhole" else 0.0
        beyond = [t - healthy_ttft_s - allowance for t in ttfts]
        out[how] = {
            "samples": len(ttfts),
            "errors": samples - len(ttfts),
            "ttft_p50_ms": _ms(ttfts, 50),
            "connect_timeout_ms": CONNECT_TIMEOUT_MS,
            "failover_p50_ms": _ms(beyond, 50),
            "failover_max_ms": round(max(beyond) * 1000, 3) if beyond else None,
        }
    return out


# --- the run ---------------------------------------------------------------------------------------------
def start_backends(work: Path, args) -> dict:
    hf_dir = tiny_llm_dir()
    backends = {"triton": TritonLLM(work / "triton", hf_dir, max_streams=max(args.concurrency)).start()}
    backends["provider"] = ProviderStandIn(work / "provider", hf_dir, key="sk-bench").start()
    if not args.no_openai_server:
        backends["openai_server"] = OpenAIServer(work / "openai-server", hf_dir).start()
    return backends


async def measure(args, backends: dict, gateway_url: str, gateway_pid: int | None, dead: dict) -> dict:
    paths = direct_paths(backends, args.max_tokens)
    results: dict = {"notes": []}
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await gateway_answers(session, gateway_path(gateway_url, "bench-triton", args.max_tokens))
        all_paths = {f"direct-{label}": path for label, path in paths.items()}
        all_paths.update(
            {f"gateway-{label}": gateway_path(gateway_url, f"bench-{label}", args.max_tokens) for label in paths}
        )
        results["latency"] = await latency(session, all_paths, args.rounds)
        results["added"] = {}
        for label in paths:
            direct, through = results["latency"][f"direct-{label}"], results["latency"].get(f"gateway-{label}")
            if direct["ttft_p50_ms"] is None or through["ttft_p50_ms"] is None:
                results["added"][label] = "no samples"
                continue
            results["added"][label] = {
                "ttft_p50_ms": round(through["ttft_p50_ms"] - direct["ttft_p50_ms"], 3),
                "itl_p50_ms": round(through["itl_p50_ms"] - direct["itl_p50_ms"], 3),
                "ttft_p99_ms": round(through["ttft_p99_ms"] - direct["ttft_p99_ms"], 3),
            }
        pids = process_tree(gateway_pid) if gateway_pid else []
        results["streams_per_core"] = []
        # warm: the backend's first burst of concurrent streams (threads, allocations) is not measured
        await concurrent(session, paths["triton"], max(args.concurrency), min(1.0, args.window), [])
        through_path = gateway_path(gateway_url, "bench-triton", args.max_tokens)
        for streams in args.concurrency:
            row = await alternating(session, paths["triton"], through_path, streams, args.window, pids)
            results["streams_per_core"].append(row)
        healthy = results["latency"]["gateway-triton"]["ttft_p50_ms"] / 1000
        results["failover"] = await failover(
            session, gateway_url, healthy, dead, args.failover_samples, args.max_tokens
        )
    return results


def report(results: dict) -> None:
    print("\nLLM streams, one at a time (ms)")
    rows = [
        [label, r["ttft_p50_ms"], r["ttft_p99_ms"], r["itl_p50_ms"], r["itl_p99_ms"], r["streams"], r["errors"]]
        for label, r in results["latency"].items()
    ]
    print_table(["path", "ttft p50", "ttft p99", "itl p50", "itl p99", "streams", "errors"], rows)
    print("\nadded by the gateway (gateway - direct, ms; goals: TTFT p50 <= 1, ITL p50 <= 0.2)")
    rows = [
        [label, *(added[k] for k in ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms"))]
        if isinstance(added, dict)
        else [label, added, "", ""]
        for label, added in results["added"].items()
    ]
    print_table(["backend", "ttft p50", "ttft p99", "itl p50"], rows)
    print("\nconcurrent streams to Triton (direct and through the gateway)")
    keys = [
        "concurrency",
        "direct_tokens_per_s",
        "tokens_per_s",
        "gateway_cores",
        "gateway_cpu_us_per_token",
        "streams_per_core",
        "errors",
    ]
    print_table(
        keys,
        [
            [row.get(k, row.get("gateway", "") if k == "tokens_per_s" else "") for k in keys]
            for row in results["streams_per_core"]
        ],
    )
    print("\nfailover to the live backend when the first is dead (goal: <= 100 ms beyond the connect timeout)")
    if isinstance(results["failover"], dict):
        keys = ["samples", "ttft_p50_ms", "connect_timeout_ms", "failover_p50_ms", "failover_max_ms", "errors"]
        print_table(["dead backend", *keys], [[how, *(r[k] for k in keys)] for how, r in results["failover"].items()])
    else:
        print(results["failover"])
    print(f"\n{results['pinning']['described']}")
    print(f"load average before {results['load_average']['before']}, after {results['load_average']['after']}")


def _backend_pid(backend) -> int | None:
    """The process of a started backend (a tritonserver inside TritonLLM, else its own)."""
    triton = getattr(backend, "triton", None)
    proc = getattr(triton, "process", None) if triton is not None else getattr(backend, "proc", None)
    return proc.pid if proc is not None else None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench llm", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, shorter windows")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--window", type=float, default=5.0)
    parser.add_argument("--failover-samples", type=int, default=10)
    parser.add_argument("--no-openai-server", action="store_true")
    args = parser.parse_args(argv)
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    if args.quick:
        args.rounds, args.window, args.failover_samples = min(args.rounds, 10), min(args.window, 2.0), 4
        args.concurrency = args.concurrency[-1:]
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="bench-llm-"))
    backends, gateway, holes = {}, None, []
    try:
        backends = start_backends(work, args)
        # a dead backend of its own per sample: breakers are per replica URL, and a sample must
        # be the first request that meets its dead backend
        dead = {"refused": [f"http://127.0.0.1:{free_port()}" for _ in range(args.failover_samples)], "blackhole": []}
        for _ in range(args.failover_samples):
            listener, filler, hole_url = blackhole()
            holes += [listener, filler]
            dead["blackhole"].append(hole_url)
        routes = work / "routes.json"
        routes.write_text(json.dumps(route_table(backends, dead, args.failover_samples)))
        gateway, port = start_gateway(routes, work)
        pinning = procs.bench_pinning()
        pinned = procs.pin_roles(
            pinning,
            {
                "proxy": [gateway.pid],
                "backend": [p for p in (_backend_pid(b) for b in backends.values()) if p],
            },
        )
        print(f"[llm] {pinning.describe()}", file=sys.stderr, flush=True)
        results = asyncio.run(measure(args, backends, f"http://127.0.0.1:{port}", gateway.pid, dead))
    finally:
        if gateway is not None:
            stop_gateway(gateway)
        for server in backends.values():
            server.stop()
        for sock in holes:
            sock.close()
    results["load_average"] = {
        "before": [round(x, 2) for x in load_before],
        "after": [round(x, 2) for x in os.getloadavg()],
    }
    results["pinning"] = {**pinning.as_dict(), "threads_pinned": pinned}
    results.update({"goals": GOALS, "cores": os.cpu_count(), "max_tokens": args.max_tokens, "rounds": args.rounds})
    report(results)
    print(f"\nwrote {write_json('llm', results)}")
    shutil.rmtree(work, ignore_errors=True)
    return 0
