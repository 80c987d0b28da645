"""Online experiments under continuous peeking: the analysis tick the beat runs every 15 s
(experiments/services/online.experiment_analyze: the arm's machine guardrails by the judge,
experiments.analysis.analyze, experiments.decision.decide_experiment; both through
bench/judge/adapter.py) on simulated clicks and replayed latency noise.

Each experiment has the defaults a new one gets (baseline CTR, MDE, alpha, power, SRM alpha;
two arms at 50 %) and runs to 1.2x its planned units per arm or its first decision. Two parts,
joined look by look:

* guardrail paths: a recorded trace replayed at the endpoint's rate (two recorded processes
  of one model as control and arm, bench/judge/replay.py) through the collector and the
  judge, the arm's guardrail status at every look until the first failure. Replaying is
  what costs (a path at 200 req/s is ~25 min of traffic), so there are fewer paths than
  experiments: experiment i of a cell takes path i mod paths (`--guardrail-paths`).
* clicks per unit from experiments/simulate.py (vectorised over experiments: the simulator
  the analysis' own tests use), A/A (equal CTR) or with the true lift at the planned MDE,
  analysed at every look with its path's guardrail status.

Measured: false ships (A/A ships, goal <= alpha), power (ships by the planned sample at the
MDE, goal >= 80 %), and guardrail stops, every one of them a false one (one model in both arms).
"""

from __future__ import annotations

import math
import multiprocessing
import time

import numpy as np

from bench.judge import adapter
from bench.judge.faults import HEALTHY
from bench.judge.replay import Traffic
from deployments.rollout_machine import FULL_BP, Split

TICK_S = 15  # config/celery.py: experiments-analyze every 15 s
# the endpoint's rate and the share of the experiments run at it: at 20 req/s the planned sample
# takes hours (not a rate experiments are planned for)
RATES = {2000.0: 0.9, 200.0: 0.1}
HORIZON = 1.2  # x the planned units per arm: peeking goes on past the plan
ALLOCATION = {"control": 0.5, "arm": 0.5}
_STATE: dict = {}


def _init(config, loaded, settings) -> None:
    _STATE.update(config=config, traces=loaded, settings=settings)


def guardrail_path(job: tuple) -> list[tuple[str, list[str], str]]:
    """(status, failing check names, reason) at each look, until the first failure."""
    trace_name, rate, seed, looks = job
    traffic = Traffic(_STATE["traces"][trace_name], rate=rate, fault=HEALTHY, seed=seed)
    split = Split(stable_bp=FULL_BP // 2, candidate_bp=FULL_BP // 2, candidate_role="arm")
    counters, snapshot, window = adapter.GatewayCounters(), {}, adapter.Window()
    previous: dict = {}
    path = []
    for look in range(looks):
        for second in range(look * TICK_S, (look + 1) * TICK_S):
            traffic.second(second, split, counters)
            if (second + 1) % 2 == 0:
                snapshot, rows = adapter.scrape(counters, snapshot, float(second + 1))
                if rows:
                    window.add(rows)
        status, failing, decision = adapter.arm_guardrails(
            window, _STATE["config"], previous, float((look + 1) * TICK_S)
        )
        previous = {c["name"]: c for c in decision.checks}
        path.append((status, [c["name"] for c in failing], decision.reason[:300] if failing else ""))
        if status == "fail":
            break
    return path


def experiment(job: tuple) -> dict:
    """One experiment's clicks analysed look by look with its guardrail path."""
    kind, trace, rate, path_index, sums_by_look, path, planned = job
    settings = _STATE["settings"]
    looks = len(sums_by_look["control"]["units"])
    outcome, reason, look, failing = "running", "", looks - 1, []
    for look in range(looks):
        status, failing, why = path[min(look, len(path) - 1)]
        sums = {arm: {k: v[look] for k, v in sums_by_look[arm].items()} for arm in ("control", "arm")}
        checks = [{"name": name, "outcome": "fail"} for name in failing]
        verdict, _ = adapter.analysis_tick(sums, ALLOCATION, settings, status, checks, why)
        if verdict.to_state is not None:
            outcome = "ship" if verdict.decision == "ship" else ("harm_guardrail" if verdict.harm else "stop_metric")
            reason = verdict.reason[:300]
            break
    units = sums_by_look["control"]["units"]
    planned_look = int(np.searchsorted(units, planned))  # the first look with the planned units
    return {
        "kind": kind,
        "trace": trace,
        "rate": rate,
        "path": path_index,
        "outcome": outcome,
        "look": look + 1,
        "seconds": (look + 1) * TICK_S,
        "units_per_arm": float(units[look]),
        "by_plan": look <= planned_look,
        "reason": reason,
        "failed_checks": failing if outcome == "harm_guardrail" else [],
    }


def _plan(settings: dict):
    from experiments import analysis

    return analysis.plan_sample(
        baseline=settings["baseline_rate"],
        mde=settings["mde"],
        alpha=settings["alpha"],
        power=settings["power"],
        exposures_per_unit=settings["exposures_per_unit"],
    )


def _cells(loaded, count: int, power_count: int, paths: int) -> list[dict]:
    """Per trace and rate: how many A/A and MDE experiments, and guardrail paths."""
    return [
        {
            "trace": trace,
            "rate": rate,
            "A/A": math.ceil(count * share / len(loaded)),
            "MDE": math.ceil(power_count * share / len(loaded)),
            "paths": max(1, math.ceil(paths * share / len(loaded))),
        }
        for trace in sorted(loaded)
        for rate, share in RATES.items()
    ]


def run(count: int, power_count: int, loaded, workers: int, seed: int = 0, paths: int = 120) -> dict:
    from experiments import simulate

    settings = adapter.experiment_defaults()
    defaults, judge_alpha = adapter.endpoint_defaults()
    config = adapter.judge_config(defaults, judge_alpha)
    plan = _plan(settings)
    started = time.monotonic()
    rng = np.random.default_rng(seed)
    cells = _cells(loaded, count, power_count, paths)
    for cell in cells:
        units_per_look = int(cell["rate"] * TICK_S / settings["exposures_per_unit"])  # one request, one exposure
        cell["looks"] = math.ceil(HORIZON * plan.units_per_arm * 2 / units_per_look)
        cell["units_per_look"] = units_per_look
    path_jobs = [
        (c["trace"], c["rate"], int(rng.integers(1 << 31)), c["looks"]) for c in cells for _ in range(c["paths"])
    ]
    print(
        f"{sum(c['A/A'] + c['MDE'] for c in cells)} experiments (A/A and at the MDE) over {len(path_jobs)} guardrail "
        f"paths on {sorted(loaded)} at {list(RATES)} req/s, planned {plan.units_per_arm} units/arm",
        flush=True,
    )
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(workers, initializer=_init, initargs=(config, loaded, settings)) as pool:
        all_paths = pool.map(guardrail_path, path_jobs, chunksize=1)
        jobs, offset = [], 0
        for cell in cells:
            mine = all_paths[offset : offset + cell["paths"]]
            offset += cell["paths"]
            for kind, lift in (("A/A", 1.0), ("MDE", 1.0 + settings["mde"])):
                base = settings["baseline_rate"]
                sums = simulate.simulate(
                    rng,
                    sims=cell[kind],
                    looks=cell["looks"],
                    units_per_look=cell["units_per_look"],
                    rates={"control": base, "arm": base * lift},
                    allocation=ALLOCATION,
                    exposures_per_unit=settings["exposures_per_unit"],
                )
                for i in range(cell[kind]):
                    by_look = {arm: {k: v[i] for k, v in sums[arm].items()} for arm in sums}
                    p = i % len(mine)
                    jobs.append((kind, cell["trace"], cell["rate"], p, by_look, mine[p], plan.units_per_arm))
        results = pool.map(experiment, jobs, chunksize=8)
    paths_summary = _paths_summary(cells, all_paths)
    return summarize(results, paths_summary, settings, plan.units_per_arm, time.monotonic() - started)


def _paths_summary(cells: list[dict], all_paths: list) -> dict:
    out, offset = {}, 0
    for cell in cells:
        mine = all_paths[offset : offset + cell["paths"]]
        offset += cell["paths"]
        failed = [p for p in mine if p[-1][0] == "fail"]
        checks: dict[str, int] = {}
        for p in failed:
            for name in p[-1][1]:
                checks[name] = checks.get(name, 0) + 1
        out[f"{cell['trace']} {cell['rate']:g}"] = {
            "paths": len(mine),
            "looks": cell["looks"],
            "failed": len(failed),
            "failed_at_look_median": float(np.median([len(p) for p in failed])) if failed else None,
            "checks": checks,
        }
    return out


def summarize(results: list[dict], paths: dict, settings: dict, planned: int, wall_s: float) -> dict:
    def share(rows, outcome, by_plan=False):
        hits = [r for r in rows if r["outcome"] == outcome and (r["by_plan"] or not by_plan)]
        return len(hits) / len(rows) if rows else None

    aa = [r for r in results if r["kind"] == "A/A"]
    mde = [r for r in results if r["kind"] == "MDE"]
    by_cell = {}
    for cell, figures in paths.items():
        part_aa = [r for r in aa if f"{r['trace']} {r['rate']:g}" == cell]
        part_mde = [r for r in mde if f"{r['trace']} {r['rate']:g}" == cell]
        by_cell[cell] = {
            "aa": len(part_aa),
            "false_ship": share(part_aa, "ship"),
            "guardrail_stop_aa": share(part_aa, "harm_guardrail"),
            "power_by_plan": share(part_mde, "ship", by_plan=True),
            "guardrail_paths_failed": figures["failed"] / figures["paths"],
            "paths": figures["paths"],
        }
    n_paths = sum(p["paths"] for p in paths.values())
    path_failures = sum(p["failed"] for p in paths.values())
    return {
        "settings": settings,
        "planned_units_per_arm": planned,
        "aa_experiments": len(aa),
        "mde_experiments": len(mde),
        "false_ship_rate": share(aa, "ship"),
        "false_stop_metric_rate": share(aa, "stop_metric"),
        "guardrail_stop_rate_aa": share(aa, "harm_guardrail"),
        "guardrail_paths": n_paths,
        "guardrail_path_failure_rate": path_failures / n_paths if n_paths else None,
        "guardrail_paths_by_cell": paths,
        "power_by_plan": share(mde, "ship", by_plan=True),
        "power_by_horizon": share(mde, "ship"),
        "guardrail_stop_rate_mde": share(mde, "harm_guardrail"),
        "median_units_to_ship": _median([r["units_per_arm"] for r in mde if r["outcome"] == "ship"]),
        "by_cell": by_cell,
        "goals": {
            "false_ships_at_most_alpha": (share(aa, "ship") or 0.0) <= settings["alpha"],
            "power_at_mde_at_least_80pct": (share(mde, "ship", by_plan=True) or 0.0) >= settings["power"],
            "no_false_guardrail_stops": path_failures == 0,
        },
        "wall_s": round(wall_s, 1),
        "experiments": results,
    }


def _median(values):
    return float(np.median(values)) if values else None


def print_summary(s: dict) -> None:
    from bench.common import print_table

    print(
        f"\nOnline experiments under continuous peeking (analysis every {TICK_S} s; defaults {s['settings']}; "
        f"planned {s['planned_units_per_arm']} units/arm, run to {HORIZON}x)"
    )
    rows = [
        [
            cell,
            v["aa"],
            _pct(v["false_ship"]),
            _pct(v["power_by_plan"]),
            f"{_pct(v['guardrail_paths_failed'])} of {v['paths']}",
            _pct(v["guardrail_stop_aa"]),
        ]
        for cell, v in s["by_cell"].items()
    ]
    rows.append(
        [
            "all",
            s["aa_experiments"],
            _pct(s["false_ship_rate"]),
            _pct(s["power_by_plan"]),
            f"{_pct(s['guardrail_path_failure_rate'])} of {s['guardrail_paths']}",
            _pct(s["guardrail_stop_rate_aa"]),
        ]
    )
    print_table(
        [
            "trace rate",
            "A/A n",
            "false ship",
            "power at MDE (by plan)",
            "guardrail paths failed",
            "A/A stopped by a guardrail",
        ],
        rows,
    )
    checks = {cell: p["checks"] for cell, p in s["guardrail_paths_by_cell"].items() if p["checks"]}
    print(
        f"  A/A stopped on the primary metric: {_pct(s['false_stop_metric_rate'])}; guardrail failures by check: {checks}"
    )
    print(f"  goals: {s['goals']}; wall time {s['wall_s']:.0f} s")


def _pct(value) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"
