"""Online experiments under continuous peeking: the analysis tick the beat runs every 15 s
(experiments/services/online.experiment_analyze: the arm's machine guardrails by the judge,
experiments.analysis.analyze, experiments.decision.decide_experiment; through
bench/judge/adapter.py) on simulated clicks and replayed latency noise.

Each experiment has the defaults a new one gets (baseline CTR, MDE, alpha, power, SRM alpha;
two arms at 50 %) and runs to 1.5x its planned units per arm or its first decision. Clicks
per unit come from experiments/simulate.py (vectorised over experiments: the same
simulator the analysis' own tests use), A/A (equal CTR) or with the true lift at the planned
MDE; the arms' requests are a recorded trace replayed at the endpoint's rate (two recorded
processes of one model as control and arm, bench/judge/replay.py) for the guardrails.
Measured: false ships (A/A ships, goal <= alpha), power (ships by the planned sample at the
MDE, goal >= 80 %), harm stops and what stopped them (a guardrail on an A/A is a false one).
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
# takes hours (not a rate experiments are planned for); one at 200 req/s replays ~25 min of
# traffic through the collector and the judge (~5 s of CPU), so fewer run there
RATES = {2000.0: 0.9, 200.0: 0.1}
HORIZON = 1.2  # x the planned units per arm: peeking goes on past the plan
_STATE: dict = {}


def _init(config, loaded, settings) -> None:
    _STATE.update(config=config, traces=loaded, settings=settings)


def experiment(job: tuple) -> dict:
    """One experiment to its first decision or its horizon."""
    trace_name, rate, seed, kind, sums_by_look, planned = job
    config, settings = _STATE["config"], _STATE["settings"]
    traffic = Traffic(_STATE["traces"][trace_name], rate=rate, fault=HEALTHY, seed=seed)
    split = Split(stable_bp=FULL_BP // 2, candidate_bp=FULL_BP // 2, candidate_role="arm")
    counters, snapshot, window = adapter.GatewayCounters(), {}, adapter.Window()
    allocation = {"control": 0.5, "arm": 0.5}
    previous: dict = {}
    looks = len(sums_by_look["control"]["units"])
    outcome, reason, look = "running", "", looks
    for look in range(looks):
        for second in range(look * TICK_S, (look + 1) * TICK_S):
            traffic.second(second, split, counters)
            if (second + 1) % 2 == 0:
                snapshot, rows = adapter.scrape(counters, snapshot, float(second + 1))
                if rows:
                    window.add(rows)
        sums = {arm: {k: v[look] for k, v in sums_by_look[arm].items()} for arm in ("control", "arm")}
        verdict, decision, _ = adapter.experiment_tick(
            window, sums, allocation, settings, config, previous, float((look + 1) * TICK_S)
        )
        previous = {c["name"]: c for c in decision.checks}
        if verdict.to_state is not None:
            outcome = "ship" if verdict.decision == "ship" else ("harm_guardrail" if verdict.harm else "stop_metric")
            reason = verdict.reason[:300]
            break
    units = float(sums_by_look["control"]["units"][min(look, looks - 1)])
    # the look at which the control arm first has its planned units (the plan's horizon, in looks)
    planned_look = int(np.searchsorted(sums_by_look["control"]["units"], planned)) + 1
    return {
        "trace": trace_name,
        "rate": rate,
        "kind": kind,
        "seed": seed,
        "outcome": outcome,
        "look": look + 1,
        "seconds": (look + 1) * TICK_S,
        "units_per_arm": units,
        "by_plan": look + 1 <= planned_look,
        "reason": reason,
        "failed_checks": [c["name"] for c in decision.checks if c["outcome"] == "fail"]
        if outcome == "harm_guardrail"
        else [],
    }


def _jobs(count: int, power_count: int, loaded, settings: dict, seed: int) -> tuple[list[tuple], int]:
    from experiments import analysis, simulate

    plan = analysis.plan_sample(
        baseline=settings["baseline_rate"],
        mde=settings["mde"],
        alpha=settings["alpha"],
        power=settings["power"],
        exposures_per_unit=settings["exposures_per_unit"],
    )
    rng = np.random.default_rng(seed)
    jobs = []
    cells = [(trace, rate, kind) for trace in sorted(loaded) for rate in RATES for kind in ("A/A", "MDE")]
    for trace, rate, kind in cells:
        per_cell = math.ceil((count if kind == "A/A" else power_count) * RATES[rate] / len(loaded))
        units_per_look = int(rate * TICK_S / settings["exposures_per_unit"])  # one request is one exposure
        looks = math.ceil(HORIZON * plan.units_per_arm * 2 / units_per_look)
        lift = 1.0 + (settings["mde"] if kind == "MDE" else 0.0)
        base = settings["baseline_rate"]
        sums = simulate.simulate(
            rng,
            sims=per_cell,
            looks=looks,
            units_per_look=units_per_look,
            rates={"control": base, "arm": base * lift},
            allocation={"control": 0.5, "arm": 0.5},
            exposures_per_unit=settings["exposures_per_unit"],
        )
        for i in range(per_cell):
            by_look = {arm: {k: v[i] for k, v in sums[arm].items()} for arm in sums}
            jobs.append((trace, rate, int(rng.integers(1 << 31)), kind, by_look, plan.units_per_arm))
    return jobs, plan.units_per_arm


def run(count: int, power_count: int, loaded, workers: int, seed: int = 0) -> dict:
    settings = adapter.experiment_defaults()
    defaults, judge_alpha = adapter.endpoint_defaults()
    config = adapter.judge_config(defaults, judge_alpha)
    started = time.monotonic()
    jobs, planned = _jobs(count, power_count, loaded, settings, seed)
    print(
        f"{len(jobs)} experiments (A/A and at the MDE) on {sorted(loaded)} at {list(RATES)} req/s, planned {planned} units/arm"
    )
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(workers, initializer=_init, initargs=(config, loaded, settings)) as pool:
        results = list(pool.imap_unordered(experiment, jobs, chunksize=4))
    return summarize(results, settings, planned, time.monotonic() - started)


def summarize(results: list[dict], settings: dict, planned: int, wall_s: float) -> dict:
    def share(rows, outcome, by_plan=False):
        hits = [r for r in rows if r["outcome"] == outcome and (r["by_plan"] or not by_plan)]
        return len(hits) / len(rows) if rows else None

    aa = [r for r in results if r["kind"] == "A/A"]
    mde = [r for r in results if r["kind"] == "MDE"]
    # both arms serve one model in every experiment here: any guardrail stop is a false one
    guardrail_stops = sum(r["outcome"] == "harm_guardrail" for r in results)
    by_cell = {}
    for trace in sorted({r["trace"] for r in results}):
        for rate in RATES:
            part_aa = [r for r in aa if r["trace"] == trace and r["rate"] == rate]
            part_mde = [r for r in mde if r["trace"] == trace and r["rate"] == rate]
            by_cell[f"{trace} {rate:g}"] = {
                "aa": len(part_aa),
                "false_ship": share(part_aa, "ship"),
                "false_harm_guardrail": share(part_aa, "harm_guardrail"),
                "power_by_plan": share(part_mde, "ship", by_plan=True),
            }
    checks: dict[str, int] = {}
    for r in results:
        for name in r["failed_checks"]:
            checks[name] = checks.get(name, 0) + 1
    return {
        "settings": settings,
        "planned_units_per_arm": planned,
        "aa_experiments": len(aa),
        "mde_experiments": len(mde),
        "false_ship_rate": share(aa, "ship"),
        "false_harm_metric_rate": share(aa, "stop_metric"),
        "false_harm_guardrail_rate": share(aa, "harm_guardrail"),
        "false_guardrail_stop_rate_all": guardrail_stops / len(results) if results else None,
        "guardrail_checks_that_stopped": checks,
        "power_by_plan": share(mde, "ship", by_plan=True),
        "power_by_horizon": share(mde, "ship"),
        "mde_harm_guardrail_rate": share(mde, "harm_guardrail"),
        "median_units_to_ship": float(np.median([r["units_per_arm"] for r in mde if r["outcome"] == "ship"]))
        if mde
        else None,
        "by_cell": by_cell,
        "goals": {
            "false_ships_at_most_alpha": (share(aa, "ship") or 0.0) <= settings["alpha"],
            "power_at_mde_at_least_80pct": (share(mde, "ship", by_plan=True) or 0.0) >= settings["power"],
            "no_false_guardrail_stops": guardrail_stops == 0,
        },
        "wall_s": round(wall_s, 1),
        "experiments": results,
    }


def print_summary(s: dict) -> None:
    from bench.common import print_table

    print(
        f"\nOnline experiments under continuous peeking (analysis every {TICK_S} s; defaults {s['settings']}; planned {s['planned_units_per_arm']} units/arm)"
    )
    rows = [
        [cell, v["aa"], _pct(v["false_ship"]), _pct(v["false_harm_guardrail"]), _pct(v["power_by_plan"])]
        for cell, v in s["by_cell"].items()
    ]
    rows.append(
        [
            "all",
            s["aa_experiments"],
            _pct(s["false_ship_rate"]),
            _pct(s["false_harm_guardrail_rate"]),
            _pct(s["power_by_plan"]),
        ]
    )
    print_table(["trace rate", "A/A n", "false ship", "false guardrail stop", "power at MDE (by plan)"], rows)
    print(
        f"  A/A stopped on the primary metric: {_pct(s['false_harm_metric_rate'])}; false guardrail stops over all {s['aa_experiments'] + s['mde_experiments']} experiments (one model in both arms): {_pct(s['false_guardrail_stop_rate_all'])}, by {s['guardrail_checks_that_stopped']}"
    )
    print(f"  goals: {s['goals']}; wall time {s['wall_s']:.0f} s")


def _pct(value) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"
