"""Dashboard pages of the registry; thin: read through selectors, write through services."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods
from django.views.decorators.vary import vary_on_headers

from kernel.errors import PlatformError
from registry.forms import ModelCreateForm, VersionCreateForm
from registry.models import DataKind
from registry.selectors import catalog as selectors
from registry.selectors.aliases import alias_list
from registry.selectors.events import event_list
from registry.services import aliases as alias_services
from registry.services import catalog as services
from registry.services import version_data


def _form_error(form, exc: PlatformError) -> None:
    field = exc.field if exc.field in form.fields else None
    detail = exc.detail.removeprefix(f"{field}: ") if field else exc.detail  # shown under the field already
    form.add_error(field, detail)


@login_required
@vary_on_headers("HX-Request")
def model_list(request):
    query = request.GET.get("q", "").strip()
    models = selectors.model_list(user=request.user, filters={"q": query}).order_by("name")
    page = Paginator(models, 50).get_page(request.GET.get("page"))
    context = {"page": page, "q": query}
    if request.htmx:
        return render(request, "registry/model_list.html#model-rows", context)
    return render(request, "registry/model_list.html", context)


@login_required
@require_http_methods(["GET", "POST"])
def model_create(request):
    form = ModelCreateForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        try:
            model = services.model_create(user=request.user, **form.cleaned_data)
        except PlatformError as exc:
            _form_error(form, exc)
        else:
            messages.success(request, f"Registered model {model.name}.")
            return redirect("registry:model-detail", name=model.name)
    return render(request, "registry/model_form.html", {"form": form})


@login_required
@vary_on_headers("HX-Request")
def model_detail(request, name):
    model = selectors.model_get(user=request.user, name=name)
    versions = selectors.version_list(user=request.user, model=model).order_by("-version")
    events = event_list(user=request.user, object_type="registry.registeredmodel", object_id=model.pk)[:20]
    context = {"model": model, "versions": versions, "events": events, "aliases": alias_list(model=model)}
    if request.htmx:
        return render(request, "registry/model_detail.html#version-rows", context)
    return render(request, "registry/model_detail.html", context)


@login_required
@require_http_methods(["GET", "POST"])
def version_create(request, name):
    model = selectors.model_get(user=request.user, name=name)
    form = VersionCreateForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        raw_names = getattr(request, "upload_raw_names", {})  # file names checked as sent
        files = tuple(
            version_data.DataUpload(
                "validation_data", DataKind.VALIDATION, raw_names.get(f.name, f.name), f.chunks(), f.size
            )
            for f in [data.get("validation_data")]
            if f
        )
        model_file = data.get("file")
        try:
            version = version_data.version_create_with_data(
                user=request.user,
                model=model,
                source_uri=data.get("source_uri") or "",
                upload=version_data.DataUpload(
                    "file", "", raw_names.get(model_file.name, model_file.name), model_file.chunks(), model_file.size
                )
                if model_file
                else None,
                metrics=data.get("metrics"),
                data=files,
                label=data.get("label") or None,
            )
        except PlatformError as exc:
            _form_error(form, exc)
        else:
            messages.success(request, f"Registered {version}.")
            return redirect("registry:version-detail", pk=version.pk)
    return render(request, "registry/version_form.html", {"form": form, "model": model})


@login_required
def version_detail(request, pk):
    version = selectors.version_get(user=request.user, version_id=pk)
    events = event_list(user=request.user, object_type="registry.modelversion", object_id=version.pk)[:20]
    return render(
        request,
        "registry/version_detail.html",
        {
            "version": version,
            "events": events,
            "run_id": selectors.version_run_id(version),
            "aliases": alias_list(model=version.model),
        },
    )


@login_required
@require_http_methods(["POST"])
def alias_set(request, name):
    """Set or move an alias from the model or version page; back to the version it now names."""
    model = selectors.model_get(user=request.user, name=name)
    alias = request.POST.get("alias", "").strip()
    number = request.POST.get("version", "")
    version = (
        selectors.version_list(user=request.user, model=model).filter(version=int(number)).first()
        if number.isdigit() and len(number) < 10
        else None
    )
    if version is None:
        messages.error(request, f"version: model {model.name} has no version {number[:20]!r}.")
        return redirect("registry:model-detail", name=model.name)
    try:
        alias_services.alias_set(user=request.user, model=model, name=alias, version=version)
    except PlatformError as exc:
        if exc.status in (403, 404):
            raise
        messages.error(request, exc.detail)
    else:
        messages.success(request, f"models:/{model.name}@{alias} now names v{version.version}.")
    return redirect("registry:version-detail", pk=version.pk)


@login_required
@require_http_methods(["POST"])
def alias_delete(request, name, alias):
    model = selectors.model_get(user=request.user, name=name)
    alias_services.alias_delete(user=request.user, model=model, name=alias)
    messages.success(request, f"Deleted alias @{alias} of {model.name}.")
    back = request.POST.get("version_id", "")
    if back.isdigit() and selectors.version_list(user=request.user, model=model).filter(pk=int(back)).exists():
        return redirect("registry:version-detail", pk=int(back))
    return redirect("registry:model-detail", name=model.name)
