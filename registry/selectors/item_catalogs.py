"""Reads of item catalogs and generative recommender versions (team-scoped)."""

from __future__ import annotations

from django.db.models import Count, Max, QuerySet

from kernel.errors import NotFound
from registry.models import GRSpec, ItemCatalog, ItemCatalogVersion
from registry.selectors.teams import team_scoped


def item_catalog_list(*, user) -> QuerySet:
    return team_scoped(ItemCatalog.objects.select_related("team"), user, "team_id").annotate(
        version_count=Count("versions", distinct=True), latest_version=Max("versions__version")
    )


def item_catalog_get(*, user, name: str) -> ItemCatalog:
    """The user's team's catalog `name`; another team's reads as absent (404)."""
    catalog = item_catalog_list(user=user).filter(name=name).first()
    if catalog is None:
        raise NotFound(f"No item catalog named {name!r}.", code="catalog_not_found")
    return catalog


def item_catalog_version_list(*, user, catalog: ItemCatalog | None = None) -> QuerySet:
    qs = team_scoped(
        ItemCatalogVersion.objects.select_related("catalog", "catalog__team", "parent", "created_by"),
        user,
        "catalog__team_id",
    )
    return qs.filter(catalog=catalog) if catalog is not None else qs


def item_catalog_version_get(*, user, catalog: ItemCatalog, version: int) -> ItemCatalogVersion:
    found = item_catalog_version_list(user=user, catalog=catalog).filter(version=version).first()
    if found is None:
        raise NotFound(f"Item catalog {catalog.name!r} has no version {version}.", code="catalog_version_not_found")
    return found


def gr_spec_of_version(version) -> GRSpec | None:
    """The version's generative recommender spec, or None for another kind of version."""
    try:
        return version.gr
    except GRSpec.DoesNotExist:
        return None


def serving_catalog(artifact) -> ItemCatalogVersion | None:
    """The catalog version a generative recommender's artifact serves (None for other artifacts)."""
    if artifact.item_catalog_version_id is None:
        return None
    return ItemCatalogVersion.objects.select_related("catalog").get(pk=artifact.item_catalog_version_id)
