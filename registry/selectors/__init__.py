"""Reads shared by the API, the dashboard and the admin; every list is team-scoped."""

from django.contrib.auth.models import Group
from django.db.models import Count, Max, Q, QuerySet

from config.errors import NotFound
from registry.models import Build, Event, ModelVersion, RegisteredModel, Role, TeamMembership


def team_ids_for(user, *, min_role: str = Role.VIEWER) -> set[int] | None:
    """The teams in which `user` holds at least `min_role`; None means every team (staff)."""
    if not user or not user.is_authenticated:
        return set()
    if user.is_staff or user.is_superuser:
        return None
    allowed = [r.value for r in Role if Role.rank(r.value) >= Role.rank(min_role)]
    return set(TeamMembership.objects.filter(user=user, role__in=allowed).values_list("team_id", flat=True))


def _scope(qs: QuerySet, user, team_field: str, min_role: str = Role.VIEWER) -> QuerySet:
    ids = team_ids_for(user, min_role=min_role)
    if ids is None:
        return qs
    return qs.filter(**{f"{team_field}__in": ids})


def team_list(*, user, min_role: str = Role.VIEWER) -> QuerySet:
    return _scope(Group.objects.order_by("name"), user, "id", min_role)


def user_role_in(*, user, team) -> str | None:
    if user.is_staff or user.is_superuser:
        return Role.ADMIN
    return TeamMembership.objects.filter(user=user, team=team).values_list("role", flat=True).first()


def model_list(*, user, filters: dict | None = None) -> QuerySet:
    filters = filters or {}
    qs = _scope(RegisteredModel.objects.select_related("team"), user, "team_id").annotate(
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
    qs = _scope(ModelVersion.objects.select_related("model", "model__team", "created_by"), user, "model__team_id")
    if model is not None:
        qs = qs.filter(model=model)
    return qs


def version_get(*, user, version_id: int) -> ModelVersion:
    version = version_list(user=user).filter(pk=version_id).first()
    if version is None:
        raise NotFound(f"No version with id {version_id}.", code="version_not_found")
    return version


def build_list(*, user, version: ModelVersion | None = None) -> QuerySet:
    qs = _scope(Build.objects.select_related("version", "version__model"), user, "version__model__team_id")
    if version is not None:
        qs = qs.filter(version=version)
    return qs


def event_list(*, user, object_type: str | None = None, object_id: str | None = None) -> QuerySet:
    qs = Event.objects.select_related("actor", "team")
    ids = team_ids_for(user)
    if ids is not None:
        qs = qs.filter(team_id__in=ids)
    if object_type:
        qs = qs.filter(object_type=object_type)
    if object_id is not None:
        qs = qs.filter(object_id=str(object_id))
    return qs
