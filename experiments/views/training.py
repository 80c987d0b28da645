"""Training experiments (MLflow runs) in the dashboard, under /experiments/training/:
experiment → runs (pick some to compare) → a run's page (params, metric history, artifacts,
the versions registered from it) → a side-by-side comparison. Thin: selectors read."""

from django.contrib.auth.decorators import login_required
from django.http import HttpResponseBadRequest
from django.shortcuts import render

from experiments.figures import metric_table, rounded, run_label
from experiments.selectors import training as selectors
from kernel.errors import NotFound
from registry.selectors.catalog import versions_from_run

MAX_COMPARE = 6


@login_required
def experiment_list(request):
    return render(
        request, "experiments/experiment_list.html", {"experiments": selectors.experiment_list(user=request.user)}
    )


@login_required
def experiment_detail(request, experiment_id):
    experiment = selectors.experiment_get(user=request.user, experiment_id=experiment_id)
    runs = selectors.run_list(user=request.user, experiment_id=experiment_id)
    metric_names = sorted({name for run in runs for name in run["metrics"]})
    ordered = list(reversed(runs))  # oldest first along the x axis
    charts = [
        {"metric": name, "labels": [run_label(r) for r in ordered], "values": [r["metrics"].get(name) for r in ordered]}
        for name in metric_names
    ]
    rows = [
        {**run, "label": run_label(run), "cells": [rounded(run["metrics"].get(n)) for n in metric_names]}
        for run in runs
    ]
    return render(
        request,
        "experiments/experiment_detail.html",
        {
            "experiment": experiment,
            "runs": rows,
            "metric_names": metric_names,
            "charts": charts,
            "max_compare": MAX_COMPARE,
        },
    )


@login_required
def run_detail(request, run_id):
    try:
        run = selectors.run_get(user=request.user, run_id=run_id)
    except NotFound as exc:  # the site's 404 page, with what to tag (the same for every run not shown)
        return render(request, "404.html", {"request_path": request.path, "hint": exc.detail}, status=404)
    history = selectors.metric_history(run_id, run["metrics"].keys())
    charts = [
        {"metric": name, "points": [{"x": p["step"], "y": p["value"]} for p in points]}
        for name, points in history.items()
    ]
    return render(
        request,
        "experiments/run_detail.html",
        {
            "run": run,
            "label": run_label(run),
            "metrics": [
                {"name": n, "value": rounded(v), "points": len(history.get(n, []))}
                for n, v in sorted(run["metrics"].items())
            ],
            "params": sorted(run["params"].items()),
            "tags": sorted(run["tags"].items()),
            "charts": charts,
            "artifacts": selectors.artifact_list(run_id),
            "versions": versions_from_run(user=request.user, run_id=run_id),
        },
    )


@login_required
def run_compare(request, experiment_id):
    experiment = selectors.experiment_get(user=request.user, experiment_id=experiment_id)
    run_ids = list(dict.fromkeys(request.GET.getlist("runs")))
    if not 2 <= len(run_ids) <= MAX_COMPARE:
        return HttpResponseBadRequest(f"runs: pick between 2 and {MAX_COMPARE} runs to compare (got {len(run_ids)}).")
    runs = [selectors.run_get(user=request.user, run_id=rid, experiment_id=experiment_id) for rid in run_ids]
    metric_names = sorted({name for run in runs for name in run["metrics"]})
    param_names = sorted({name for run in runs for name in run["params"]})
    histories = {run["run_id"]: selectors.metric_history(run["run_id"], run["metrics"].keys()) for run in runs}
    charts = []
    for name in metric_names:
        series = [
            {
                "label": run_label(run),
                "points": [{"x": p["step"], "y": p["value"]} for p in histories[run["run_id"]].get(name, [])],
            }
            for run in runs
        ]
        kind = "line" if any(len(s["points"]) > 1 for s in series) else "bar"
        charts.append({"metric": name, "kind": kind, "series": series})
    params = [
        {
            "name": n,
            "values": [run["params"].get(n, "—") for run in runs],
            "differs": len({run["params"].get(n) for run in runs}) > 1,
        }
        for n in param_names
    ]
    return render(
        request,
        "experiments/run_compare.html",
        {
            "experiment": experiment,
            "runs": [{**run, "label": run_label(run)} for run in runs],
            "metrics": metric_table(runs, metric_names),
            "params": params,
            "charts": charts,
        },
    )
