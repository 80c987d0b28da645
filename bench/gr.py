"""python -m bench gr — the reference generative recommender, end to end on this machine.

  train     the reference recommender (experiments/gr/train.py) on its synthetic world, and a
            SASRec-style baseline (experiments/gr/baseline.py) on the same sequences;
  quality   HR@10 on a holdout of users, exact: the true next-item mass of the ten items each
            returns (the world's distribution is known); the oracle's is the mass of the true
            top ten. GR fp32 and int8 (beam width 32, trie on), SASRec, popularity;
  trie      illegal beams (a semantic id no catalog item has) with and without the trie;
  variants  the factory's gr-fp32 and gr-int8 graphs (registry/factory/generative/stages.py)
            against the bundle's fp32 graphs: beam-set overlap at widths 8/32/128, the
            reference's top item in the beam, the gates' verdict at the served width;
  latency   a real tritonserver serving gr-fp32 (registry/gr/triton.py's model): per user a
            first request (miss: the whole history encoded), the same request again (hit: no
            encode) and one with a new event (grown: one item encoded); client p50/p99 and the
            model's own prefill and decode time per request (its Triton metrics);
  routing   two tritonservers behind the real gateway, each cache holding ~60 % of the users,
            sessions that grow by one event a request: requests/s, p50/p99 and the replicas'
            cache reuse with `affinity: user` and without (bench/gr_routing.py).
Writes var/bench/gr.json with the load average before and after (2 shared cores here).

Options: --quick (the tests' tiny model: seconds), --users N, --epochs N, --holdout N,
--latency-users N, --routing-seconds S (per mode), --routing-concurrency N.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import requests

from bench import gr_routing
from bench.common import print_table, write_json
from experiments.gr import train as recipe
from experiments.gr.baseline import recommend_sasrec, train_sasrec
from experiments.gr.world import expected_hit_rate, oracle_hit_rate
from harness.gr import metric_value
from registry.factory.generative import gates
from registry.factory.generative.stages import figures, make_variant_graphs
from registry.gr import catalog_files
from registry.gr import runtime as rt
from registry.gr.trie import compile_trie
from registry.gr.triton import request_body, write_gr_model
from serving.tritonserver import TritonProcess

WIDTH, WIDTHS = 32, (8, 32, 128)


def _recommender(paths: dict, result, trie, items, *, optimized: bool = True) -> rt.Recommender:
    c = result.model.config
    return rt.Recommender(
        rt.Graphs(paths, optimized=optimized),
        trie=trie,
        items=items,
        levels=c.levels,
        codes_per_level=c.codes_per_level,
        max_history=c.max_history,
    )


def _holdout_users(result) -> list[tuple[tuple, int]]:
    h, c = result.holdout, result.model.config
    return [
        (
            tuple(int(i) for i in result.item_ids[h["history"][u, : h["length"][u]]][-c.max_history :]),
            int(result.item_ids[h["next_row"][u]]),
        )
        for u in range(len(h["length"]))
    ]


def _quality(result, beams_by_variant: dict, sasrec_rows, popular_rows) -> dict:
    probs = result.holdout["next_probs"]
    row_of = {int(item): row for row, item in enumerate(result.item_ids.tolist())}
    out = {"oracle": oracle_hit_rate(probs)}
    for name, beams in beams_by_variant.items():
        out[name] = expected_hit_rate(probs, [np.array([row_of[int(i)] for i in b["items"][:10]]) for b in beams])
    out["sasrec"] = expected_hit_rate(probs, sasrec_rows)
    out["popularity"] = expected_hit_rate(probs, popular_rows)
    return out


def _variants(result, reference_paths, variant_paths, users, trie, items) -> dict:
    limits = gates.Thresholds(min_overlap=0.86, min_top_in_beam=0.95, max_hr_drop=0.02)
    out = {}
    reference = _recommender(reference_paths, result, trie, items, optimized=False)
    ref_beams = {w: [reference.serve(None, h, width=w, top_k=w) for h, _ in users] for w in WIDTHS}
    served = {}
    for name, paths in variant_paths.items():
        recommender = _recommender(paths, result, trie, items)
        row = {}
        for width in WIDTHS:
            beams = [recommender.serve(None, h, width=width, top_k=width) for h, _ in users]
            measured = figures(ref_beams[width], beams, users, width)
            row[f"overlap@{width}"] = measured["overlap"]
            if width == WIDTH:
                served[name] = beams
                results = gates.judge(measured, limits)
                row.update(
                    top_in_beam=measured["top_in_beam"],
                    servable=gates.verdict(results)[0],
                    illegal_ids=measured["illegal_ids"],
                    beams=measured["beams"],
                )
        out[name] = row
    return out, served, ref_beams[WIDTH]


def _trie_rates(result, paths, users, trie, items) -> dict:
    rates = {}
    for label, constrained in (("with_trie", trie), ("without_trie", None)):
        beams = [
            _recommender(paths, result, constrained, items).serve(None, h, width=WIDTH, top_k=WIDTH) for h, _ in users
        ]
        total = sum(b["beams"] for b in beams)
        rates[label] = {
            "illegal": int(sum(b["illegal"] for b in beams)),
            "beams": int(total),
            "rate": float(sum(b["illegal"] for b in beams) / max(total, 1)),
        }
    return rates


def _latency(result, paths, catalog_dir, users, work: Path) -> dict:
    c = result.model.config
    name = "gr__v1__gr-fp32-c1"
    write_gr_model(
        work / "repo",
        name,
        graphs=paths,
        catalog_dir=catalog_dir,
        serving={
            "levels": c.levels,
            "codes_per_level": c.codes_per_level,
            "max_history": c.max_history,
            "catalog": {"name": "bench-items", "version": 1},
        },
        default_beam_width=WIDTH,
    )
    triton = TritonProcess(model_repository=work / "repo", work_dir=work / "triton").start()
    phases = ("miss", "hit", "grown")
    client = {phase: [] for phase in phases}
    server = {phase: {"prefill": [], "decode": []} for phase in phases}
    try:
        triton.wait_live(120)
        triton.load(name, timeout=300)
        url = f"{triton.http_url}/v2/models/{name}/infer"

        def model_seconds() -> dict:
            text = requests.get(triton.metrics_url, timeout=10).text
            return {step: metric_value(text, f"gr_{step}_seconds_sum", model=name) for step in ("prefill", "decode")}

        with requests.Session() as session:

            def call(user, history, expect) -> float:
                started = time.perf_counter()
                reply = session.post(url, json=request_body(user, list(history), top_k=10), timeout=30)
                elapsed = time.perf_counter() - started
                reply.raise_for_status()
                got = {o["name"]: o["data"] for o in reply.json()["outputs"]}["cache"][0]
                assert got == expect, f"{user}: cache {got}, expected {expect}"
                return elapsed

            call("warm-up", users[0][0], "miss")
            # Interleaved: each user's miss, hit and grown requests back to back, so the load the
            # machine's other work puts on them is alike and their differences are paired.
            for u, (history, next_item) in enumerate(users):
                grown = "grown" if len(history) < c.max_history else "rebased"
                for phase, sent, expect in (
                    ("miss", history, "miss"),
                    ("hit", history, "hit"),
                    ("grown", history + (next_item,), grown),
                ):
                    before = model_seconds()
                    client[phase].append(call(f"user-{u}", sent, expect))
                    after = model_seconds()
                    for step in ("prefill", "decode"):
                        server[phase][step].append(after[step] - before[step])
    finally:
        triton.stop()
    out = {}
    for phase in phases:
        ms = np.array(client[phase]) * 1000
        out[phase] = {
            "p50_ms": float(np.percentile(ms, 50)),
            "p99_ms": float(np.percentile(ms, 99)),
            "requests": len(ms),
            "model_prefill_p50_ms": float(np.percentile(np.array(server[phase]["prefill"]) * 1000, 50)),
            "model_decode_p50_ms": float(np.percentile(np.array(server[phase]["decode"]) * 1000, 50)),
        }
    saved = (np.array(client["miss"]) - np.array(client["hit"])) * 1000
    out["miss_minus_hit_p50_ms"] = float(np.percentile(saved, 50))
    out["hit_faster_share"] = float((saved > 0).mean())
    out["hit_speedup_p50"] = out["miss"]["p50_ms"] / out["hit"]["p50_ms"]
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench gr")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--users", type=int)
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--holdout", type=int)
    parser.add_argument("--latency-users", type=int, default=100)
    parser.add_argument("--routing-seconds", type=float)
    parser.add_argument("--routing-concurrency", type=int, default=4)
    args = parser.parse_args(argv)
    load_start, started = os.getloadavg(), time.monotonic()
    if args.quick:
        world, config = recipe.TINY["world"], recipe.TINY["model"]
        sizes = {k: recipe.TINY[k] for k in ("users", "epochs", "holdout_users")}
    else:
        world, config, sizes = None, None, {"users": 3000, "epochs": 8, "holdout_users": 300}
    sizes.update(
        {k: v for k, v in (("users", args.users), ("epochs", args.epochs), ("holdout_users", args.holdout)) if v}
    )
    print(f"training the reference recommender ({sizes})")
    result = recipe.train(world, config, **sizes)
    sequences, _ = result.world.sequences(sizes["users"], seed=1)  # the GR model's own training sequences
    print(f"trained in {result.metrics['train_seconds']:.0f} s; training the SASRec baseline")
    sasrec_started = time.monotonic()
    sasrec = train_sasrec(
        sequences, result.world.config.items, epochs=sizes["epochs"], max_history=result.model.config.max_history
    )
    sasrec_seconds = time.monotonic() - sasrec_started
    h = result.holdout
    sasrec_rows = recommend_sasrec(sasrec, [h["history"][u, : h["length"][u]] for u in range(len(h["length"]))])
    popular = np.argsort(-np.bincount(np.concatenate(sequences), minlength=result.world.config.items))[:10]

    with tempfile.TemporaryDirectory(prefix="bench-gr-") as tmp:
        work = Path(tmp)
        bundle = recipe.write_bundle(result, work / "bundle")
        reference = {role: bundle / name for role, name in rt.GRAPH_FILES.items()}
        variants = {t: make_variant_graphs(t, reference, work / t) for t in ("gr-fp32", "gr-int8")}
        items = rt.ItemMap(result.item_ids, result.semantic_ids)
        trie = compile_trie(result.semantic_ids, codes_per_level=result.model.config.codes_per_level)
        catalog_dir = catalog_files.write_catalog(
            work / "catalog", result.item_ids, result.semantic_ids, codes_per_level=result.model.config.codes_per_level
        )
        users = _holdout_users(result)
        variant_rows, served, _ = _variants(result, reference, variants, users, trie, items)
        quality = _quality(result, served, sasrec_rows, [popular] * len(users))
        trie_rates = _trie_rates(result, variants["gr-fp32"], users, trie, items)
        print("measuring latency on tritonserver")
        latency = _latency(result, variants["gr-fp32"], catalog_dir, users[: args.latency_users], work)
        print("measuring affinity vs round-robin routing (2 tritonservers, the gateway)")
        c = result.model.config
        routing = gr_routing.measure(
            graphs=variants["gr-fp32"],
            catalog_dir=catalog_dir,
            serving={
                "levels": c.levels,
                "codes_per_level": c.codes_per_level,
                "max_history": c.max_history,
                "catalog": {"name": "bench-items", "version": 1},
            },
            items=items,
            users=users,
            catalog_items=[int(i) for i in result.item_ids],
            work=work,
            seconds=args.routing_seconds or (6.0 if args.quick else 20.0),
            concurrency=args.routing_concurrency,
        )

    load_end = os.getloadavg()
    print("\nHR@10 on the holdout (expected: the true mass of the ten items returned)")
    print_table(
        ["recommender", "HR@10", "of the oracle's"],
        [[name, value, value / quality["oracle"]] for name, value in quality.items()],
    )
    print("\nIllegal ids (a semantic id no catalog item has), gr-fp32, beam width 32")
    print_table(
        ["decoding", "illegal beams", "beams", "rate"],
        [[k, v["illegal"], v["beams"], v["rate"]] for k, v in trie_rates.items()],
    )
    print("\nVariants against the bundle's fp32 graphs (beam-set overlap; gates at width 32)")
    print_table(
        ["variant", *[f"overlap@{w}" for w in WIDTHS], "top in beam", "servable"],
        [[n, *[r[f"overlap@{w}"] for w in WIDTHS], r["top_in_beam"], r["servable"]] for n, r in variant_rows.items()],
    )
    print(f"\nLatency on tritonserver (gr-fp32, width {WIDTH}, top 10, {len(users[: args.latency_users])} users)")
    print_table(
        ["request", "p50 ms", "p99 ms", "model prefill p50 ms", "model decode p50 ms"],
        [
            [p, v["p50_ms"], v["p99_ms"], v["model_prefill_p50_ms"], v["model_decode_p50_ms"]]
            for p, v in latency.items()
            if isinstance(v, dict)
        ],
    )
    print(
        f"hit vs miss: {latency['hit_speedup_p50']:.2f}x at p50; paired, a hit saves {latency['miss_minus_hit_p50_ms']:.2f} ms "
        f"(median) and is faster for {latency['hit_faster_share']:.0%} of users"
    )
    print(
        f"\nRouting across 2 replicas ({routing['users']} users, {routing['concurrency']} clients, "
        f"caches of {routing['cache_bytes_per_replica'] / 1e6:.1f} MB: ~{gr_routing.CACHE_SHARE:.0%} of the users each)"
    )
    print_table(
        ["routing", "requests/s", "p50 ms", "p99 ms", "cache reuse"],
        [
            [mode, r["requests_per_s"], r["p50_ms"], r["p99_ms"], r["cache_reuse_rate"]]
            for mode, r in ((m, routing[m]) for m in ("round_robin", "affinity"))
        ],
    )
    print(
        f"affinity / round-robin: {routing['requests_per_s_ratio']:.2f}x requests/s at the same concurrency "
        f"(affinity's p99 {'not higher: a lower bound at equal p99' if routing['affinity_p99_not_higher'] else 'higher'})"
    )
    path = write_json(
        "gr",
        {
            "machine": {"cores": os.cpu_count(), "load_avg_start": load_start, "load_avg_end": load_end},
            "seconds": time.monotonic() - started,
            "params": result.params,
            "train_seconds": {"gr": result.metrics["train_seconds"], "sasrec": sasrec_seconds},
            "quality_hr_at_10": quality,
            "illegal_ids": trie_rates,
            "variants": variant_rows,
            "latency": latency,
            "routing": routing,
            "gpu": "not measured: this bench runs ONNX Runtime's CPU provider; a GPU run needs onnxruntime-gpu",
        },
    )
    print(f"\nwrote {path}")
    return 0
