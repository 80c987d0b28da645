from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from experiments import selectors


@login_required
def experiment_list(request):
    return render(request, "experiments/experiment_list.html", {"experiments": selectors.experiment_list(user=request.user)})


@login_required
def experiment_detail(request, experiment_id):
    experiment = selectors.experiment_get(user=request.user, experiment_id=experiment_id)
    runs = selectors.run_list(user=request.user, experiment_id=experiment_id)
    metric_names = sorted({name for run in runs for name in run["metrics"]})
    chart = {
        "labels": [run["run_name"] or run["run_id"][:8] for run in reversed(runs)],
        "series": {name: [run["metrics"].get(name) for run in reversed(runs)] for name in metric_names},
    }
    return render(request, "experiments/experiment_detail.html", {
        "experiment": experiment, "runs": runs, "metric_names": metric_names, "chart": chart,
    })
