"""Dashboard pages of the artifact factory: builds list, a live build page, start and
cancel buttons. Thin: selectors to read, build_services to write."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.urls import path
from django.views.decorators.http import require_POST
from django.views.decorators.vary import vary_on_headers

from kernel.errors import PlatformError
from registry.models import BuildStatus
from registry.selectors import builds as build_selectors
from registry.selectors import tuning
from registry.selectors.catalog import version_get
from registry.services import builds as build_services

# htmx stops polling when a response has this status.
HTMX_STOP_POLLING = 286


@login_required
def build_list(request):
    builds = build_selectors.build_list(user=request.user).select_related("version__model", "created_by")
    status = request.GET.get("status", "")
    if status in BuildStatus.values:
        builds = builds.filter(status=status)
    page = Paginator(builds.order_by("-created_at"), 50).get_page(request.GET.get("page"))
    return render(
        request, "registry/build_list.html", {"page": page, "status": status, "statuses": BuildStatus.choices}
    )


@login_required
@vary_on_headers("HX-Request")
def build_detail(request, pk):
    build = build_selectors.build_get(user=request.user, build_id=pk)
    artifacts = build_selectors.artifact_list(user=request.user, build=build)
    done = build.status in BuildStatus.terminal()
    context = {
        "build": build,
        "artifacts": artifacts,
        "done": done,
        "log_tail": build_selectors.build_log_tail(build),
        "tune_reports": tuning.tune_reports(artifacts),
        "beam_gates": build_selectors.beam_gates(artifacts),
    }

    if request.htmx:
        response = render(request, "registry/build_detail.html#build-live", context)
        if done:
            response.status_code = HTMX_STOP_POLLING
        return response
    return render(request, "registry/build_detail.html", context)


@login_required
@require_POST
def build_start(request, pk):
    version = version_get(user=request.user, version_id=pk)
    targets = [t for t in request.POST.getlist("targets") if t] or None  # None: the version's kind's defaults

    try:
        build, _ = build_services.build_start(
            user=request.user, version=version, targets=targets, idempotency_key=request.POST.get("idempotency_key", "")
        )
    except PlatformError as exc:
        messages.error(request, exc.detail)
        return redirect("registry:version-detail", pk=version.pk)
    messages.success(request, f"Started build #{build.pk} ({', '.join(build.targets)}).")
    return redirect("registry:build-detail", pk=build.pk)


@login_required
@require_POST
def build_cancel(request, pk):
    build = build_selectors.build_get(user=request.user, build_id=pk)
    try:
        build_services.build_cancel(user=request.user, build=build, reason=request.POST.get("reason", ""))
    except PlatformError as exc:
        messages.error(request, exc.detail)
    else:
        messages.success(request, f"Cancelled build #{build.pk}.")
    return redirect("registry:build-detail", pk=build.pk)


urlpatterns = [
    path("builds/", build_list, name="build-list"),
    path("builds/<int:pk>/", build_detail, name="build-detail"),
    path("builds/<int:pk>/cancel/", build_cancel, name="build-cancel"),
    path("versions/<int:pk>/builds/new/", build_start, name="build-start"),
]
