"""Measure one candidate config on a real tritonserver: the tune stage's trial.

A scratch server of the tune's own (serving/tritonserver.py: the same binary, backend and
environment as a local pool's replica) holds the variant's packaged directory; each trial
reloads it with the candidate config as Triton's load-time override, with the pool's
queue limits applied exactly as a pool applies them (registry/triton_config.override_json),
so what is measured is what a pool would serve. The load comes from the platform's load
generator (harness/loadgen.py) in its own process, batch-1 requests built from the
build's own inputs (the version's data or inputs derived from the graph).

A trial, in a few seconds of wall time:
1. a closed-loop sweep over concurrency 1, 2, 4, ... (each level one short window) that
   ends when throughput stops growing or the p99 is far past the SLO: the capacity;
2. open-loop (Poisson) windows that look for the highest rate whose p99 meets the SLO
   with every request answered: starting at 90 % of the capacity within the SLO, up by
   20 % after a pass, down by 30 % after a miss;
3. the trial's objective is the achieved throughput of the highest window that passed
   ("throughput within the SLO"); its p50/p99 and the server's CPU use (every process of
   its group: tritonserver and the python stubs, from /proc) are the config's row in the
   table. A window passes on what was served: every request it sent answered and the p99
   within the SLO, whatever share of the scheduled rate the Poisson draw of that window
   sent. When no window passed the objective is 0 and `why_zero` says what each missed
   by (the p99 over the SLO, requests refused or left unanswered), so a 0 is never
   shown without its reason.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from registry.factory.tune.scratch import LoadClient, ScratchTriton, TrialFailed, cores, cpu_between


@dataclass(frozen=True)
class Plan:
    """How long a trial measures (tests shrink it; the bench may grow it)."""

    window_s: float = 0.8
    open_window_s: float = 1.2
    levels: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    open_windows: int = 4
    warmup_s: float = 0.3
    min_flat_level: int = 8  # the sweep may call throughput flat only from this concurrency on


# --- one trial -------------------------------------------------------------------------------------------
def _within(window: dict, slo_ms: float) -> bool:
    return window["ok"] > 0 and not window["errors"] and window["p99_ms"] is not None and window["p99_ms"] <= slo_ms


def miss_reason(window: dict, slo_ms: float) -> str:
    """Why an open-loop window did not count as within the SLO, in words."""
    offered = f"at {window.get('rate', 0):,.0f} req/s"
    if window.get("errors"):
        failed = sum(window["errors"].values())
        kinds = ", ".join(f"{status} ×{n}" for status, n in sorted(window["errors"].items()))
        return f"{offered} {failed} of {window.get('sent', 0)} requests not answered ({kinds})"
    if not window.get("ok"):
        return f"{offered} no request answered"
    return f"{offered} p99 {window['p99_ms']:.2f} ms > the SLO {slo_ms:g} ms"


def why_zero(open_rows: list[dict], sweep: list[dict], slo_ms: float) -> str:
    """Why a config scores 0 req/s within the SLO: each open-loop window's miss."""
    if not open_rows:
        peak = max((r["achieved_rps"] for r in sweep), default=0.0)
        return f"no open-loop window ran (capacity {peak:,.0f} req/s, the budget ended first)"
    misses = "; ".join(miss_reason(r, slo_ms) for r in open_rows)
    return f"no open-loop window met p99 <= {slo_ms:g} ms with every request answered: {misses}"


def _row(window: dict, cpu_s: float, machine_cores: int, elapsed_s: float) -> dict:
    keep = ("mode", "rate", "concurrency", "sent", "ok", "errors", "achieved_rps", "p50_ms", "p99_ms", "max_ms")
    row = {k: window[k] for k in keep if k in window}
    span = max(elapsed_s, window["seconds"])  # the wall time the CPU was read over (10 ms ticks: capped at 1)
    row["cpu_util"] = round(min(1.0, cpu_s / span / machine_cores), 3)
    row["loadgen_cpu_util"] = round(min(1.0, window.get("cpu_s", 0.0) / span / machine_cores), 3)
    return row


def _measured(server: ScratchTriton, load: LoadClient, machine_cores: int, slo_ms: float, **command) -> dict:
    server.wait_idle()
    before, started = server.cpu_ticks(), time.monotonic()
    # A request 10x past the SLO is a miss whatever it becomes: it need not hold the window up.
    window = load.window(timeout=max(1.0, 10 * slo_ms / 1000), **command)
    elapsed = time.monotonic() - started
    return _row(window, cpu_between(before, server.cpu_ticks()), machine_cores, elapsed)


def _sweep(
    server: ScratchTriton, load: LoadClient, slo_ms: float, plan: Plan, machine_cores: int, deadline: float
) -> list[dict]:
    """Closed-loop levels until throughput stops growing (two levels within 5 % of the best,
    from `plan.min_flat_level` on), the p99 is 4x the SLO, requests fail, or time is up."""
    rows, best, flat = [], 0.0, 0
    for level in plan.levels:
        if rows and time.monotonic() > deadline:
            break
        row = _measured(
            server, load, machine_cores, slo_ms, mode="closed", concurrency=level, seconds=plan.window_s, warmup=0.1
        )
        rows.append(row)
        if row["achieved_rps"] > best * 1.05:
            best, flat = row["achieved_rps"], 0
        elif level >= plan.min_flat_level:
            flat += 1
        if flat >= 2 or (row["p99_ms"] or 0) > 4 * slo_ms or row["errors"]:
            break
    return rows


def _open_search(
    server: ScratchTriton,
    load: LoadClient,
    slo_ms: float,
    plan: Plan,
    machine_cores: int,
    deadline: float,
    *,
    rate: float,
    peak: float,
    windows: int,
) -> tuple[list[dict], dict | None]:
    """Open-loop windows from `rate`: up 20 % after a pass (until 10 % past `peak`), down
    30 % after a miss, at most `windows`; the highest pass wins."""
    rows, passed = [], None
    for _ in range(windows):
        if rate < 1.0 or (rows and time.monotonic() > deadline):
            break
        row = _measured(
            server,
            load,
            machine_cores,
            slo_ms,
            mode="open",
            rate=round(rate, 1),
            seconds=plan.open_window_s,
            warmup=0.2,
        )
        rows.append(row)
        if _within(row, slo_ms):
            if passed is None or row["achieved_rps"] > passed["achieved_rps"]:
                passed = row
            if rate >= 1.1 * peak:
                break
            rate *= 1.2
        else:
            if passed is not None:
                break  # the last pass is the highest rate that met the SLO
            rate *= 0.7
    return rows, passed


def measure_config(
    server: ScratchTriton, load: LoadClient, config, *, slo_ms: float, plan: Plan, deadline: float | None = None
) -> dict:
    """One trial: load `config`, sweep, search the rate; past `deadline` (monotonic) it
    finishes the window it is in and uses what it has (at least one window of each kind).
    Returns the trial's row (see the module docstring); a config that fails to load or
    answer is a row with `error` and an objective of 0, never an exception."""
    started = time.monotonic()
    deadline = deadline if deadline is not None else float("inf")
    machine_cores = cores()
    try:
        server.load(config)
        loaded_s = time.monotonic() - started
        warm = load.window(mode="closed", concurrency=2, seconds=plan.warmup_s, warmup=0.0, timeout=5.0)
        if not warm["ok"]:
            raise TrialFailed(f"no request answered ({warm['errors']})")
        sweep = _sweep(server, load, slo_ms, plan, machine_cores, deadline)
        # from 90 % of the best closed-loop rate within the SLO (half the peak when none was)
        inside = [r["achieved_rps"] for r in sweep if _within(r, slo_ms)]
        peak = max((r["achieved_rps"] for r in sweep), default=0.0)
        open_rows, passed = _open_search(
            server,
            load,
            slo_ms,
            plan,
            machine_cores,
            deadline,
            rate=0.9 * max(inside) if inside else 0.5 * peak,
            peak=peak,
            windows=plan.open_windows,
        )
    except TrialFailed as exc:
        return {
            "error": str(exc),
            "throughput_rps": 0.0,
            "seconds": round(time.monotonic() - started, 2),
            "load_s": 0.0,
        }
    return _result(passed, sweep, open_rows, slo_ms, started, loaded_s)


def _result(passed, sweep: list[dict], open_rows: list[dict], slo_ms: float, started: float, loaded_s: float) -> dict:
    windows = open_rows or sweep
    point = passed or (min(windows, key=lambda r: (r["p99_ms"] is None, r["p99_ms"] or 0)) if windows else {})
    return {
        "throughput_rps": passed["achieved_rps"] if passed else 0.0,
        "rate_rps": passed["rate"] if passed else None,  # the offered rate of the window that counted
        "feasible": passed is not None,
        **({} if passed else {"why_zero": why_zero(open_rows, sweep, slo_ms)}),
        "p50_ms": point.get("p50_ms"),
        "p99_ms": point.get("p99_ms"),
        "cpu_util": point.get("cpu_util"),
        "loadgen_cpu_util": point.get("loadgen_cpu_util"),
        "capacity_rps": max((r["achieved_rps"] for r in sweep), default=None),
        "sweep": sweep,
        "open": open_rows,
        "seconds": round(time.monotonic() - started, 2),
        "load_s": round(loaded_s, 2),  # of which loading the config into the server
    }


def measure_again(
    server: ScratchTriton,
    load: LoadClient,
    config,
    *,
    slo_ms: float,
    plan: Plan,
    rate: float,
    deadline: float | None = None,
) -> dict:
    """A config measured once more at the rate its first run passed at (the closing runs
    that temper the winner's curse): load it, warm up, then at most two open-loop windows
    from `rate` (up 20 % after a pass, down 30 % after a miss), no concurrency sweep: a
    few seconds where a whole trial takes several times that. The same row as
    measure_config, without a sweep (its capacity is the first run's)."""
    started = time.monotonic()
    deadline = deadline if deadline is not None else float("inf")
    try:
        server.load(config)
        loaded_s = time.monotonic() - started
        warm = load.window(mode="closed", concurrency=2, seconds=plan.warmup_s, warmup=0.0, timeout=5.0)
        if not warm["ok"]:
            raise TrialFailed(f"no request answered ({warm['errors']})")
        open_rows, passed = _open_search(server, load, slo_ms, plan, cores(), deadline, rate=rate, peak=rate, windows=2)
    except TrialFailed as exc:
        return {
            "error": str(exc),
            "throughput_rps": 0.0,
            "seconds": round(time.monotonic() - started, 2),
            "load_s": 0.0,
        }
    return _result(passed, [], open_rows, slo_ms, started, loaded_s)
