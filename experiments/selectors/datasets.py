"""Reads of training datasets shared by the API, the pages and the CLI (team-scoped)."""

from __future__ import annotations

from django.db.models import QuerySet

from experiments.models import Dataset
from kernel.errors import NotFound
from registry.selectors.catalog import version_list
from registry.selectors.teams import team_scoped


def dataset_list(*, user, endpoint: str | None = None, name: str | None = None) -> QuerySet:
    qs = team_scoped(
        Dataset.objects.select_related("team", "endpoint", "experiment", "created_by"), user, "team_id"
    ).order_by("-created_at", "-pk")
    if endpoint:
        qs = qs.filter(endpoint__name=endpoint)
    if name:
        qs = qs.filter(name=name)
    return qs


def dataset_get(*, user, dataset_id: str) -> Dataset:
    """A dataset of the user's teams by its id (ds-…); another team's reads as unknown."""
    dataset = dataset_list(user=user).filter(public_id=str(dataset_id)[:32]).first()
    if dataset is None:
        raise NotFound(f"No dataset {str(dataset_id)[:64]!r}.", code="dataset_not_found")
    return dataset


def dataset_versions(*, user, dataset: Dataset) -> QuerySet:
    """Model versions the user may see that were trained on the dataset (their tag `dataset`)."""
    return version_list(user=user).filter(tags__dataset=dataset.public_id).order_by("-pk")


def dataset_versions_by_dataset(*, user, datasets) -> dict[str, list]:
    """{dataset public id: [versions trained on it]} in one query, for a list page."""
    ids = [d.public_id for d in datasets]
    out: dict[str, list] = {i: [] for i in ids}
    for version in version_list(user=user).filter(tags__dataset__in=ids).order_by("-pk"):
        out[version.tags["dataset"]].append(version)
    return out
