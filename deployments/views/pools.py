"""Dashboard pages of deployments; thin: read through selectors, write through services.

Serving pools: the list (with health), a pool page (replicas, models with readiness per
replica, live Triton statistics, the tail of each replica's log) and its actions.
"""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST
from django.views.decorators.vary import vary_on_headers

from deployments.selectors import pools as selectors
from deployments.services import pools as services
from kernel.errors import NotFound, PlatformError
from registry.selectors.builds import servable_artifacts
from registry.selectors.events import event_list


# === serving pools ===========================================================================
@login_required
@vary_on_headers("HX-Request")
def pool_list(request):
    query = request.GET.get("q", "").strip()
    pools = selectors.pool_list(user=request.user, filters={"q": query}).order_by("name")
    context = {"pools": pools, "q": query}
    if request.htmx:
        return render(request, "deployments/pool_list.html#pool-rows", context)
    return render(request, "deployments/pool_list.html", context)


@login_required
@vary_on_headers("HX-Request")
def pool_detail(request, name):
    partial = request.GET.get("partial", "") if request.htmx else ""
    try:
        pool = selectors.pool_get(user=request.user, name=name)
    except NotFound:
        if partial:
            return HttpResponse(status=286)  # the pool is gone: htmx stops polling
        raise
    if partial == "log":
        replica = request.GET.get("replica", "")
        context = {
            "pool": pool,
            "replica": replica,
            "log": selectors.replica_log_tail(pool=pool, replica=replica, lines=80),
        }
        return render(request, "deployments/pool_detail.html#replica-log", context)
    live = selectors.pool_live(pool=pool)
    stats = live["statistics"]["models"]
    model_rows = [
        # readiness asked from Triton now when the driver answers, else the last recorded one
        {
            "model": m,
            "stats": stats.get(m.triton_model_name),
            "ready_on": live["readiness"].get(m.triton_model_name) or m.replica_ready,
        }
        for m in pool.models.all()
    ]
    context = {"pool": pool, "live": live, "model_rows": model_rows}
    if partial == "live":
        return render(request, "deployments/pool_detail.html#pool-live", context)
    context["events"] = event_list(user=request.user, object_type="deployments.servingpool", object_id=pool.pk)[:30]
    context["artifacts"] = servable_artifacts(user=request.user)[:100]
    return render(request, "deployments/pool_detail.html", context)


def _act(request, name, action):
    pool = selectors.pool_get(user=request.user, name=name)
    try:
        message = action(pool)
    except PlatformError as exc:
        messages.error(request, exc.detail)
    else:
        messages.success(request, message)
    return redirect("deployments:pool-detail", name=pool.name)


@login_required
@require_POST
def pool_scale(request, name):
    def do(pool):
        services.pool_scale(user=request.user, pool=pool, replicas=request.POST.get("replicas"))
        return f"Scaling {pool.name} to {request.POST.get('replicas')} replicas."

    return _act(request, name, do)


@login_required
@require_POST
def pool_load(request, name):
    def do(pool):
        artifact = selectors.artifact_get(user=request.user, artifact_id=request.POST.get("artifact"))
        pool_model = services.pool_load_request(user=request.user, pool=pool, artifact=artifact)
        return f"Loading {pool_model.triton_model_name} on {pool.name}."

    return _act(request, name, do)


@login_required
@require_POST
def pool_unload(request, name):
    def do(pool):
        model = request.POST.get("model", "")
        services.pool_unload_request(
            user=request.user, pool=pool, model_name=model, drain_timeout_s=request.POST.get("drain_timeout_s", 30)
        )
        return f"Draining {model}; it unloads when traffic has stopped."

    return _act(request, name, do)
