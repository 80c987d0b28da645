"""Figures as people read them: metrics rounded to four significant digits (no
0.7412345678 in a table), and chart data with one chart per metric, so metrics with
different units (AUC, train_seconds) never share an axis."""

from kernel.figures import rounded


def run_label(run: dict) -> str:
    return run.get("run_name") or run["run_id"][:8]


def metric_table(runs: list[dict], names: list[str]) -> list[dict]:
    """One row per metric with each run's rounded value and the best run marked
    (highest, unless the name says it is a loss, an error or a time)."""
    rows = []
    for name in names:
        values = [run["metrics"].get(name) for run in runs]
        present = [v for v in values if v is not None]
        lower_is_better = any(
            word in name.lower() for word in ("loss", "error", "seconds", "time", "latency", "rmse", "mae")
        )
        best = (min if lower_is_better else max)(present) if len(present) > 1 else None
        rows.append(
            {
                "name": name,
                "cells": [{"text": rounded(v), "best": v is not None and v == best} for v in values],
                "better": "lower" if lower_is_better else "higher",
            }
        )
    return rows
