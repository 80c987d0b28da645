"""Dashboard: the endpoint page's release card (live while a release runs) and its start
form. Thin: the selector reads, the service writes."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods
from django.views.decorators.vary import vary_on_headers

from deployments.forms import steps_pct_to_bp
from deployments.selectors import rollouts as rollout_selectors
from deployments.selectors.releases import release_card
from deployments.services import releases as services
from kernel.errors import NotFound, PlatformError
from registry.selectors.catalog import version_get

HTMX_STOP_POLLING = 286


def _steps(raw: str) -> dict:
    """The canary's steps from the form ({} when left empty: the server's plan)."""
    if not (raw or "").strip():
        return {}
    try:
        return {"steps_bp": steps_pct_to_bp(raw)}
    except ValidationError as exc:
        raise ValueError(f"Canary steps: {' '.join(exc.messages)}") from None


def _number(raw: str, field: str):
    raw = (raw or "").strip()
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{field}: give a number, e.g. 25.") from None


@login_required
@vary_on_headers("HX-Request")
@require_http_methods(["GET", "POST"])
def endpoint_release(request, name):
    """GET: the release card alone (the page renders it inside its live part); POST: start one."""
    endpoint = rollout_selectors.endpoint_get(user=request.user, name=name)
    if request.method == "GET":
        context = {**release_card(user=request.user, endpoint=endpoint), "endpoint": endpoint, "request": request}
        response = render(request, "deployments/_release.html#release-card", context)
        if not context["release_active"]:
            response.status_code = HTMX_STOP_POLLING
        return response
    try:
        version = version_get(user=request.user, version_id=int(request.POST.get("version") or 0))
        release = services.release_start(
            user=request.user,
            endpoint=endpoint,
            version=version,
            variant=request.POST.get("variant") or "onnx-int8",
            slo_p99_ms=_number(request.POST.get("slo_p99_ms"), "SLO"),
            tune_budget_s=_number(request.POST.get("tune_budget_s"), "Tune budget"),
            rollout_options=_steps(request.POST.get("steps_pct", "")),
        )
    except NotFound:
        messages.error(request, "version: pick a version of this endpoint's model.")
    except ValueError as exc:
        messages.error(request, str(exc))
    except PlatformError as exc:
        if exc.status == 403:
            raise
        messages.error(request, exc.detail)
    else:
        messages.success(request, f"Started release #{release.pk}: build #{release.build_id}, then tune, then canary.")
    return redirect(reverse("deployments:endpoint-detail", args=[name]) + "#release-card")
