"""Writes of version aliases (MLflow's @champion / @challenger): set (or move) and delete.

Guarantees: an alias name passes registry/names.py's rule; an alias is unique per model and
points at a version of that model; every change writes its audit Event (on the model, with
the alias and the versions it moved between) in the same transaction; a developer of the
model's team may change them. A version registered from an MLflow registered model
(`models:/name/N`) gets the same alias in MLflow after commit, best effort: the platform's
alias is the one its API resolves."""

import logging

from django.db import transaction

from kernel.errors import InvalidInput, NotFound
from registry.lock_objects import model_for_update
from registry.models import EventAction, ModelVersion, RegisteredModel, Role, VersionAlias
from registry.names import alias_problem, parse_model_uri
from registry.services.events import event_record
from registry.services.teams import require_role

log = logging.getLogger(__name__)


def _mlflow_mirror(version: ModelVersion, alias: str, *, delete: bool = False) -> None:
    """Set or delete the alias on the MLflow registered model version this version came from."""
    try:
        name, mlflow_alias, number = parse_model_uri(version.source_uri)
    except ValueError:
        return  # an upload or a runs:/ source: nothing in MLflow's registry to mirror
    if mlflow_alias is not None:
        return  # registered through an alias: the MLflow version number is not recorded
    try:
        from kernel import mlflow as mlflow_config

        client = mlflow_config.client()
        if delete:
            client.delete_registered_model_alias(name, alias)
        else:
            client.set_registered_model_alias(name, alias, str(number))
    except Exception as exc:  # noqa: BLE001 - best effort: the platform's alias is already set
        log.warning("alias %s@%s not mirrored to MLflow: %s", name, alias, str(exc).splitlines()[0][:200])


def alias_set(*, user, model: RegisteredModel, name: str, version: ModelVersion) -> VersionAlias:
    """Point alias `name` of `model` at `version`: create it, or move it from the version it
    named (one event either way; from_state says where it was)."""
    problem = alias_problem(name)
    if problem:
        raise InvalidInput(problem, code="bad_alias", field="alias")
    require_role(user=user, team=model.team, role=Role.DEVELOPER)
    if version.model_id != model.pk:
        raise InvalidInput(
            f"version: {version.model.name} v{version.version} is not a version of model {model.name!r}.",
            code="wrong_model",
            field="version",
        )
    with transaction.atomic():
        locked = model_for_update(model.pk)  # two moves of one alias queue here
        row = VersionAlias.objects.filter(model=locked, name=name).select_related("version").first()
        before = row.version.version if row else None
        if row is not None and row.version_id == version.pk:
            return row
        if row is None:
            row = VersionAlias.objects.create(model=locked, name=name, version=version, updated_by=user)
        else:
            row.version, row.updated_by = version, user
            row.save(update_fields=["version", "updated_by", "updated_at"])
        event_record(
            actor=user,
            obj=locked,
            action=EventAction.ALIAS_SET,
            from_state=f"v{before}" if before else "",
            to_state=f"v{version.version}",
            reason=f"@{name}",
            data={"alias": name, "version": version.version, "from_version": before},
        )
        if version.source_uri:
            transaction.on_commit(lambda: _mlflow_mirror(version, name))
    return row


def alias_delete(*, user, model: RegisteredModel, name: str) -> None:
    require_role(user=user, team=model.team, role=Role.DEVELOPER)
    with transaction.atomic():
        locked = model_for_update(model.pk)
        row = VersionAlias.objects.filter(model=locked, name=name).select_related("version").first()
        if row is None:
            raise NotFound(f"alias: model {model.name!r} has no alias {name[:80]!r}.", code="alias_not_found")
        version = row.version
        row.delete()
        event_record(
            actor=user,
            obj=locked,
            action=EventAction.ALIAS_DELETED,
            from_state=f"v{version.version}",
            to_state="deleted",
            reason=f"@{name}",
            data={"alias": name, "version": version.version},
        )
        if version.source_uri:
            transaction.on_commit(lambda: _mlflow_mirror(version, name, delete=True))
