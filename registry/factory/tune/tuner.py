"""One variant's search on its scratch server (the tune stage's per-variant state): its
budget on the wall clock, its trials in order (the default's, the climb's, the closing
runs), each trial's log line. stage.py drives it from the request to the package."""

from __future__ import annotations

import time

from registry import triton_config
from registry.factory import conf
from registry.factory.tune import measure, search, space


def _plan() -> measure.Plan:
    return measure.Plan(
        window_s=float(conf.get("TUNE_WINDOW_S")),
        open_window_s=float(conf.get("TUNE_OPEN_WINDOW_S")),
        levels=tuple(conf.bench_batches("TUNE_LEVELS")),
        open_windows=int(conf.get("TUNE_OPEN_WINDOWS")),
    )


class Budget:
    """One variant's share of the tune budget, on the wall clock from before its scratch
    server starts to its package: the search gets what the default's run, the server's
    start and the closing runs (the default and the best again, side by side) leave, so the
    stage ends within its budget plus the window a trial at the deadline finishes."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.started = time.monotonic()
        self.deadline = self.started + seconds
        self.confirm_s = 0.0  # what measuring the default and the best once more costs, known after the default

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def search_budget(self, load_s: float, plan: measure.Plan) -> float:
        """Seconds the climb may use: the rest, less the closing runs (the default and the best
        again: a load, a warm-up and two open-loop windows each) and two loads (the check that
        the tuned config answers like the default)."""
        window_s = plan.open_window_s + 0.2 + 0.5  # its warm-up and the drain of a window at the SLO
        self.confirm_s = 2 * (load_s + plan.warmup_s + 2 * window_s)
        return max(0.0, self.left() - self.confirm_s - 2 * load_s)


class Tuner:
    """One variant's search on its scratch server (the stage's per-variant state)."""

    def __init__(
        self, ctx, name: str, config, grid: space.Space, server, load, *, slo: float, limits, progress, clock: Budget
    ):
        self.ctx, self.name, self.config, self.grid = ctx, name, config, grid
        self.server, self.load, self.slo, self.limits, self.progress = server, load, slo, limits, progress
        self.clock = clock
        self.plan = _plan()
        self.trials: list[dict] = []
        self.started = time.monotonic()

    def trial(self, label: str, knobs: dict, coord=None, deadline=None, *, again_at: float | None = None) -> dict:
        """Measure `knobs`: a whole trial, or (`again_at`) once more from the rate its first run passed at."""
        config = triton_config.with_knobs(self.config, knobs)
        deadline = min(deadline or self.clock.deadline, self.clock.deadline)  # never past the variant's budget
        if again_at is not None:
            row = measure.measure_again(
                self.server, self.load, config, slo_ms=self.slo, plan=self.plan, rate=again_at, deadline=deadline
            )
        else:
            row = measure.measure_config(
                self.server, self.load, config, slo_ms=self.slo, plan=self.plan, deadline=deadline
            )
        row = {
            "trial": len(self.trials),
            "label": label,
            "knobs": knobs,
            "coord": list(coord) if coord else None,
            **row,
        }
        self.trials.append(row)
        self._log(row, label, " ".join(f"{k}={v}" for k, v in knobs.items()))
        return row

    def _log(self, row: dict, label: str, summary: str) -> None:
        if "error" in row:
            self.ctx.log(f"{self.name} #{row['trial']} {label or summary}: {row['error']}")
        elif not row["throughput_rps"]:
            self.ctx.log(f"{self.name} #{row['trial']} {label + ' ' if label else ''}{summary}: 0/s, {row['why_zero']}")
        else:
            capacity = f"; capacity {row['capacity_rps']:,.0f}/s" if row.get("capacity_rps") is not None else ""
            self.ctx.log(
                f"{self.name} #{row['trial']} {label + ' ' if label else ''}{summary}: "
                f"{row['throughput_rps']:,.0f}/s within the SLO (p50 {row['p50_ms'] or 0:.2f} ms, "
                f"p99 {row['p99_ms'] or 0:.2f} ms, CPU {row['cpu_util'] or 0:.0%}{capacity}) in {row['seconds']:.1f} s"
            )

    def climb(self, default_knobs: dict) -> tuple[search.SearchState, str]:
        state = search.SearchState(sizes=self.grid.sizes, home=self.grid.nearest(default_knobs))
        searching_from = time.monotonic()
        while True:
            state.elapsed_s = time.monotonic() - searching_from
            decision = search.decide(state, self.limits)
            self.progress(
                min(0.9, max(state.elapsed_s / max(self.limits.budget_s, 1e-9), state.trials / self.limits.max_trials))
            )
            if decision.action == "stop":
                return state, decision.reason
            row = self.trial(
                "",
                self.grid.knobs(decision.coord),
                decision.coord,
                deadline=searching_from + self.limits.budget_s,
            )
            search.record(state, decision.coord, row["throughput_rps"], min_gain=self.limits.min_gain)

    def confirm(self, default: dict, best: dict) -> tuple[float, float] | None:
        """The best of many noisy measurements is optimistic (the winner's curse): the default
        and the best are measured once more, side by side, and each is judged on its mean.
        None when the budget has no time left for the two runs (each is then judged on one)."""
        if self.clock.left() < self.clock.confirm_s:
            self.ctx.log(
                f"{self.name}: no time left in the budget to measure the default and the best again "
                f"({self.clock.left():.0f} s left, ~{self.clock.confirm_s:.0f} s needed): each is judged on one run"
            )
            return None
        again_default = self.trial("default, again", default["knobs"], again_at=default.get("rate_rps") or 1.0)
        again_best = self.trial(
            f"best (#{best['trial']}), again", best["knobs"], best.get("coord"), again_at=best.get("rate_rps") or 1.0
        )
        return (
            (default["throughput_rps"] + again_default["throughput_rps"]) / 2,
            (best["throughput_rps"] + again_best["throughput_rps"]) / 2,
        )
