"""Reads of the model catalog shared by the API, the dashboard and the admin (team-scoped)."""

from django.db.models import Count, Max, Q, QuerySet

from kernel.errors import NotFound
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
    qs = team_scoped(
        ModelVersion.objects.select_related("model", "model__team", "created_by", "gr__catalog_version__catalog"),
        user,
        "model__team_id",
    )

    if model is not None:
        qs = qs.filter(model=model)
    return qs


def version_get(*, user, version_id: int) -> ModelVersion:
    version = version_list(user=user).filter(pk=version_id).first()
    if version is None:
        raise NotFound(f"No version with id {version_id}.", code="version_not_found")
    return version


def version_run_id(version: ModelVersion) -> str:
    """The MLflow run a version came from: recorded at registration (runs:/ and models:/
    sources alike), else read from a runs:/<run_id>/… URI; "" for uploads."""
    run_id = (version.tags or {}).get("mlflow_run_id", "")
    if not run_id and version.source_uri.startswith("runs:/"):
        run_id = version.source_uri[len("runs:/") :].split("/", 1)[0]
    return run_id if run_id.isalnum() else ""


def versions_from_run(*, user, run_id: str) -> QuerySet:
    """Versions the user may see that were registered from the MLflow run `run_id`."""
    return (
        version_list(user=user)
        .filter(Q(tags__mlflow_run_id=run_id) | Q(source_uri__startswith=f"runs:/{run_id}/"))
        .order_by("model__name", "version")
    )
