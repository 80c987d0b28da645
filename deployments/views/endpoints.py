"""Dashboard pages that create and edit endpoints; thin: the form shapes input, the
services decide with the same rules as the API (deployments/services/endpoints.py)."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from deployments.forms import EndpointForm, kind_defaults
from deployments.selectors import rollouts as selectors
from deployments.services import endpoints as services
from kernel.errors import PlatformError


def _submit(request, form, save):
    """Run the service when the form is valid; a refusal goes on the form (400), 403/404 stay themselves."""
    if request.method == "POST" and form.is_valid():
        try:
            endpoint = save(**form.service_arguments())
        except PlatformError as exc:
            if exc.status in (403, 404):
                raise
            form.add_service_error(exc)
        else:
            return endpoint
    return None


@login_required
@require_http_methods(["GET", "POST"])
def endpoint_create(request):
    # ?kind=llm: a new LLM endpoint's form, with its kind's defaults (also without JavaScript)
    kind = "llm" if request.GET.get("kind") == "llm" else "tensor"
    form = EndpointForm(request.POST or None, user=request.user, kind=kind)
    endpoint = _submit(request, form, lambda **kw: services.endpoint_create(user=request.user, **kw))
    if endpoint is not None:
        messages.success(request, f"Created endpoint {endpoint.name}.")
        return redirect("deployments:endpoint-detail", name=endpoint.name)
    status = 400 if form.is_bound else 200
    context = {"form": form, "endpoint": None, "kind_defaults": {k: kind_defaults(k) for k in ("tensor", "llm")}}
    return render(request, "deployments/endpoint_form.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def endpoint_edit(request, name):
    endpoint = selectors.endpoint_get(user=request.user, name=name)
    form = EndpointForm(request.POST or None, user=request.user, endpoint=endpoint)
    saved = _submit(request, form, lambda **kw: services.endpoint_update(user=request.user, endpoint=endpoint, **kw))
    if saved is not None:
        messages.success(request, f"Saved endpoint {endpoint.name}.")
        return redirect("deployments:endpoint-detail", name=endpoint.name)
    status = 400 if form.is_bound else 200
    context = {"form": form, "endpoint": endpoint, "kind_defaults": None}
    return render(request, "deployments/endpoint_form.html", context, status=status)
