"""Writes of item catalogs: a catalog (a team's, with its semantic-id shape) and its versions.

A version is immutable: its items (ids and semantic ids) and the trie compiled from them are
stored content-addressed (registry/gr/catalog_files.py). New items make a new version: the
ones given with their semantic ids as they are, or, given as content embeddings, encoded
with a generative recommender version's codebook (residual k-means, collisions resolved
against the items the version keeps), so a model serves new items without being retrained.
Every version's number is allocated under the catalog's row lock.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from django.db import transaction
from django.db.models import Max

from kernel.errors import Conflict, InvalidInput, NotFound, TooLarge
from registry import conf as registry_conf
from registry import names, storage
from registry.gr import catalog_files
from registry.gr.bundle import codebook_of, read_npz
from registry.gr.semantic_ids import CollisionError, semantic_ids
from registry.lock_objects import item_catalog_for_update
from registry.models import EventAction, ItemCatalog, ItemCatalogVersion, ModelVersion, Role
from registry.selectors.item_catalogs import gr_spec_of_version
from registry.services.catalog import NAME_RE
from registry.services.events import event_record
from registry.services.teams import require_role


def max_items() -> int:
    return int(registry_conf.get("GR_CATALOG_MAX_ITEMS"))


def item_catalog_create(
    *, user, team, name: str, levels: int, codes_per_level: int, description: str = ""
) -> ItemCatalog:
    """A team's catalog (developers). Names are one namespace across teams: a taken name is
    the same 409 as for models (no name oracle)."""
    if not NAME_RE.match(name or ""):
        raise InvalidInput(
            "name: use 1-64 lower-case letters, digits, '-' or '_', starting with a letter or digit.", field="name"
        )
    for field, value, (low, high) in (("levels", levels, (1, 8)), ("codes_per_level", codes_per_level, (2, 4096))):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise InvalidInput(f"{field}: give a whole number in {low}..{high}.", field=field)
    require_role(user=user, team=team, role=Role.DEVELOPER)
    with transaction.atomic():
        holder = ItemCatalog.objects.filter(name=name).select_related("team").first()
        if holder is not None:
            raise names.name_conflict(user=user, kind="item catalog", name=name, holder_team=holder.team)
        catalog = ItemCatalog.objects.create(
            name=name,
            team=team,
            levels=levels,
            codes_per_level=codes_per_level,
            description=description[:2000],
            created_by=user,
        )
        event_record(actor=user, obj=catalog, team=team, action=EventAction.CREATED, to_state="active")
    return catalog


def _store(catalog: ItemCatalog, item_id: np.ndarray, semantic_id: np.ndarray) -> tuple[str, str]:
    staging = Path(tempfile.mkdtemp(dir=storage.tmp_dir(), prefix="catalog-"))
    catalog_files.write_catalog(staging, item_id, semantic_id, codes_per_level=catalog.codes_per_level)
    return storage.put_dir(staging)


def item_catalog_version_create(
    *,
    user,
    catalog: ItemCatalog,
    item_id,
    semantic_id,
    parent: ItemCatalogVersion | None = None,
    codebook_sha256: str = "",
) -> ItemCatalogVersion:
    """The next version of `catalog` holding exactly these items (checked: unique ids and
    semantic ids, codes in range). The files are stored before the row; a failed create
    removes them unless another version holds the same content."""
    require_role(user=user, team=catalog.team, role=Role.DEVELOPER)
    item_id, semantic_id = catalog_files.check_items(
        item_id, semantic_id, levels=catalog.levels, codes_per_level=catalog.codes_per_level, max_items=max_items()
    )
    rel, sha = _store(catalog, item_id, semantic_id)
    try:
        with transaction.atomic():
            locked = item_catalog_for_update(catalog.pk)
            number = (locked.versions.aggregate(v=Max("version"))["v"] or 0) + 1
            version = ItemCatalogVersion.objects.create(
                catalog=locked,
                version=number,
                path=rel,
                sha256=sha,
                items=len(item_id),
                parent=parent,
                codebook_sha256=codebook_sha256,
                created_by=user,
            )
            event_record(
                actor=user,
                obj=version,
                team=locked.team,
                action=EventAction.CREATED,
                to_state="active",
                data={"items": len(item_id), "parent": parent.version if parent else None, "sha256": sha},
            )
        return version
    except BaseException:
        storage.delete_if_unreferenced(rel, ItemCatalogVersion.objects.filter(path=rel).exists())
        raise


def _encoded(catalog, arrays: dict, encode_with: ModelVersion | None, taken: set) -> tuple[np.ndarray, str]:
    """Semantic ids of the upload's items: given, or encoded from `embedding` by a version's codebook."""
    if "semantic_id" in arrays:
        return arrays["semantic_id"], ""
    if "embedding" not in arrays:
        raise InvalidInput("file: give semantic_id [n, levels], or embedding [n, dim] with encode_with.", field="file")
    spec = gr_spec_of_version(encode_with) if encode_with is not None else None
    if spec is None:
        raise InvalidInput(
            "encode_with: embeddings are encoded by a generative recommender version's codebook; name one.",
            code="codebook_required",
            field="encode_with",
        )
    if (spec.levels, spec.codes_per_level) != (catalog.levels, catalog.codes_per_level):
        raise InvalidInput(
            f"encode_with: {encode_with} makes ids of {spec.levels} x {spec.codes_per_level}; catalog "
            f"{catalog.name!r} is {catalog.levels} x {catalog.codes_per_level}.",
            code="catalog_shape_mismatch",
            field="encode_with",
        )
    codebook = codebook_of(storage.absolute(encode_with.file_path))
    embedding = np.asarray(arrays["embedding"])
    if embedding.ndim != 2 or embedding.shape[1] != codebook.shape[2] or embedding.dtype.kind != "f":
        raise InvalidInput(
            f"file: embedding must be float [n, {codebook.shape[2]}] (the codebook's width).", field="file"
        )
    if not np.isfinite(embedding).all():
        raise InvalidInput("file: embedding holds NaN or infinity.", field="file")
    try:
        return semantic_ids(embedding, codebook, taken=taken), spec.codebook_sha256
    except CollisionError as exc:
        raise Conflict(f"file: {exc}.", code="catalog_full") from None


def item_catalog_version_from_upload(
    *,
    user,
    catalog: ItemCatalog,
    filename: str,
    chunks,
    size: int | None = None,
    base: int | None = None,
    encode_with: ModelVersion | None = None,
) -> ItemCatalogVersion:
    """A new version from an uploaded NPZ (never unpickled): `item_id` [n] with `semantic_id`
    [n, levels] or `embedding` [n, dim] (encoded with `encode_with`'s codebook). With `base` (a
    version number) the new version is that version's items plus these (no id may repeat)."""
    require_role(user=user, team=catalog.team, role=Role.DEVELOPER)
    limit = int(registry_conf.get("GR_CATALOG_MAX_MB")) * 1024 * 1024
    if size is not None and size > limit:
        raise TooLarge(f"file: {size} bytes is over the {limit >> 20} MB limit (GR_CATALOG_MAX_MB).", field="file")
    if encode_with is not None and encode_with.model.team_id != catalog.team_id:
        raise NotFound(
            "encode_with: no such version in the catalog's team.", code="version_not_found", field="encode_with"
        )
    parent = None
    if base is not None:
        parent = catalog.versions.filter(version=base).first()
        if parent is None:
            raise NotFound(
                f"base: catalog {catalog.name!r} has no version {base}.", code="catalog_version_not_found", field="base"
            )
    try:
        tmp, _, _ = storage.stream_to_tmp(chunks, limit_bytes=limit)
    except OverflowError:
        raise TooLarge(f"file: over the {limit >> 20} MB limit (GR_CATALOG_MAX_MB).", field="file") from None
    try:
        with open(tmp, "rb") as fh:
            if fh.read(4) != b"PK\x03\x04":
                raise InvalidInput(
                    f"file: {filename[:80]!r} is not an NPZ archive (numpy.savez).", code="data_format", field="file"
                )
        try:
            arrays = read_npz(tmp)
        except InvalidInput as exc:
            raise InvalidInput(exc.detail.replace("bundle:", "file:", 1), code="data_format", field="file") from None
    finally:
        tmp.unlink(missing_ok=True)
    if "item_id" not in arrays:
        raise InvalidInput("file: the NPZ needs item_id [n] (int64).", field="file")
    kept = catalog_files.read_items(storage.absolute(parent.path)) if parent else None
    taken = set(map(tuple, kept.semantic_ids.tolist())) if kept else set()
    new_ids = np.asarray(arrays["item_id"])
    codes, codebook_sha = _encoded(catalog, arrays, encode_with, taken)
    if kept is not None:
        repeated = (
            np.intersect1d(kept.item_ids, new_ids.astype(np.int64, copy=False)) if new_ids.dtype.kind in "iu" else []
        )
        if len(repeated):
            raise Conflict(
                f"file: {len(repeated)} item id(s) are in version {parent.version} already, e.g. {int(repeated[0])}.",
                code="item_exists",
            )
        new_ids = np.concatenate([kept.item_ids, new_ids])
        codes = np.concatenate([kept.semantic_ids, np.asarray(codes)])
    return item_catalog_version_create(
        user=user, catalog=catalog, item_id=new_ids, semantic_id=codes, parent=parent, codebook_sha256=codebook_sha
    )
