"""Writes of generative recommender versions: a bundle (registry/gr/bundle.py: graphs,
codebook, holdout; checked, never unpickled) stored content-addressed as the version's
file, with its GRSpec naming the catalog version it was built against.

The catalog must be the model's team's and have the bundle's semantic-id shape; the holdout's
items must be in it (the build's gates judge on them). A version that cannot be created
leaves nothing stored.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from django.db import transaction

from kernel.errors import InvalidInput, NotFound
from registry import storage
from registry.gr import bundle as bundles
from registry.gr import catalog_files
from registry.gr import triton as gr_triton
from registry.lock_objects import model_for_update
from registry.metrics_input import metrics_checked
from registry.models import (
    EventAction,
    Framework,
    GRSpec,
    ItemCatalogVersion,
    ModelVersion,
    RegisteredModel,
    Role,
    Task,
    VersionSource,
)
from registry.services.catalog import _next_version
from registry.services.events import event_record
from registry.services.teams import require_role


def _require_gr_model(user, model: RegisteredModel) -> None:
    require_role(user=user, team=model.team, role=Role.DEVELOPER)
    if model.task != Task.GENERATIVE_REC:
        raise InvalidInput(
            f"model: {model.name!r} has task {model.task!r}; generative recommender versions go to a model whose "
            "task is 'generative_rec'.",
            code="model_not_generative_rec",
            field="model",
        )


def _check_catalog(model: RegisteredModel, catalog_version: ItemCatalogVersion, info, root: Path) -> None:
    catalog = catalog_version.catalog
    if catalog.team_id != model.team_id:  # another team's catalog reads as absent
        raise NotFound(
            "catalog_version: no such catalog version in the model's team.",
            code="catalog_version_not_found",
            field="catalog_version",
        )
    if (catalog.levels, catalog.codes_per_level) != (info.levels, info.codes_per_level):
        raise InvalidInput(
            f"catalog_version: catalog {catalog.name!r} names items with {catalog.levels} x {catalog.codes_per_level} "
            f"codes; the bundle's model generates {info.levels} x {info.codes_per_level}.",
            code="catalog_shape_mismatch",
            field="catalog_version",
        )
    items = catalog_files.read_items(storage.absolute(catalog_version.path))
    holdout = bundles.read_holdout(root)
    seen = set(holdout["next_item"].tolist()) | set(holdout["history"][holdout["history"] >= 0].tolist())
    unknown = [item for item in seen if item not in items.row_of_item]
    if unknown:
        raise InvalidInput(
            f"bundle: the holdout names {len(unknown)} item(s) not in {catalog_version}, e.g. {unknown[0]}.",
            code="holdout_items_unknown",
            field="bundle",
        )


def gr_version_create(
    *,
    user,
    model: RegisteredModel,
    bundle_dir: Path,
    catalog_version: ItemCatalogVersion,
    metrics: dict | None = None,
    tags: dict | None = None,
) -> ModelVersion:
    """Register the bundle at `bundle_dir` (copied; the caller's directory is left as it is)
    as the next version of `model`, built against `catalog_version`."""
    _require_gr_model(user, model)
    metrics = metrics_checked(metrics)
    info = bundles.inspect_bundle(bundle_dir)
    _check_catalog(model, catalog_version, info, Path(bundle_dir))
    staging = Path(tempfile.mkdtemp(dir=storage.tmp_dir(), prefix="gr-bundle-")) / "bundle"
    shutil.copytree(bundle_dir, staging)
    rel, sha = storage.put_dir(staging)
    try:
        with transaction.atomic():
            locked = model_for_update(model.pk)
            version = ModelVersion.objects.create(
                model=locked,
                version=_next_version(locked),
                source=VersionSource.GR_BUNDLE,
                framework=Framework.ONNX,
                file_path=rel,
                file_sha256=sha,
                file_size=info.size,
                original_filename="bundle",
                signature=gr_triton.SIGNATURE,  # what requests carry (the graphs' are in the bundle)
                metrics=metrics or {},
                tags=tags or {},
                created_by=user,
            )
            GRSpec.objects.create(
                version=version,
                catalog_version=catalog_version,
                levels=info.levels,
                codes_per_level=info.codes_per_level,
                layers=info.layers,
                d_model=info.d_model,
                max_history=info.max_history,
                codebook_sha256=info.codebook_sha256,
            )
            event_record(
                actor=user,
                obj=version,
                team=locked.team,
                action=EventAction.CREATED,
                to_state=version.status,
                data={"source": "gr_bundle", "sha256": sha, "catalog_version": str(catalog_version)},
            )
        return version
    except BaseException:
        storage.delete_if_unreferenced(rel, ModelVersion.objects.filter(file_path=rel).exists())
        raise
    finally:
        shutil.rmtree(staging.parent, ignore_errors=True)


def gr_build_catalog(version: ModelVersion, number, *, generative: bool) -> ItemCatalogVersion | None:
    """The catalog version a GR build packages: `number` of the catalog the version was built
    against (None: the version's own); other builds take none (a number is refused)."""
    if number in (None, ""):
        return None
    if not generative:
        raise InvalidInput(
            "catalog_version: only a generative recommender's build takes a catalog version.", field="catalog_version"
        )
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise InvalidInput("catalog_version: give a catalog version number (1, 2, ...).", field="catalog_version")
    catalog = version.gr.catalog_version.catalog
    found = catalog.versions.filter(version=number).first()
    if found is None:
        raise NotFound(
            f"catalog_version: catalog {catalog.name!r} has no version {number}.",
            code="catalog_version_not_found",
            field="catalog_version",
        )
    return found
