"""Dashboard pages for endpoints and rollouts; thin: selectors to read, services to write."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods
from django.views.decorators.vary import vary_on_headers

from deployments.forms import RolloutStartForm
from deployments.rollout_machine import ACTIVE
from deployments.route_overlays import route_overlays
from deployments.selectors import rollouts as selectors
from deployments.selectors.gateway_routes import ROUTE_LOADING, endpoint_route_state
from deployments.selectors.releases import release_card
from deployments.selectors.rollout_page import chart_config, endpoint_page, rollout_events, rollout_status, step_label
from deployments.services import rollouts as services
from kernel.errors import PlatformError

ACTIONS = {
    "promote": (
        services.rollout_promote,
        "Promote now: 100 % of traffic to the candidate, skipping the remaining steps.",
    ),
    "pause": (services.rollout_pause, "Pause: hold the current split and stop the step timer."),
    "resume": (services.rollout_resume, "Resume where it paused, with the step timer where it stopped."),
    "rollback": (
        services.rollout_rollback,
        "Roll back now: the candidate's weight goes to 0 at once, then it is unloaded.",
    ),
}


@login_required
def endpoint_list(request):
    endpoints = selectors.endpoint_list(user=request.user)
    active = {
        r.endpoint_id: rollout_status(r)
        for r in selectors.rollout_list(user=request.user).filter(state__in=[s.value for s in ACTIVE])
    }
    return render(
        request,
        "deployments/endpoint_list.html",
        {"rows": [{"endpoint": e, "status": active.get(e.pk)} for e in endpoints]},
    )


def _page(request, endpoint, *, form=None, status: int = 200):
    """The endpoint page, or (htmx poll) its one live part, from one read of the rows: the
    header, the release card, the rollout card, charts, verdicts, events and the table.
    It polls while a rollout or a release is in flight, so a release's canary appears
    here when the release starts it (no reload); without ?rollout= it follows the newest."""
    rollout_id = int(request.GET["rollout"]) if request.GET.get("rollout", "").isdigit() else None
    state = endpoint_page(user=request.user, endpoint=endpoint, rollout_id=rollout_id)
    release = release_card(user=request.user, endpoint=endpoint)
    rollout = state["rollout"]
    active = state["active_status"] is not None
    # A running experiment holds the endpoint: rollout_start would refuse, so the form waits too.
    experiment = route_overlays([endpoint]).get(endpoint.pk) if not active else None
    # Neither form while a release builds: its canary is the next rollout (rollout_start would
    # take the endpoint and the release's canary would then be refused).
    held = active or experiment is not None or release["release_active"]
    if form is None and not held:
        form = RolloutStartForm(user=request.user, endpoint=endpoint)
    route = endpoint_route_state(endpoint=endpoint, rollout=state["active_status"].rollout if active else None)
    loading = bool(route["degraded"]) and route["degraded"]["code"] == ROUTE_LOADING
    context = {
        **state,
        **release,
        # live while a rollout or release runs, or until the model it waits for is loaded
        "live": active or release["release_active"] or loading,
        "route_loading": loading,
        "pinned": rollout_id,
        "experiment": _experiment_split(experiment),
        "form": form if not held or (form is not None and form.is_bound) else None,
        "refresh": bool(request.htmx),
        "route": route,
        "events": rollout_events(user=request.user, rollout=rollout) if rollout else [],
        "chart_config": {"endpoint": endpoint.name, **chart_config(rollout)} if rollout else None,
    }
    if request.htmx and request.GET.get("partial") == "status":
        response = render(request, "deployments/endpoint_detail.html#rollout-status", context)
        if not context["live"]:
            response.status_code = 286  # htmx: stop polling, nothing is in flight (this last swap shows its end)
        return response
    return render(request, "deployments/endpoint_detail.html", context, status=status)


def _experiment_split(overlay) -> dict | None:
    if overlay is None:
        return None
    return {
        "name": overlay.name,
        "url": overlay.url,
        "arms": [
            {"label": f"{a.version.model.name} v{a.version.version} {a.variant}", "pct": bp / 100, "control": i == 0}
            for i, (a, bp) in enumerate(overlay.arms)
        ],
    }


@login_required
@vary_on_headers("HX-Request")
def endpoint_detail(request, name):
    return _page(request, selectors.endpoint_get(user=request.user, name=name))


@login_required
@require_http_methods(["POST"])
def rollout_start(request, name):
    endpoint = selectors.endpoint_get(user=request.user, name=name)
    form = RolloutStartForm(request.POST, user=request.user, endpoint=endpoint)
    if form.is_valid():
        try:
            rollout = services.rollout_start(user=request.user, **form.service_arguments())
        except PlatformError as exc:
            if exc.status in (403, 404):
                raise
            form.add_service_error(exc)
        else:
            messages.success(request, f"Started rollout #{rollout.pk}.")
            return redirect(f"{reverse('deployments:endpoint-detail', args=[name])}?rollout={rollout.pk}")
    # Shown again with what was typed and what is wrong, next to the field (a 400: nothing was started).
    return _page(request, endpoint, form=form, status=400)


@login_required
@require_http_methods(["GET", "POST"])
def rollout_action(request, pk, action):
    """GET: a confirmation page (works without JavaScript); POST: do it."""
    rollout = selectors.rollout_get(user=request.user, rollout_id=pk)
    service, description = ACTIONS[action]
    if request.method == "GET":
        return render(
            request,
            "deployments/rollout_confirm.html",
            {"rollout": rollout, "action": action, "description": description, "label": step_label(rollout)},
        )
    try:
        service(
            user=request.user,
            rollout=rollout,
            reason=request.POST.get("reason", ""),
            expected_generation=request.POST.get("generation") or None,
        )
    except PlatformError as exc:
        messages.error(request, exc.detail)
    else:
        messages.success(request, f"Rollout #{rollout.pk}: {action} done.")
    return redirect(f"{reverse('deployments:endpoint-detail', args=[rollout.endpoint.name])}?rollout={rollout.pk}")
