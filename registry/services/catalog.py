"""Writes of the model catalog: registered models and their versions (uploaded ONNX files
or MLflow models). Each service takes keyword arguments and the acting user, checks the
user's role, and writes its audit Event in the same transaction.

Why this is one long module: model create, upload, MLflow registration and their clean-up
share the version-number allocation and the file checks; aliases and LLM versions are apart."""

import io
import re
import tempfile
from pathlib import Path

import numpy as np
from django.conf import settings
from django.contrib.auth.models import Group
from django.db import transaction
from django.db.models import Max

from kernel.errors import Conflict, InvalidInput, NotFound, TooLarge
from registry import names, onnx_files, storage
from registry.lock_objects import model_for_update, version_for_update
from registry.metrics_input import metrics_checked
from registry.models import (
    EventAction,
    Framework,
    ModelVersion,
    RegisteredModel,
    Role,
    Task,
    VersionSource,
    VersionStatus,
)
from registry.selectors.catalog import model_list
from registry.services.events import event_record
from registry.services.teams import require_role

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
MLFLOW_SCHEMES = ("runs:/", "models:/")


def _validate_name(name: str) -> None:
    if not NAME_RE.match(name or ""):
        raise InvalidInput(
            "name: use 1-64 lower-case letters, digits, '-' or '_', starting with a letter or digit.",
            field="name",
        )


def model_create(*, user, name: str, team: Group, description: str = "", task: str = Task.CTR) -> RegisteredModel:
    """Register a model. A reserved word and a name another team holds get the same 409
    (names.name_conflict: no name oracle); one of the user's own teams' names says so."""
    _validate_name(name)
    if task not in Task.values:
        raise InvalidInput(f"task: unknown task {task!r}; one of {', '.join(Task.values)}.", field="task")
    require_role(user=user, team=team, role=Role.DEVELOPER)
    if names.reserved_name_problem(name):
        raise names.name_conflict(user=user, kind="model", name=name)
    with transaction.atomic():
        holder = RegisteredModel.objects.filter(name=name).select_related("team").first()
        if holder is not None:
            raise names.name_conflict(user=user, kind="model", name=name, holder_team=holder.team)
        model = RegisteredModel.objects.create(
            name=name, team=team, description=description, task=task, created_by=user
        )
        event_record(actor=user, obj=model, action=EventAction.CREATED, to_state="registered")
    return model


def model_update(
    *, user, model: RegisteredModel, description: str | None = None, task: str | None = None
) -> RegisteredModel:
    require_role(user=user, team=model.team, role=Role.DEVELOPER)
    changes = {}
    if description is not None and description != model.description:
        changes["description"] = description
    if task is not None and task != model.task:
        if task not in Task.values:
            raise InvalidInput(f"task: unknown task {task!r}.", field="task")
        changes["task"] = task
    if not changes:
        return model
    with transaction.atomic():
        model = model_for_update(model.pk)
        for key, value in changes.items():
            setattr(model, key, value)
        model.save(update_fields=[*changes, "updated_at"])
        event_record(actor=user, obj=model, action=EventAction.UPDATED, data={"fields": sorted(changes)})
    return model


def model_delete(*, user, model: RegisteredModel) -> None:
    """Delete a model that has no versions; a model in use is a 409."""
    require_role(user=user, team=model.team, role=Role.DEVELOPER)
    with transaction.atomic():
        model = model_for_update(model.pk)
        count = model.versions.count()
        if count:
            raise Conflict(
                f"Model {model.name!r} has {count} version(s); archive or delete them first.", code="model_in_use"
            )
        event_record(actor=user, obj=model, action=EventAction.DELETED, from_state="registered", to_state="deleted")
        model.delete()


def _next_version(model: RegisteredModel) -> int:
    return (model.versions.aggregate(v=Max("version"))["v"] or 0) + 1


def _require_tensor_model(model: RegisteredModel) -> None:
    if model.task == Task.LLM:
        raise InvalidInput(
            f"model: {model.name!r} is an LLM model; register its versions at /api/v1/models/{model.name}/llm-versions/.",
            code="model_is_llm",
            field="model",
        )
    if model.task == Task.GENERATIVE_REC:
        raise InvalidInput(
            f"model: {model.name!r} is a generative recommender; its versions are bundles with a catalog version "
            "(manage.py train_gr_model, registry/services/gr_versions.py), not single ONNX files.",
            code="model_is_generative_rec",
            field="model",
        )


def _check_filename(name: str) -> str:
    if not name or any(part in name for part in ("/", "\\", "\x00")) or name in {".", ".."} or name.startswith(".."):
        raise InvalidInput(
            f"file: the file name {name!r} has path parts; send a bare name such as model.onnx.",
            code="bad_filename",
            field="file",
        )
    if not name.lower().endswith(".onnx"):
        raise InvalidInput(f"file: {name!r} is not an .onnx file.", code="not_onnx", field="file")
    return name


def version_create_from_upload(
    *,
    user,
    model: RegisteredModel,
    filename: str,
    chunks,
    size: int | None = None,
    metrics: dict | None = None,
    tags: dict | None = None,
) -> ModelVersion:
    """Register an uploaded ONNX file as the next version of `model`.

    Guarantees: the file is a checked ONNX model or nothing is stored; the stored name
    is its sha256; the version number is unique per model under concurrency.
    """
    require_role(user=user, team=model.team, role=Role.DEVELOPER)
    _require_tensor_model(model)
    _check_filename(filename)
    metrics = metrics_checked(metrics)
    limit = settings.MAX_UPLOAD_MB * 1024 * 1024
    if size is not None and size > limit:
        raise TooLarge(
            f"file: {size} bytes is over the {settings.MAX_UPLOAD_MB} MB limit (MAX_UPLOAD_MB).", field="file"
        )
    try:
        tmp_path, sha, size = storage.stream_to_tmp(chunks, limit_bytes=limit)
    except OverflowError:
        raise TooLarge(f"file: over the {settings.MAX_UPLOAD_MB} MB limit (MAX_UPLOAD_MB).", field="file") from None
    rel_path = ""
    try:
        signature = onnx_files.inspect(tmp_path)
        rel_path = storage.put_file(tmp_path, sha, ".onnx")
        with transaction.atomic():
            locked = model_for_update(model.pk)
            version = ModelVersion.objects.create(
                model=locked,
                version=_next_version(locked),
                source=VersionSource.UPLOAD,
                framework=Framework.ONNX,
                file_path=rel_path,
                file_sha256=sha,
                file_size=size,
                original_filename=filename,
                signature=signature,
                metrics=metrics or {},
                tags=tags or {},
                created_by=user,
            )
            event_record(
                actor=user,
                obj=version,
                team=locked.team,
                action=EventAction.CREATED,
                to_state=version.status,
                data={"source": "upload", "sha256": sha, "size": size},
            )
        return version
    except BaseException:
        Path(tmp_path).unlink(missing_ok=True)
        if rel_path:
            storage.delete_if_unreferenced(rel_path, ModelVersion.objects.filter(file_path=rel_path).exists())
        raise


def _mlflow_describe(source_uri: str) -> dict:
    """Resolve an MLflow model URI: flavor, signature and the run's metrics."""
    from kernel import mlflow as mlflow_config

    mlflow_config.configure()
    import mlflow
    from mlflow.exceptions import MlflowException

    try:
        info = mlflow.models.get_model_info(source_uri)
    except (MlflowException, OSError, ValueError) as exc:
        raise InvalidInput(
            f"source_uri: {source_uri!r} does not resolve in the MLflow store: {str(exc).splitlines()[0][:300]}",
            code="source_unresolvable",
            field="source_uri",
        ) from exc
    flavors = set(info.flavors)
    if "onnx" in flavors:
        framework = Framework.ONNX
    elif "pytorch" in flavors:
        framework = Framework.PYTORCH
    else:
        raise InvalidInput(
            f"source_uri: the model has flavors {sorted(flavors)}; only onnx and pytorch are supported.",
            code="unsupported_flavor",
            field="source_uri",
        )
    signature = {}
    if info.signature is not None:
        sig = info.signature.to_dict()
        import json

        def specs(raw):
            out = []
            for spec in json.loads(raw or "[]"):
                tensor = spec.get("tensor-spec", {})
                out.append(
                    {
                        "name": spec.get("name", ""),
                        "dtype": tensor.get("dtype", spec.get("type", "")),
                        "shape": tensor.get("shape", []),
                    }
                )
            return out

        signature = {"inputs": specs(sig.get("inputs")), "outputs": specs(sig.get("outputs"))}
    metrics = {}
    if info.run_id:
        try:
            metrics = dict(mlflow_config.client().get_run(info.run_id).data.metrics)
        except MlflowException:
            metrics = {}
    return {"framework": framework, "signature": signature, "metrics": metrics, "run_id": info.run_id or ""}


def _require_team_source(source_uri: str, team: Group) -> None:
    """A run or registered model of another team, one with no team, and one that does not
    exist all answer the same 404: the caller learns nothing about other teams' runs."""
    from kernel import mlflow as mlflow_config

    if mlflow_config.source_team(source_uri) != team.name:
        raise NotFound(
            f"source_uri: no MLflow run or registered model {source_uri!r} in team {team.name!r}. "
            + mlflow_config.NOT_YOURS_HINT,
            code="source_not_found",
            field="source_uri",
        )


def version_create_from_mlflow(
    *, user, model: RegisteredModel, source_uri: str, metrics: dict | None = None, tags: dict | None = None
) -> ModelVersion:
    """Register an MLflow model (runs:/ or models:/ URI, onnx or pytorch flavor) as a version."""
    require_role(user=user, team=model.team, role=Role.DEVELOPER)
    metrics = metrics_checked(metrics)
    _require_tensor_model(model)
    source_uri = (source_uri or "").strip()
    if not source_uri.startswith(MLFLOW_SCHEMES):
        raise InvalidInput(
            "source_uri: give an MLflow model URI starting with runs:/ or models:/.",
            code="bad_source_uri",
            field="source_uri",
        )
    _require_team_source(source_uri, model.team)
    described = _mlflow_describe(source_uri)
    with transaction.atomic():
        locked = model_for_update(model.pk)
        version = ModelVersion.objects.create(
            model=locked,
            version=_next_version(locked),
            source=VersionSource.MLFLOW,
            source_uri=source_uri,
            framework=described["framework"],
            signature=described["signature"],
            metrics={**described["metrics"], **(metrics or {})},
            tags={**({"mlflow_run_id": described["run_id"]} if described["run_id"] else {}), **(tags or {})},
            created_by=user,
        )
        event_record(
            actor=user,
            obj=version,
            team=locked.team,
            action=EventAction.CREATED,
            to_state=version.status,
            data={"source": "mlflow", "source_uri": source_uri},
        )
    return version


def version_set_status(*, user, version: ModelVersion, status: str, reason: str = "") -> ModelVersion:
    if status not in VersionStatus.values:
        raise InvalidInput(f"status: unknown status {status!r}.", field="status")
    with transaction.atomic():
        locked = version_for_update(version.pk)
        old = locked.status
        if old == status:
            return locked
        locked.status = status
        locked.save(update_fields=["status"])
        event_record(
            actor=user,
            obj=locked,
            team=locked.model.team,
            action=EventAction.STATUS_CHANGED,
            from_state=old,
            to_state=status,
            reason=reason,
        )
    return locked


def version_archive(*, user, version: ModelVersion, reason: str = "") -> ModelVersion:
    require_role(user=user, team=version.model.team, role=Role.DEVELOPER)
    return version_set_status(user=user, version=version, status=VersionStatus.ARCHIVED, reason=reason or "archived")


def version_register_trained(
    *, user, name: str, team, source_uri: str, metrics: dict, tags: dict, validation: dict, description: str = ""
) -> ModelVersion:
    """A model trained here and logged to MLflow, registered as the next version of `name` (the
    model is created in `team` when the user has none of that name), with its labelled
    validation set stored as NPZ (arrays only, never pickles) and named in the version's
    `validation_set` tag for the builds' quality report. When the version cannot be created the
    stored set goes again, unless another version names the same content."""
    model = model_list(user=user).filter(name=name).first()
    if model is None:
        model = model_create(user=user, name=name, team=team, description=description)
    buffer = io.BytesIO()
    np.savez(buffer, **validation)
    with tempfile.NamedTemporaryFile(dir=storage.tmp_dir(), delete=False, suffix=".npz") as fh:
        fh.write(buffer.getvalue())
    tmp = Path(fh.name)
    try:
        rel = storage.put_file(tmp, storage.sha256_of(tmp), ".npz")
    finally:
        tmp.unlink(missing_ok=True)
    try:
        return version_create_from_mlflow(
            user=user, model=model, source_uri=source_uri, metrics=metrics, tags={**tags, "validation_set": rel}
        )
    except Exception:
        storage.delete_if_unreferenced(rel, ModelVersion.objects.filter(tags__validation_set=rel).exists())
        raise
