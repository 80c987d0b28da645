"""The tune stage's search: a compass hill climb over the space's grid (state in, decision out).

Method (a pattern search, the family of Model Analyzer's quick search, which steps from a
home coordinate toward the better-measured part of its neighbourhood):
1. measure the home (the grid point nearest the factory's default config);
2. measure its axis neighbours one at a time (each dimension +1 then -1), but first the
   point one more step in the direction that last paid off (a line search);
3. as soon as a measured neighbour beats the home by more than `min_gain` (5 %: less is
   within the noise of a shared machine), it becomes the home and the climb goes on
   from there; a home whose every neighbour is measured and none beats it is the answer.

The objective is a config's throughput within the SLO (the highest open-loop rate whose
p99 met it; 0 when none did), so an infeasible home moves to any feasible neighbour.

It stops for one of these reasons, which the build log and the evidence carry:
converged (the best config's neighbours are all measured and none is better), the time
budget, the trial budget, or the space exhausted. Not brute force: it measures a path
through the grid (a handful of points of the hundreds a CPU variant's grid holds).
"""

from __future__ import annotations

from dataclasses import dataclass, field

MIN_GAIN = 0.05


@dataclass(frozen=True)
class Limits:
    budget_s: float
    max_trials: int
    min_gain: float = MIN_GAIN


@dataclass
class SearchState:
    sizes: tuple[int, ...]
    home: tuple[int, ...]
    measured: dict = field(default_factory=dict)  # coordinate -> objective (>= 0)
    direction: tuple[int, ...] | None = None  # the last step that improved the home
    trials: int = 0
    elapsed_s: float = 0.0
    path: list = field(default_factory=list)  # the homes, in order


@dataclass(frozen=True)
class Decision:
    action: str  # "measure" | "stop"
    coord: tuple[int, ...] | None = None
    reason: str = ""


def _inside(coord: tuple[int, ...], sizes: tuple[int, ...]) -> bool:
    return all(0 <= c < n for c, n in zip(coord, sizes))


def neighbours(coord: tuple[int, ...], sizes: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Axis neighbours inside the grid, dimension by dimension, +1 before -1."""
    out = []
    for dim in range(len(sizes)):
        for step in (1, -1):
            candidate = tuple(c + (step if i == dim else 0) for i, c in enumerate(coord))
            if _inside(candidate, sizes):
                out.append(candidate)
    return out


def candidates(state: SearchState) -> list[tuple[int, ...]]:
    """What the climb would measure next around the home, in order."""
    out = []
    if state.direction is not None:
        ahead = tuple(h + d for h, d in zip(state.home, state.direction))
        if _inside(ahead, state.sizes):
            out.append(ahead)
    out.extend(n for n in neighbours(state.home, state.sizes) if n not in out)
    return out


def decide(state: SearchState, limits: Limits) -> Decision:
    """The next coordinate to measure, or why the search stops."""
    if state.trials >= limits.max_trials:
        return Decision("stop", reason=f"trial budget spent: {state.trials} configs measured")
    if state.elapsed_s >= limits.budget_s:
        return Decision(
            "stop",
            reason=f"time budget spent: {state.elapsed_s:.0f} s of {limits.budget_s:.0f} s, {state.trials} configs",
        )
    total = 1
    for n in state.sizes:
        total *= n
    if len(state.measured) >= total:
        return Decision("stop", reason=f"space exhausted: all {total} configs measured")
    if state.home not in state.measured:
        return Decision("measure", state.home)
    for coord in candidates(state):
        if coord not in state.measured:
            return Decision("measure", coord)
    if max(state.measured.values(), default=0) <= 0:
        return Decision("stop", reason=f"no config met the SLO: {len(state.measured)} configs measured, none feasible")
    return Decision(
        "stop",
        reason=(
            f"converged: none of the {len(candidates(state))} neighbours of the best config improves it by "
            f"more than {limits.min_gain:.0%}"
        ),
    )


def record(state: SearchState, coord: tuple[int, ...], objective: float, *, min_gain: float = MIN_GAIN) -> None:
    """Add one measurement; move the home while a measured neighbour beats it."""
    state.measured[coord] = max(0.0, float(objective))
    state.trials += 1
    if not state.path:
        state.path.append(state.home)
    while True:
        here = state.measured.get(state.home)
        if here is None:
            return
        better = [
            c
            for c in candidates(state)
            if c in state.measured and state.measured[c] > 0 and state.measured[c] > here * (1 + min_gain)
        ]
        if not better:
            return
        best = max(better, key=lambda c: state.measured[c])
        state.direction = tuple(b - h for b, h in zip(best, state.home))
        state.home = best
        state.path.append(best)


def best(state: SearchState) -> tuple[tuple[int, ...], float] | None:
    """The best measured coordinate and its objective, or None when nothing was feasible."""
    feasible = [(c, v) for c, v in state.measured.items() if v > 0]
    return max(feasible, key=lambda item: item[1]) if feasible else None
