"""Dashboard pages of online experiments: the list, one experiment (live: its one live part
polls every 2 s and stops with 286 once the experiment is decided, shipped or stopped), and
Ship / Stop behind a confirmation with a reason (thin: selectors read, services write)."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods
from django.views.decorators.vary import vary_on_headers

from experiments.selectors import online as selectors
from experiments.services import online as services
from kernel.errors import PlatformError

ACTIONS = {
    "ship": (
        services.experiment_ship,
        "Ship the winner: a one-step rollout makes it the endpoint's stable artifact; the experiment is "
        "shipping until that rollout succeeds, and says so if it does not.",
    ),
    "stop": (
        services.experiment_stop,
        "Stop: the arms leave the route table at the gateway's next poll and the control keeps all traffic.",
    ),
}


@login_required
def online_experiment_list(request):
    return render(
        request, "experiments/online/list.html", {"experiments": selectors.online_experiment_list(user=request.user)}
    )


def _context(request, experiment) -> dict:
    page = selectors.experiment_page(experiment=experiment)
    results = page["results"]
    progress = results["progress"]
    percent = min(100, round(100 * progress["have"] / progress["need"])) if progress["need"] else 0
    chart = {"labels": [p["t"][11:19] for p in experiment.history], "series": {}}
    for name in results["candidates"]:
        chart["series"][name] = [p.get(name, [None, None, None]) for p in experiment.history]
    arms = [
        {
            "name": a.name,
            "is_control": a.is_control,
            "allocation": a.allocation_bp / 100,
            **results["arms"].get(a.name, {}),
            **results["candidates"].get(a.name, {}),
        }
        for a in experiment.arms.all()
    ]
    return {
        **page,
        "experiment": experiment,
        "mde_pct": f"{experiment.mde * 100:+g} %",  # a relative lift, shown like the lifts beside it
        "percent": percent,
        "chart": chart,
        "arms": arms,
        "events": selectors.experiment_events(user=request.user, experiment=experiment),
        "refresh": bool(request.htmx),
        "rollout_url": (
            f"{reverse('deployments:endpoint-detail', args=[experiment.endpoint.name])}?rollout={experiment.rollout_id}"
            if experiment.rollout_id
            else ""
        ),
    }


@login_required
@vary_on_headers("HX-Request")
def online_experiment_detail(request, experiment_id):
    experiment = selectors.online_experiment_get(user=request.user, experiment_id=experiment_id)
    context = _context(request, experiment)
    if request.htmx and request.GET.get("partial") == "live":
        response = render(request, "experiments/online/detail.html#experiment-live", context)
        if not context["live"]:
            response.status_code = 286  # htmx: stop polling, nothing moves by itself any more (this swap shows the end)
        return response
    return render(request, "experiments/online/detail.html", context)


@login_required
@require_http_methods(["GET", "POST"])
def online_experiment_action(request, experiment_id, action):
    """GET: a confirmation page with a reason (works without JavaScript); POST: do it."""
    experiment = selectors.online_experiment_get(user=request.user, experiment_id=experiment_id)
    service, description = ACTIONS[action]
    if request.method == "GET":
        return render(
            request,
            "experiments/online/confirm.html",
            {"experiment": experiment, "action": action, "description": description},
        )
    try:
        service(user=request.user, experiment=experiment, reason=request.POST.get("reason", "")[:1000])
    except PlatformError as exc:
        if exc.status in (403, 404):
            raise
        messages.error(request, exc.detail)
    else:
        messages.success(request, f"{experiment.name}: {action} done.")
    return redirect(reverse("experiments:online-detail", args=[experiment.pk]))
