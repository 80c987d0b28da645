"""The five build stages of a generative recommender version, over its bundle (the version's
file: graphs, codebook, holdout) and one catalog version (items and trie):

1. bundle     the bundle checked again (registry/gr/bundle.py), the catalog's trie checked
              against its item map (a trie that admits ids no item has stops the build), the
              holdout's users kept where the catalog knows their items;
2. variants   per target: gr-fp32 (ONNX Runtime's offline optimizer, extended level, on each
              graph), gr-int8 (dynamic INT8 quantization of MatMul/Gemm weights), gr-fp16
              (a GPU variant: skipped with the reason on a worker without CUDA);
3. gates      the fp32 reference (the bundle's graphs as they are) and every variant run
              trie-constrained beam search at the served width over the holdout; gates.py
              decides from the figures, and a variant that misses a gate is rejected;
4. benchmark  prefill (a full history), extend (one new item) and beam search latency;
5. package    registry/gr/triton.py's model directory per servable variant.

Each stage appends log lines with ctx.log and raises StageError to fail the build; nothing
here touches the database (registry/factory/runner.py publishes).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kernel.errors import InvalidInput
from registry import names
from registry.factory import GR_GPU_TARGETS, conf
from registry.factory import graphs as graph_tools
from registry.factory.context import BuildContext, StageError, VariantResult
from registry.factory.generative import gates
from registry.factory.timing import measure
from registry.gr import bundle as bundles
from registry.gr import catalog_files
from registry.gr import runtime as rt
from registry.gr import triton as gr_triton
from registry.gr.trie import TrieError, check_trie
from registry.sizes import human_size


def _bundle_graphs(ctx: BuildContext) -> dict:
    return {role: Path(ctx.source_path) / name for role, name in rt.GRAPH_FILES.items()}


# --- 1. bundle ---------------------------------------------------------------------------------
def bundle(ctx: BuildContext) -> None:
    if not ctx.source_path or not Path(ctx.source_path).is_dir():
        raise StageError("the version's bundle is missing from the artifact store", "source_missing")
    try:
        info = bundles.inspect_bundle(ctx.source_path)
    except InvalidInput as exc:
        raise StageError(exc.detail, exc.code or "bundle_invalid") from None
    catalog_dir = Path(ctx.gr["catalog_dir"])
    items = catalog_files.read_items(catalog_dir)
    trie = catalog_files.read_trie(catalog_dir)
    if (trie.levels, trie.codes_per_level) != (info.levels, info.codes_per_level):
        raise StageError(
            f"catalog {ctx.gr['catalog']} names items with {trie.levels} x {trie.codes_per_level} codes; "
            f"the model generates {info.levels} x {info.codes_per_level}",
            "catalog_shape_mismatch",
        )
    try:
        check_trie(trie, items)
    except TrieError as exc:
        raise StageError(f"catalog {ctx.gr['catalog']}: {exc}", "trie_mismatch") from None
    ctx.log(
        f"bundle: {info.layers} layers x {info.d_model} wide, ids {info.levels} x {info.codes_per_level}, "
        f"max history {info.max_history}, {human_size(info.size)}"
    )
    ctx.log(
        f"catalog {ctx.gr['catalog']}: {len(items)} items, trie of {len(trie.leaf_item)} nodes matches the item map"
    )
    holdout = bundles.read_holdout(ctx.source_path)
    wanted = int(conf.get("BUILD_GR_HOLDOUT_USERS"))
    users = []
    for u in range(len(holdout["length"])):
        history = holdout["history"][u, : holdout["length"][u]][-info.max_history :]
        if all(int(i) in items.row_of_item for i in history):
            users.append((tuple(int(i) for i in history), int(holdout["next_item"][u])))
        if len(users) == wanted:
            break
    if not users:
        raise StageError(f"no holdout user's history is in catalog {ctx.gr['catalog']}", "holdout_items_unknown")
    ctx.log(f"holdout: {len(users)} users (of {len(holdout['length'])} in the bundle) judge the beams")
    ctx.gr.update(manifest=info.manifest(), items=items, trie=trie, users=users)


# --- 2. variants -------------------------------------------------------------------------------
def make_variant_graphs(target: str, graphs: dict, out: Path) -> dict:
    """`target`'s graphs (gr-fp32 or gr-int8) made from `graphs` (by role) into `out`; the
    benchmark makes its variants with this too."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out.mkdir(parents=True, exist_ok=True)
    made = {}
    for role, src in graphs.items():
        made[role] = out / Path(src).name
        if target == "gr-fp32":
            graph_tools.ort_offline(Path(src), made[role], "extended")
        elif target == "gr-int8":
            quantize_dynamic(
                str(src), str(made[role]), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gemm"]
            )
        else:
            raise KeyError(target)
    return made


def _gpu_reason() -> str | None:
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return (
            "fp16 beams are made and gated on a GPU, and this worker's ONNX Runtime has no CUDA execution "
            "provider (a build-gpu worker with onnxruntime-gpu has one)"
        )
    return "fp16 beams on CUDA are not gated by this factory yet: serve gr-fp32 or gr-int8"


def variants(ctx: BuildContext) -> None:
    catalog_version = int(ctx.gr["catalog_version"])
    for target in ctx.targets:
        name = names.gr_variant(target, catalog_version)
        result = VariantResult(name=name)
        ctx.variants[name] = result
        if target in GR_GPU_TARGETS:
            result.status, result.reason = "skipped", _gpu_reason()
            ctx.log(f"{name}: skipped ({result.reason})")
            continue
        try:
            made = make_variant_graphs(target, _bundle_graphs(ctx), ctx.work_dir / name)
        except Exception as exc:  # the optimizer and the quantizer raise their own types
            result.status, result.reason = "rejected", f"{target} could not be made: {str(exc).splitlines()[0][:300]}"
            ctx.log(f"{name}: {result.reason}")
            continue
        result.graphs = made
        result.size_bytes = sum(p.stat().st_size for p in made.values())
        ctx.log(f"{name}: {len(made)} graphs, {human_size(result.size_bytes)}")


# --- 3. gates ----------------------------------------------------------------------------------
def _recommender(ctx: BuildContext, paths: dict, *, optimized: bool = True) -> rt.Recommender:
    manifest = ctx.gr["manifest"]
    return rt.Recommender(
        rt.Graphs(paths, optimized=optimized),
        trie=ctx.gr["trie"],
        items=ctx.gr["items"],
        levels=manifest["levels"],
        codes_per_level=manifest["codes_per_level"],
        max_history=manifest["max_history"],
    )


def _beams(recommender: rt.Recommender, users: list, width: int) -> list[dict]:
    return [recommender.serve(None, history, width=width, top_k=width) for history, _ in users]


def figures(reference: list[dict], served: list[dict], users: list, width: int) -> dict:
    """The gates' figures of `served` beams against `reference` beams (one dict per user)."""
    overlap, top, hits, hits_ref = [], [], [], []
    for ref, var, (_, next_item) in zip(reference, served, users):
        ref_set, var_set = set(ref["items"].tolist()), set(var["items"].tolist())
        overlap.append(len(ref_set & var_set) / len(ref_set) if ref_set else 1.0)
        top.append(bool(len(ref["items"])) and int(ref["items"][0]) in var_set)
        hits.append(next_item in set(var["items"][:10].tolist()))
        hits_ref.append(next_item in set(ref["items"][:10].tolist()))
    return {
        "users": len(users),
        "width": width,
        "beams": int(sum(v["beams"] for v in served)),
        "illegal_ids": int(sum(v["illegal"] for v in served)),
        "duplicates": int(sum(v["duplicates"] for v in served)),
        "overlap": float(np.mean(overlap)),
        "top_in_beam": float(np.mean(top)),
        "hr_at_10": float(np.mean(hits)),
        "hr_at_10_reference": float(np.mean(hits_ref)),
    }


def gate(ctx: BuildContext) -> None:
    width = int(conf.get("BUILD_GR_BEAM_WIDTH"))
    users = ctx.gr["users"]
    thresholds = gates.Thresholds(
        min_overlap=float(conf.get("BUILD_GR_MIN_OVERLAP")),
        min_top_in_beam=float(conf.get("BUILD_GR_MIN_TOP_IN_BEAM")),
        max_hr_drop=float(conf.get("BUILD_GR_MAX_HR_DROP")),
    )
    reference = _beams(_recommender(ctx, _bundle_graphs(ctx), optimized=False), users, width)
    ctx.log(f"fp32 reference (the bundle's graphs): beams of width {width} for {len(users)} users")
    for name, result in ctx.variants.items():
        if result.status != "pending":
            continue
        try:
            served = _beams(_recommender(ctx, result.graphs), users, width)
        except Exception as exc:  # a variant that cannot run is rejected, the build goes on
            result.status, result.reason = "rejected", f"the variant fails to run: {str(exc).splitlines()[0][:300]}"
            ctx.log(f"{name}: rejected ({result.reason})")
            continue
        measured = figures(reference, served, users, width)
        results = gates.judge(measured, thresholds)
        servable, reason = gates.verdict(results)
        result.validation = {"gates": [r.as_dict() for r in results], "figures": measured, "catalog": ctx.gr["catalog"]}
        result.status, result.reason = ("validated", "") if servable else ("rejected", reason)
        ctx.log(
            f"{name}: "
            + ", ".join(f"{r.gate} {r.figure:.3g} ({'ok' if r.passed else 'FAILED'}, {r.threshold})" for r in results)
        )


# --- 4. benchmark ------------------------------------------------------------------------------
def benchmark(ctx: BuildContext) -> None:
    width = int(conf.get("BUILD_GR_BEAM_WIDTH"))
    seconds, max_iters = float(conf.get("BUILD_BENCH_SECONDS")), int(conf.get("BUILD_BENCH_MAX_ITERS"))
    manifest = ctx.gr["manifest"]
    history = max(ctx.gr["users"], key=lambda user: len(user[0]))[0]
    codes = ctx.gr["items"].codes_of(history)
    for name, result in ctx.variants.items():
        if result.status != "validated":
            if result.status == "skipped":
                result.benchmark = {"skipped": result.reason}
            continue
        recommender = _recommender(ctx, result.graphs)
        graphs = recommender.graphs
        past_k, past_v = graphs.encode(None, None, codes[:-1])
        runs = {
            "prefill": lambda: graphs.encode(None, None, codes),
            "extend": lambda: graphs.encode(past_k, past_v, codes[-1:]),
            "beam": lambda: rt.beam_search(
                graphs,
                past_k,
                past_v,
                width=width,
                levels=manifest["levels"],
                codes_per_level=manifest["codes_per_level"],
                trie=ctx.gr["trie"],
            ),
        }
        measured = {step: measure(call, 1, seconds=seconds, max_iters=max_iters) for step, call in runs.items()}
        result.benchmark = {
            "history_items": len(history),
            "width": width,
            **{f"{step}_p50_ms": m["p50_ms"] for step, m in measured.items()},
            **{f"{step}_p99_ms": m["p99_ms"] for step, m in measured.items()},
        }
        ctx.log(
            f"{name}: prefill of {len(history)} items p50 {measured['prefill']['p50_ms']:.2f} ms, "
            f"extend by 1 {measured['extend']['p50_ms']:.2f} ms, beam search (width {width}) "
            f"{measured['beam']['p50_ms']:.2f} ms"
        )


# --- 5. package --------------------------------------------------------------------------------
def package(ctx: BuildContext) -> None:
    manifest = ctx.gr["manifest"]
    for name, result in ctx.variants.items():
        if result.status != "validated":
            continue
        model_name = names.triton_model_name(ctx.model_name, ctx.version, name)
        staged = gr_triton.write_gr_model(
            ctx.work_dir / "package",
            model_name,
            graphs=result.graphs,
            catalog_dir=Path(ctx.gr["catalog_dir"]),
            serving={
                **{k: manifest[k] for k in ("levels", "codes_per_level", "max_history", "layers", "d_model")},
                "catalog": {"name": ctx.gr["catalog"].rsplit(" c", 1)[0], "version": int(ctx.gr["catalog_version"])},
                "variant": name,
            },
            default_beam_width=int(conf.get("BUILD_GR_BEAM_WIDTH")),
            cache_max_bytes=int(conf.get("BUILD_GR_CACHE_MB")) << 20,
        )
        result.package_dir = staged
        result.size_bytes = sum(p.stat().st_size for p in staged.rglob("*") if p.is_file())
        result.status = "servable"
        ctx.log(f"{name}: packaged {model_name} ({human_size(result.size_bytes)})")


STAGE_FUNCTIONS = {
    "bundle": bundle,
    "variants": variants,
    "gates": gate,
    "benchmark": benchmark,
    "package": package,
}
