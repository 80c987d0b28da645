"""make bench-judge (python -m bench judge): the canary judge's and the experiment analysis'
error rates, measured by replaying recorded noise (bench/data/judge/, recorded by
`python -m bench judge record`) through the judge code the beat runs.

Rollouts: every cell of traces (quiet, busy) x rates (20 / 200 / 2,000 req/s) x splits (the
default plan's steps 10/25/50/100 % and the steps the rollout forecast suggests for the
rate, both with the fair baseline) runs `--aa-per-cell` A/A rollouts and `--faults-per-cell`
rollouts of each fault class (bench/judge/faults.py), each to its end through
deployments/rollout_machine.py (bench/judge/sim.py). Experiments: `--experiments` A/A
experiments and `--power-experiments` at the planned MDE, peeked at every analysis tick
(bench/judge/experiments_sim.py). Prints one table with the goals and the published
figures beside it and writes var/bench/judge.json (every rollout's outcome included).
Worker processes: --workers (default: the CPUs). Not a test.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time

import numpy as np

from bench.common import out_dir, print_table, write_json
from bench.judge import adapter, report, traces
from bench.judge.faults import HEALTHY, by_name, catalogue
from bench.judge.sim import Spec, simulate
from deployments.rollout_machine import DEFAULT_STEPS_BP

_STATE: dict = {}


def _init(config, loaded) -> None:
    _STATE["config"], _STATE["traces"] = config, loaded


def _one(spec: Spec) -> dict:
    return simulate(spec, _STATE["traces"][spec.trace], by_name(spec.fault), _STATE["config"])


def splits_for(rate: float, config) -> dict[str, tuple[int, ...]]:
    from monitoring.judge.forecast import suggest_steps

    return {"default": tuple(DEFAULT_STEPS_BP), "suggested": tuple(suggest_steps(rate, config))}


def specs(trace_names, rates, config, aa_per_cell: int, faults_per_cell: int, seed: int = 0) -> list[Spec]:
    """Every rollout of the run: A/A and each fault class in every cell, seeds distinct."""
    out, n = [], 0
    classes = [(HEALTHY.name, aa_per_cell)] + [(f.name, faults_per_cell) for f in catalogue()]
    for trace in trace_names:
        for rate in rates:
            for split, steps in splits_for(rate, config).items():
                for fault, count in classes:
                    for _ in range(count):
                        n += 1
                        out.append(Spec(trace, float(rate), steps, split, fault, seed * 1_000_003 + n))
    return out


def _key(spec: Spec) -> str:
    return f"{spec.trace}|{spec.rate:g}|{spec.split}|{spec.fault}|{spec.seed}"


def _done(path) -> dict[str, dict]:
    """The rollouts a checkpoint already holds, by spec (a line cut short by a kill is skipped)."""
    import json

    done = {}
    if path is not None and path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            done[row.pop("key")] = row
    return done


def run_rollouts(
    all_specs: list[Spec], config, loaded, workers: int, checkpoint=None, budget_s: float | None = None
) -> list[dict]:
    """Every spec's result; with `checkpoint` (a JSON-lines path) each result is appended as it
    comes and the rollouts it already holds are not run again (a long run killed part way
    resumes where it stopped, with the same seeds: the results are the same). `budget_s`:
    no new rollout after that many seconds (those done are returned; the order is a fixed
    shuffle, so they are a sample of every cell and class; --resume finishes the run)."""
    import json

    done = _done(checkpoint)
    results = [done[_key(s)] for s in all_specs if _key(s) in done]
    todo = [s for s in all_specs if _key(s) not in done]
    started = time.monotonic()
    if results:
        print(f"  {len(results)} rollouts from {checkpoint}, {len(todo)} to run", flush=True)
    if budget_s is not None and budget_s <= 0:
        return results
    # interleaved across cells and classes (a fixed shuffle), so a run stopped part way is a
    # sample of every cell, and the slowest rollouts (low rates) are spread over the run
    order = np.random.default_rng(12345).permutation(len(todo))
    ordered = [todo[i] for i in order]
    ctx = multiprocessing.get_context("fork")
    sink = open(checkpoint, "a") if checkpoint is not None else None  # noqa: SIM115 (closed below)
    try:
        with ctx.Pool(workers, initializer=_init, initargs=(config, loaded)) as pool:
            for i, (spec, result) in enumerate(pool.imap_unordered(_keyed, ordered, chunksize=2), start=1):
                results.append(result)
                if sink is not None:
                    sink.write(json.dumps({"key": _key(spec), **result}) + "\n")
                    sink.flush()
                if i % max(1, len(ordered) // 20) == 0:
                    print(f"  {i}/{len(ordered)} rollouts, {time.monotonic() - started:.0f} s", flush=True)
                if budget_s is not None and time.monotonic() - started > budget_s:
                    print(f"  the budget of {budget_s:g} s is spent: {len(results)} rollouts done", flush=True)
                    pool.terminate()
                    break
    finally:
        if sink is not None:
            sink.close()
    return results


def _keyed(spec: Spec) -> tuple[Spec, dict]:
    return spec, _one(spec)


def _print_rollouts(summary: dict, rates, wall_s: float) -> None:
    headers, rows = report.table_rows(summary, rates)
    print("\nThe canary judge on replayed traces (* critical fault; (healthy): a rollback is a false one)")
    print_table(headers, rows)
    print("\nGoals")
    for name, goal in summary["goals"].items():
        value = goal["value"]
        shown = "-" if value is None else (f"{value:.1%}" if isinstance(value, float) else value)
        print(f"  {'met    ' if goal['met'] else 'NOT met'}  {name}: {shown}")
    aa = summary["aa"]
    lo, hi = aa["false_rollback_ci95"]
    print(
        f"  A/A false rollbacks {aa['false_rollbacks']} of {aa['rollouts']} (95 % CI {lo:.1%}-{hi:.1%}); outcomes {aa['outcomes']}"
    )
    print(f"  what rolled the A/As back: {aa['failed_checks']}; by trace {aa.get('failed_checks_by_trace')}")
    print(f"  in which step: {aa.get('rolled_back_at_step')}; median time to promote {aa['promote_seconds_median']} s")
    print(f"  paused A/As waited for: {aa.get('paused_waiting_for')}")
    print("\nPublished figures")
    for entry in report.PUBLISHED:
        print(f"  {entry['system']}: {entry['figure']} [{entry['method']}] — {entry['source']}")
    print(f"\nwall time {wall_s:.0f} s")


def table(argv: list[str]) -> int:
    """The tables of a finished run, summarised again from its rollouts (so a change to the
    report needs no new run)."""
    import json
    from pathlib import Path

    from bench.judge import experiments_sim

    path = Path(argv[0]) if argv else out_dir() / "judge.json"
    data = json.loads(path.read_text())
    summary = report.summarize(data["rollouts"])
    if not data.get("complete", True):
        print(f"PARTIAL: {len(data['rollouts'])} of {data['rollouts_planned']} rollouts")
    _print_rollouts(summary, data["rates"], data["rollouts_wall_s"])
    if data.get("experiments"):
        experiments_sim.print_summary(data["experiments"])
    print(
        f"load average before {data['load_before']}, after {data['load_after']}; {data['workers']} workers; wall {data['wall_s']:.0f} s"
    )
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench judge", description=__doc__.split("\n\n")[0])
    parser.add_argument("--aa-per-cell", type=int, default=84, help="A/A rollouts per trace x rate x split (84: 1,008)")
    parser.add_argument(
        "--faults-per-cell", type=int, default=5, help="rollouts per fault class and cell (5: 60 a class)"
    )
    parser.add_argument("--rates", default="20,200,2000")
    parser.add_argument("--experiments", type=int, default=1000, help="A/A experiments (0: no experiments)")
    parser.add_argument("--power-experiments", type=int, default=400, help="experiments with the true lift at the MDE")
    parser.add_argument(
        "--guardrail-paths", type=int, default=120, help="replayed guardrail paths the experiments share (120)"
    )
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="judge", help="var/bench/OUT.json")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="start no rollout after this many seconds; the tables then cover those done (a sample of every "
        "cell: the order is a fixed shuffle) and say so; --resume later finishes the run",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep var/bench/OUT-rollouts.jsonl (every finished rollout, appended as it ends) and run only "
        "the rollouts it lacks; without it the file starts empty",
    )
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    loaded = traces.load_all()
    if not loaded:
        raise SystemExit(f"no traces in {traces.DATA_DIR}: record them first (python -m bench judge record quiet)")
    defaults, alpha = adapter.endpoint_defaults()
    config = adapter.judge_config(defaults, alpha)
    load_before = os.getloadavg()
    started = time.monotonic()
    all_specs = specs(list(loaded), rates, config, args.aa_per_cell, args.faults_per_cell, args.seed)
    print(f"{len(all_specs)} rollouts on traces {list(loaded)} at {rates} req/s, {args.workers} workers")
    checkpoint = out_dir() / f"{args.out}-rollouts.jsonl"
    if not args.resume:
        checkpoint.unlink(missing_ok=True)
    results = run_rollouts(all_specs, config, loaded, args.workers, checkpoint, args.budget_s)
    complete = len(results) == len(all_specs)
    if not complete:
        print(f"PARTIAL: {len(results)} of {len(all_specs)} rollouts (python -m bench judge --resume finishes it)")
    rollouts_s = time.monotonic() - started
    summary = report.summarize(results)
    experiments = None
    if args.experiments:
        from bench.judge import experiments_sim

        experiments = experiments_sim.run(
            args.experiments, args.power_experiments, loaded, args.workers, args.seed, args.guardrail_paths
        )
    wall_s = time.monotonic() - started
    _print_rollouts(summary, rates, rollouts_s)
    if experiments:
        experiments_sim.print_summary(experiments)
    path = write_json(
        args.out,
        {
            "judge_config": config.as_dict(),
            "endpoint_defaults": defaults,
            "traces": {name: trace.meta for name, trace in loaded.items()},
            "rates": rates,
            "splits": {f"{r:g}": splits_for(r, config) for r in rates},
            "load_before": load_before,
            "load_after": os.getloadavg(),
            "workers": args.workers,
            "wall_s": round(wall_s, 1),
            "rollouts_wall_s": round(rollouts_s, 1),
            "rollouts_planned": len(all_specs),
            "complete": complete,
            "summary": summary,
            "published": report.PUBLISHED,
            "experiments": experiments,
            "rollouts": results,
        },
    )
    print(f"wrote {path} ({wall_s:.0f} s in all)")
    return 0
