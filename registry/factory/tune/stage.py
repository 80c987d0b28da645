"""The tune stage: for each variant the build was asked to tune, search its serving config
on a real tritonserver under the latency SLO and package the best one found as the
servable variant `{variant}-tuned` with the search as its evidence.

Read top to bottom: the request (Build.tune, checked at the API: slo_p99_ms, variants,
budget_s, max_trials, search_space, the pool's queue limits), then per variant: a scratch
server and the load generator (scratch.py, measure.py), the factory's default config measured first
(the reference every figure is compared with, in the same run), the climb (search.py)
over the space (space.py) until it stops with its reason, and the result: a tuned
package whose config.pbtxt comes from Triton's protobuf (registry/triton_config.py),
parses back to the same message, loads in the scratch server and answers like the
default on the same requests. No better config within the SLO: a `skipped` variant that
still carries the table, so the build page shows what was tried.

GPU variants: the same search over GPU instance groups, batching and the TensorRT
precision runs where a GPU and Triton's onnxruntime backend are there; elsewhere the stage
says once, at run time, that the GPU part is skipped and why.
"""

from __future__ import annotations

import os
import shutil
import time

from registry import names, triton_config
from registry.factory import conf
from registry.factory.context import StageError, VariantResult, data_or_synthetic
from registry.factory.tune import scratch, search, space
from registry.factory.tune.tuner import Budget, Tuner
from registry.names import base_variant, tuned_variant

OBJECTIVE = (
    "throughput within the SLO: the highest open-loop (Poisson) rate of batch-1 requests whose p99 met "
    "the SLO with every request answered"
)


def gpu_unavailable() -> str | None:
    """Why this worker cannot search GPU configs, or None when it can."""
    from registry.factory.gpu import providers
    from serving import tritonserver

    if providers.CUDA not in providers.available():
        return f"no GPU on this worker ({providers.runtime_line()})"
    try:
        binary = tritonserver.find_binary()
    except tritonserver.TritonNotAvailable as exc:
        return str(exc)
    if not (binary.parent.parent / "backends" / "onnxruntime").is_dir():
        return "the tritonserver here has no onnxruntime backend (the nvidia-pytriton build carries only python)"
    return None


def _variants(ctx, request: dict) -> list[str]:
    asked = request.get("variants") or []
    if asked:
        return list(asked)
    servable = [n for n, r in ctx.variants.items() if r.status == "servable" and not names.needs_gpu(n)]
    return [next((n for n in ("onnx-int8", "onnx-fp32") if n in servable), servable[0])] if servable else []


def tune(ctx) -> None:
    request = ctx.tune or {}
    if not request:
        ctx.log("no tune asked for")
        return
    slo = float(request["slo_p99_ms"])
    wanted = _variants(ctx, request)
    gpu_reason = gpu_unavailable()
    if gpu_reason:
        ctx.log(
            f"GPU part skipped: {gpu_reason} (GPU instance groups and TensorRT settings are searched on a GPU host)"
        )
    if not wanted:
        ctx.log("nothing to tune: no servable variant")
        return
    budget = float(request.get("budget_s") or conf.get("TUNE_BUDGET_S"))
    started = time.monotonic()
    for index, name in enumerate(wanted):
        left = budget - (time.monotonic() - started)
        share = max(1.0, left / (len(wanted) - index))

        def progress(done: float, index=index) -> None:
            ctx.progress(min(1.0, (index + done) / len(wanted)))

        _tune_variant(ctx, name, request, slo=slo, budget_s=share, gpu_reason=gpu_reason, progress=progress)
        progress(1.0)


def _skip(ctx, name: str, reason: str, evidence: dict | None = None) -> None:

    ctx.log(f"{tuned_variant(name)}: skipped ({reason})")
    ctx.variants[tuned_variant(name)] = VariantResult(
        name=tuned_variant(name), status="skipped", reason=reason, benchmark={"tune": evidence} if evidence else {}
    )


def _grid(name: str, config, request: dict) -> space.Space:
    batched, top = config.max_batch_size > 0, config.max_batch_size
    overrides = space.check_overrides(request.get("search_space"))
    if names.needs_gpu(name):
        return space.gpu_space(batched=batched, max_batch_size=top, tensorrt=name == "tensorrt", overrides=overrides)
    return space.cpu_space(batched=batched, max_batch_size=top, cores=scratch.cores(), overrides=overrides)


def _tune_variant(ctx, name: str, request: dict, *, slo: float, budget_s: float, gpu_reason, progress) -> None:
    base = ctx.variants.get(name)
    if base is None or base.status != "servable" or base.package_dir is None:
        why = "not built" if base is None else f"{base.status}{': ' + base.reason if base.reason else ''}"
        return _skip(ctx, name, f"{name} is not servable here ({why})")
    if names.needs_gpu(name) and gpu_reason:
        return _skip(ctx, name, f"GPU search skipped: {gpu_reason}")

    clock = Budget(budget_s)
    config = triton_config.parse((base.package_dir / "config.pbtxt").read_text())
    grid = _grid(name, config, request)
    max_trials = int(request.get("max_trials") or conf.get("TUNE_MAX_TRIALS"))
    feeds = data_or_synthetic(ctx, int(conf.get("TUNE_BODIES")), seed=5)[0]
    bodies = scratch.request_bodies(config, feeds, int(conf.get("TUNE_BODIES")))
    work = ctx.work_dir / f"tune-{name}"
    load_avg = os.getloadavg()[0]
    ctx.log(
        f"{name}: tuning for p99 <= {slo:g} ms within {budget_s:.0f} s: {grid.kind.upper()} space "
        + ", ".join(f"{d.name} {list(d.values)}" for d in grid.dimensions)
        + f" ({grid.size} configs); {scratch.cores()} cores, load average {load_avg:.1f}"
    )
    limits_of_pool = {k: int(request.get(k, 0)) for k in ("max_queue_size", "queue_timeout_ms")}
    server = scratch.ScratchTriton(base.package_dir, work, base.package_dir.name, **limits_of_pool)
    load = None
    try:
        try:
            server.start()
        except Exception as exc:  # no binary, a server that dies at start: the variant is skipped with why
            return _skip(ctx, name, f"the scratch tritonserver did not start: {str(exc).splitlines()[0][:200]}")
        load = scratch.LoadClient(server.infer_url, bodies, work / "loadgen")
        limits = search.Limits(budget_s=budget_s, max_trials=max_trials)  # the search's share is set below
        tuner = Tuner(ctx, name, config, grid, server, load, slo=slo, limits=limits, progress=progress, clock=clock)
        default = tuner.trial("default", triton_config.knobs_of(config))
        tuner.limits = limits = search.Limits(
            budget_s=clock.search_budget(default.get("load_s", 0.0), tuner.plan),
            max_trials=max_trials,
            min_gain=limits.min_gain,
        )
        state, reason = tuner.climb(default["knobs"])
        ctx.log(f"{name}: search stopped after {time.monotonic() - tuner.started:.0f} s: {reason}")
        best = max(tuner.trials, key=lambda t: t["throughput_rps"])
        default_rps, best_rps = default["throughput_rps"], best["throughput_rps"]
        if best_rps > 0 and best is not default and (means := tuner.confirm(default, best)) is not None:
            default_rps, best_rps = means
        evidence = _evidence(
            tuner, state, reason, default, best, default_rps, best_rps, load_avg, gpu_reason, limits_of_pool
        )
        ctx.log(f"{name}: tuned in {clock.elapsed():.1f} s of its {clock.seconds:.0f} s budget")
        if best_rps <= 0:
            why = default.get("why_zero") or default.get("error") or ""
            return _skip(
                ctx, name, f"no config met p99 <= {slo:g} ms" + (f" (the default: {why})" if why else ""), evidence
            )
        if best is default or best_rps <= default_rps * (1 + limits.min_gain):
            return _skip(
                ctx,
                name,
                f"no config beat the factory's default by more than {limits.min_gain:.0%} within p99 <= {slo:g} ms "
                f"(default {default_rps:,.0f}/s, best {best_rps:,.0f}/s, judged on {evidence['judged_on']})",
                evidence,
            )
        _publish(ctx, base, config, best, evidence, server, bodies)
    finally:
        if load is not None:
            load.close()
        server.stop()
        shutil.rmtree(work / "server" / "backends", ignore_errors=True)


def _evidence(tuner, state, reason, default, best, default_rps, best_rps, load_avg, gpu_reason, queue_limits) -> dict:
    gain = best_rps / default_rps if default_rps > 0 else None
    return {
        "tuned_from": tuner.name,
        "slo_p99_ms": tuner.slo,
        "objective": OBJECTIVE,
        "search": "compass hill climb from the grid point nearest the default (registry/factory/tune/search.py)",
        "default": {**_point(default), "throughput_rps": round(default_rps, 1)},
        "best": {**_point(best), "throughput_rps": round(best_rps, 1)},
        "gain": round(gain, 3) if gain else None,
        "judged_on": "the mean of two runs of the default and of the best (the second side by side after the "
        "search, from the rate the first passed at)"
        if len(tuner.trials) > state.trials + 1
        else "one run each",
        "stop_reason": reason,
        # the variant's wall time from before its scratch server started, against its share of the budget
        "elapsed_s": round(tuner.clock.elapsed(), 1),
        "budget_s": round(tuner.clock.seconds, 1),
        "search_budget_s": round(tuner.limits.budget_s, 1),
        "max_trials": tuner.limits.max_trials,
        "measured": len(tuner.trials),
        "space": {
            "kind": tuner.grid.kind,
            "size": tuner.grid.size,
            "dimensions": {d.name: list(d.values) for d in tuner.grid.dimensions},
        },
        "path": [list(c) for c in state.path],
        "queue_limits": queue_limits,
        "machine": {
            "cores": scratch.cores(),
            "load_avg_start": round(load_avg, 2),
            "load_avg_end": round(os.getloadavg()[0], 2),
        },
        "gpu": f"skipped: {gpu_reason}" if gpu_reason else "searched",
        "trials": tuner.trials,
    }


def _point(trial: dict) -> dict:
    keep = (
        "trial",
        "label",
        "knobs",
        "throughput_rps",
        "p50_ms",
        "p99_ms",
        "cpu_util",
        "capacity_rps",
        "error",
        "why_zero",
    )
    return {k: trial[k] for k in keep if k in trial}


def _publish(ctx, base, config, best: dict, evidence: dict, server, bodies: list[bytes]) -> None:
    """Package the best config as `{variant}-tuned` after checking it parses back, loads and
    answers like the default on the same requests."""

    name = tuned_variant(base.name)
    model_name = names.triton_model_name(ctx.model_name, ctx.version, name)
    tuned = triton_config.with_knobs(config, best["knobs"])
    tuned.name = model_name
    text = triton_config.to_text(tuned)
    if triton_config.parse(text) != tuned:
        raise StageError(f"{name}: config.pbtxt does not parse back to the same ModelConfig", "config_roundtrip")
    evidence["check"] = _answers_like_default(server, config, tuned, bodies[:8])
    staged = ctx.work_dir / "package" / model_name
    shutil.copytree(base.package_dir, staged, symlinks=True, dirs_exist_ok=True)
    (staged / "config.pbtxt").write_text(text)
    result = VariantResult(
        name=name,
        onnx_path=base.onnx_path,
        status="servable",
        validation={**base.validation, "tuned_from": base_variant(name), "same_graph_as": base.name},
        benchmark={"tune": evidence},
        package_dir=staged,
        size_bytes=sum(p.stat().st_size for p in staged.rglob("*") if p.is_file()),
    )
    ctx.variants[name] = result
    ctx.log(
        f"{name}: packaged {model_name}: {evidence['best']['throughput_rps']:,.0f}/s within p99 <= {evidence['slo_p99_ms']:g} ms "
        f"vs {evidence['default']['throughput_rps']:,.0f}/s for the default"
        + (f" ({evidence['gain']:.2f}x)" if evidence["gain"] else "")
        + "; "
        + " ".join(f"{k}={v}" for k, v in best["knobs"].items())
    )


def _answers_like_default(server, default_config, tuned_config, bodies: list[bytes]) -> dict:
    """The tuned config, loaded as a pool loads it, answers the same requests as the default."""

    answers = []
    for config in (default_config, tuned_config):
        server.load(config)
        answers.append([scratch.outputs_of(server.infer_url, body) for body in bodies])
    worst = 0.0
    for before, after in zip(*answers):
        if set(before) != set(after):
            raise StageError("the tuned config answers with other outputs than the default", "tune_mismatch")
        for key in before:
            worst = max(worst, float(abs(before[key] - after[key]).max(initial=0.0)))
    if worst > 1e-4:
        raise StageError(
            f"the tuned config answers differently from the default (max abs {worst:.3g})", "tune_mismatch"
        )
    return {"answers_like_default": True, "requests": len(bodies), "max_abs_diff": worst}
