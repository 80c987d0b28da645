"""Dashboard pages for inference keys and who may call an endpoint; thin: selectors to
read, services to write. The secret appears once, in the reply to the create POST (not
stored, not in a redirect, not cached). The team's provider secrets (registry) are listed
and stored on the same page, their value likewise shown only in the reply that stored it."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from deployments.forms import InferenceKeyCreateForm
from deployments.selectors import keys as selectors
from deployments.selectors.rollouts import endpoint_get
from deployments.services import endpoints as endpoint_services
from deployments.services import keys as services
from kernel.errors import NotFound, PlatformError
from registry.models import Role
from registry.selectors.llm import secret_get, secret_list
from registry.selectors.teams import team_list
from registry.services import llm as llm_services


def _page(request, form, *, created=None, secret=None, status=200, new_secret=None, new_secret_value=None):
    active = request.GET.get("show") != "all"
    keys = selectors.inference_key_list(user=request.user, active=True if active else None)
    context = {
        "form": form,
        "keys": keys,
        "show_all": not active,
        "created": created,
        "secret": secret,
        # provider secrets (registry): names only; a value only in the reply that stored it
        "provider_secrets": secret_list(user=request.user),
        "secret_teams": [t.name for t in team_list(user=request.user, min_role=Role.ADMIN)],
        "new_secret": new_secret,
        "new_secret_value": new_secret_value,
    }
    return render(request, "deployments/key_list.html", context, status=status)


@login_required
@never_cache
@require_http_methods(["GET", "POST"])
def key_list(request):
    """GET: the keys of the user's teams and a form; POST: create one and show its secret once."""
    if request.method == "GET":
        return _page(request, InferenceKeyCreateForm(user=request.user))
    form = InferenceKeyCreateForm(request.POST, user=request.user)
    if not form.is_valid():
        return _page(request, form, status=400)
    try:
        key, secret = services.inference_key_create(user=request.user, **form.service_arguments())
    except PlatformError as exc:
        form.add_error(exc.field if exc.field in form.fields else None, exc.detail)
        return _page(request, form, status=exc.status)
    return _page(request, InferenceKeyCreateForm(user=request.user), created=key, secret=secret)


@login_required
@never_cache
@require_http_methods(["POST"])
def secret_create(request):
    """Store a provider secret (team admins) and show its value this once."""
    team = team_list(user=request.user).filter(name=request.POST.get("team", "")[:150]).first()
    try:
        if team is None:
            raise NotFound("team: you are in no such team.", field="team")
        stored = llm_services.secret_create(
            user=request.user,
            team=team,
            name=request.POST.get("name", ""),
            value=request.POST.get("value", ""),
            origins=request.POST.get("origins", "")[:20000],
        )
    except PlatformError as exc:
        messages.error(request, exc.detail)
        return redirect("deployments:key-list")
    return _page(
        request,
        InferenceKeyCreateForm(user=request.user),
        new_secret=stored,
        new_secret_value=request.POST["value"],
    )


@login_required
@require_http_methods(["POST"])
def secret_delete(request, pk):
    try:
        llm_services.secret_delete(user=request.user, secret=secret_get(user=request.user, secret_id=pk))
    except PlatformError as exc:
        messages.error(request, exc.detail)
    else:
        messages.success(request, "Secret deleted.")
    return redirect("deployments:key-list")


@login_required
@require_http_methods(["GET", "POST"])
def key_revoke(request, pk):
    """GET: a confirmation page (works without JavaScript); POST: revoke."""
    key = selectors.inference_key_get(user=request.user, key_id=pk)
    if request.method == "GET":
        return render(request, "deployments/key_revoke.html", {"key": key})
    try:
        services.inference_key_revoke(user=request.user, key=key, reason=request.POST.get("reason", ""))
    except PlatformError as exc:
        messages.error(request, exc.detail)
    else:
        messages.success(
            request, f"Key {key.name} ({key.prefix}…) revoked: the gateway refuses it from its next poll (~0.3 s)."
        )
    return redirect("deployments:key-list")


@login_required
@require_http_methods(["POST"])
def endpoint_access(request, name):
    """Make an endpoint public (no key needed) or closed (only its team's keys)."""
    endpoint = endpoint_get(user=request.user, name=name)
    public = request.POST.get("public")
    if public not in ("true", "false"):
        messages.error(request, "public: give true or false.")
        return redirect("deployments:endpoint-detail", name=name)
    try:
        endpoint_services.endpoint_update(user=request.user, endpoint=endpoint, public=public == "true")
    except PlatformError as exc:
        messages.error(request, exc.detail)
    else:
        messages.success(
            request,
            f"{name} is now {'public: anyone who reaches the gateway may call it' if public == 'true' else 'closed: only its team’s inference keys may call it'}.",
        )
    return redirect("deployments:endpoint-detail", name=name)
