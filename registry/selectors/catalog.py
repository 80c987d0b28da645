"""Reads of the model catalog shared by the API, the dashboard and the admin (team-scoped)."""

from django.db.models import Count, Max, Q, QuerySet

from config.errors import NotFound
from registry.models import ModelVersion, RegisteredModel
from registry.selectors.teams import team_scoped


def model_list(*, user, filters: dict | None = None) -> QuerySet:
    filters = filters or {}
    qs = team_scoped(RegisteredModel.objects.select_related("team"), user, "team_id").annotate(
        version_count=Count("versions", distinct=True), latest_version=Max("versions__version")
    )
    if filters.get("q"):
        q = filters["q"]
        qs = qs.filter(Q(name__icontains=q) | Q(description__icontains=q))
    if filters.get("team"):
        qs = qs.filter(team__name=filters["team"])
    return qs


def model_get(*, user, name: str) -> RegisteredModel:
    model = model_list(user=user).filter(name=name).first()
    if model is None:
        raise NotFound(f"No model named {name!r}.", code="model_not_found")
    return model


def version_list(*, user, model: RegisteredModel | None = None) -> QuerySet:
    qs = team_scoped(ModelVersion.objects.select_related("model", "model__team", "created_by"), user, "model__team_id")
    if model is not None:
        qs = qs.filter(model=model)
    return qs


def version_get(*, user, version_id: int) -> ModelVersion:
    version = version_list(user=user).filter(pk=version_id).first()
    if version is None:
        raise NotFound(f"No version with id {version_id}.", code="version_not_found")
    return version
