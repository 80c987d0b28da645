"""Data a version carries: an input example and a labelled validation set.

Guarantees: the file is read without unpickling (registry/data_files.py), checked
against the version's signature and stored as a normalized NPZ with one os.replace
(registry/storage.py), and the row that points at it is written in one transaction
with its audit Event; a refused file leaves nothing behind and the previous data in
place. A developer of the version's team may attach or remove data; builds started
afterwards use it."""

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import transaction

from kernel.errors import InvalidInput, PlatformError, TooLarge
from registry import data_files, storage
from registry.lock_objects import version_for_update
from registry.models import DataKind, EventAction, ModelVersion, Role, VersionData
from registry.services.events import event_record
from registry.services.teams import require_role

DEFAULT_LABEL = "label"


def _limits() -> tuple[int, int]:
    return int(getattr(settings, "VERSION_DATA_MAX_MB", 256)), int(
        getattr(settings, "VERSION_DATA_MAX_ROWS", 1_000_000)
    )


def _check_filename(name: str) -> str:
    if not name or any(part in name for part in ("/", "\\", "\x00")) or name.startswith(".."):
        raise InvalidInput(
            f"file: the file name {name!r} has path parts; send a bare name such as data.parquet.",
            code="bad_filename",
            field="file",
        )
    return name


def _store(arrays: dict) -> tuple[str, str, int]:
    blob = data_files.to_npz_bytes(arrays)
    tmp_path, sha, size = storage.stream_to_tmp([blob])
    return storage.put_file(tmp_path, sha, ".npz"), sha, size


def _replace(
    *, user, version: ModelVersion, kind: str, arrays: dict, fmt: str, filename: str, label: str
) -> VersionData:
    rel, sha, size = _store(arrays)
    previous = ""
    try:
        with transaction.atomic():
            locked = version_for_update(version.pk)
            row = VersionData.objects.filter(version=locked, kind=kind).first()
            previous = row.path if row else ""
            fields = dict(
                path=rel,
                sha256=sha,
                size_bytes=size,
                format=fmt,
                original_filename=filename,
                rows=int(len(arrays["label"] if "label" in arrays else next(iter(arrays.values())))),
                label=label if "label" in arrays else "",
                summary=data_files.summary(arrays),
                created_by=user,
            )
            if row is None:
                row = VersionData.objects.create(version=locked, kind=kind, **fields)
            else:
                for key, value in fields.items():
                    setattr(row, key, value)
                row.save()
            event_record(
                actor=user,
                obj=locked,
                team=locked.model.team,
                action=EventAction.DATA_ATTACHED,
                data={"kind": kind, "format": fmt, "rows": row.rows, "sha256": sha, "label": row.label},
            )
    except BaseException:
        storage.delete_if_unreferenced(rel, VersionData.objects.filter(path=rel).exists())
        raise
    if previous and previous != rel:
        storage.delete_if_unreferenced(previous, VersionData.objects.filter(path=previous).exists())
    return row


def version_data_attach(
    *, user, version: ModelVersion, kind: str, filename: str, chunks, size: int | None = None, label: str | None = None
) -> VersionData:
    """Check and store `kind` data for `version`, replacing what it had of that kind.

    A validation set needs labels (`label`, default "label"); an input example may carry
    them (used when present)."""
    require_role(user=user, team=version.model.team, role=Role.DEVELOPER)
    if kind not in DataKind.values:
        raise InvalidInput(
            f"kind: {kind!r} is not one of {', '.join(DataKind.values)}.", code="invalid_choice", field="kind"
        )
    _check_filename(filename)
    max_mb, max_rows = _limits()
    limit = max_mb * 1024 * 1024
    if size is not None and size > limit:
        raise TooLarge(f"file: {size} bytes is over the {max_mb} MB limit (VERSION_DATA_MAX_MB).", field="file")
    try:
        tmp_path, _, _ = storage.stream_to_tmp(chunks, limit_bytes=limit)
    except OverflowError:
        raise TooLarge(f"file: over the {max_mb} MB limit (VERSION_DATA_MAX_MB).", field="file") from None
    try:
        fmt, arrays = data_files.read(Path(tmp_path))
    finally:
        Path(tmp_path).unlink(missing_ok=True)
    label_name = label or DEFAULT_LABEL
    if kind == DataKind.EXAMPLE and label_name not in arrays:
        label_name = None
    checked = data_files.check(arrays, version.signature or {}, label=label_name, max_rows=max_rows)
    return _replace(
        user=user, version=version, kind=kind, arrays=checked, fmt=fmt, filename=filename, label=label_name or ""
    )


def version_data_remove(*, user, version: ModelVersion, kind: str) -> bool:
    require_role(user=user, team=version.model.team, role=Role.DEVELOPER)
    with transaction.atomic():
        locked = version_for_update(version.pk)
        row = VersionData.objects.filter(version=locked, kind=kind).first()
        if row is None:
            return False
        path = row.path
        row.delete()
        event_record(
            actor=user, obj=locked, team=locked.model.team, action=EventAction.DATA_REMOVED, data={"kind": kind}
        )
    storage.delete_if_unreferenced(path, VersionData.objects.filter(path=path).exists())
    return True


@dataclass(frozen=True)
class DataUpload:
    """A file sent with a new version: the form/API field it came in, its kind, name and bytes."""

    field: str  # validation_data or input_example
    kind: str
    filename: str
    chunks: Iterable[bytes]
    size: int | None = None


def version_create_with_data(
    *,
    user,
    model,
    source_uri: str = "",
    upload: DataUpload | None = None,
    metrics: dict | None = None,
    tags: dict | None = None,
    data: tuple[DataUpload, ...] = (),
    label: str | None = None,
) -> ModelVersion:
    """Register a version (an uploaded ONNX file, or an MLflow `source_uri`) with its data in
    one write: data the signature refuses leaves no version, and files stored on the way
    that end up belonging to nothing are removed. A refusal of a data file names the field
    it came in (validation_data: …). The API and the dashboard's upload form both call it."""
    from registry.services import catalog

    stored = []
    try:
        with transaction.atomic():
            if upload is not None:
                version = catalog.version_create_from_upload(
                    user=user,
                    model=model,
                    filename=upload.filename,
                    chunks=upload.chunks,
                    size=upload.size,
                    metrics=metrics,
                    tags=tags,
                )
                stored.append(version.file_path)
            else:
                version = catalog.version_create_from_mlflow(
                    user=user, model=model, source_uri=source_uri, metrics=metrics, tags=tags
                )
            for item in data:
                try:
                    row = version_data_attach(
                        user=user,
                        version=version,
                        kind=item.kind,
                        filename=item.filename,
                        chunks=item.chunks,
                        size=item.size,
                        label=label,
                    )
                except PlatformError as exc:  # name the field the file came in
                    exc.field, exc.detail = item.field, exc.detail.replace("file:", f"{item.field}:", 1)
                    exc.args = (exc.detail,)
                    raise
                stored.append(row.path)
    except PlatformError:
        for rel in stored:
            referenced = (
                ModelVersion.objects.filter(file_path=rel).exists() or VersionData.objects.filter(path=rel).exists()
            )
            storage.delete_if_unreferenced(rel, referenced)
        raise
    return version
