"""Dashboard pages for endpoints and rollouts; thin: selectors to read, services to write."""

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods
from django.views.decorators.vary import vary_on_headers

from config.errors import PlatformError
from deployments.models.rollouts import ON_INCONCLUSIVE_CHOICES
from deployments.rollout_machine import ACTIVE, State
from deployments.selectors import pools as pool_selectors
from deployments.selectors import rollouts as selectors
from deployments.services import rollouts as services
from registry.names import variant_name
from registry.selectors.events import event_list

ACTIONS = {
    "promote": (services.rollout_promote, "Promote now: 100 % of traffic to the candidate, skipping the remaining steps."),
    "pause": (services.rollout_pause, "Pause: hold the current split and stop the step timer."),
    "resume": (services.rollout_resume, "Resume where it paused, with the step timer where it stopped."),
    "rollback": (services.rollout_rollback, "Roll back now: the candidate's weight goes to 0 at once, then it is unloaded."),
}


def _status(rollout) -> dict:
    if rollout is None:
        return {}
    split = rollout.split
    elapsed = (timezone.now() - rollout.step_started_at).total_seconds() if rollout.step_started_at else None
    if rollout.paused_step_elapsed_s is not None and rollout.state == State.PAUSED:
        elapsed = rollout.paused_step_elapsed_s
    return {
        "split": split, "stable_pct": split.stable_bp / 100, "candidate_pct": split.candidate_bp / 100,
        "step_elapsed_s": elapsed, "steps_pct": [s / 100 for s in rollout.steps_bp],
        "active": rollout.state in ACTIVE, "candidate_variant": variant_name(rollout.candidate_artifact),
        "baseline_variant": variant_name(rollout.baseline_artifact),
    }


@login_required
def endpoint_list(request):
    endpoints = selectors.endpoint_list(user=request.user)
    active = {r.endpoint_id: r for r in selectors.rollout_list(user=request.user).filter(state__in=[s.value for s in ACTIVE])}
    rows = [{"endpoint": e, "rollout": active.get(e.pk), **_status(active.get(e.pk))} for e in endpoints]
    return render(request, "deployments/endpoint_list.html", {"rows": rows})


@login_required
@vary_on_headers("HX-Request")
def endpoint_detail(request, name):
    endpoint = selectors.endpoint_get(user=request.user, name=name)
    rollouts = selectors.rollout_list(user=request.user, endpoint=endpoint)
    rollout = rollouts.filter(pk=request.GET["rollout"]).first() if request.GET.get("rollout", "").isdigit() else rollouts.first()
    context = {
        "endpoint": endpoint, "rollout": rollout, "rollouts": rollouts[:20], **_status(rollout),
        "events": event_list(user=request.user, object_type="deployments.rollout", object_id=rollout.pk)[:30] if rollout else [],
        "candidates": selectors.candidate_artifacts(user=request.user, endpoint=endpoint),
        "chart_since": (rollout.created_at - timedelta(minutes=1)).isoformat() if rollout else "",
        "on_inconclusive_choices": ON_INCONCLUSIVE_CHOICES,
    }
    if request.htmx and request.GET.get("partial") == "status":
        response = render(request, "deployments/endpoint_detail.html#rollout-status", context)
        if rollout is None or rollout.state not in ACTIVE:
            response.status_code = 286  # htmx: stop polling, the rollout is over
        return response
    return render(request, "deployments/endpoint_detail.html", context)


@login_required
@require_http_methods(["POST"])
def rollout_start(request, name):
    endpoint = selectors.endpoint_get(user=request.user, name=name)
    try:
        candidate = pool_selectors.artifact_get(user=request.user, artifact_id=request.POST.get("candidate_artifact"))
        steps = [int(float(p) * 100) for p in request.POST.get("steps_pct", "10,25,50,100").split(",") if p.strip()]
        rollout = services.rollout_start(
            user=request.user, endpoint=endpoint, candidate=candidate, steps_bp=steps,
            step_min_seconds=float(request.POST.get("step_min_seconds") or 30),
            shadow_seconds=float(request.POST.get("shadow_seconds") or 0),
            on_inconclusive=request.POST.get("on_inconclusive") or None,
            fair_baseline=request.POST.get("fair_baseline", "on") in ("on", "true", "1"),
        )
    except (PlatformError, ValueError) as exc:
        messages.error(request, getattr(exc, "detail", None) or f"Bad input: {exc}")
        return redirect("deployments:endpoint-detail", name=name)
    messages.success(request, f"Started rollout #{rollout.pk}.")
    return redirect(f"{reverse('deployments:endpoint-detail', args=[name])}?rollout={rollout.pk}")


@login_required
@require_http_methods(["GET", "POST"])
def rollout_action(request, pk, action):
    """GET: a confirmation page (works without JavaScript); POST: do it."""
    rollout = selectors.rollout_get(user=request.user, rollout_id=pk)
    service, description = ACTIONS[action]
    if request.method == "GET":
        return render(request, "deployments/rollout_confirm.html", {"rollout": rollout, "action": action, "description": description})
    try:
        service(user=request.user, rollout=rollout, reason=request.POST.get("reason", ""),
                expected_generation=request.POST.get("generation") or None)
    except PlatformError as exc:
        messages.error(request, exc.detail)
    else:
        messages.success(request, f"Rollout #{rollout.pk}: {action} done.")
    return redirect(f"{reverse('deployments:endpoint-detail', args=[rollout.endpoint.name])}?rollout={rollout.pk}")
