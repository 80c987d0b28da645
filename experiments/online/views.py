"""Dashboard pages of online experiments: the list and one experiment (thin: selectors)."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from experiments.online import selectors


@login_required
def online_experiment_list(request):
    return render(request, "experiments/online/list.html",
                  {"experiments": selectors.online_experiment_list(user=request.user)})


@login_required
def online_experiment_detail(request, experiment_id):
    experiment = selectors.online_experiment_get(user=request.user, experiment_id=experiment_id)
    results = selectors.experiment_results(experiment=experiment)
    progress = results["progress"]
    percent = min(100, round(100 * progress["have"] / progress["need"])) if progress["need"] else 0
    chart = {"labels": [p["t"][11:19] for p in experiment.history], "series": {}}
    for name in results["candidates"]:
        chart["series"][name] = [p.get(name, [None, None, None]) for p in experiment.history]
    return render(request, "experiments/online/detail.html", {
        "experiment": experiment, "results": results, "percent": percent, "chart": chart,
        "arms": [{"name": a.name, "is_control": a.is_control, "allocation": a.allocation_bp / 100,
                  **results["arms"][a.name], **results["candidates"].get(a.name, {})} for a in experiment.arms.all()],
        "events": selectors.experiment_events(user=request.user, experiment=experiment),
    })
