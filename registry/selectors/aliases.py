"""Reads of version aliases and the one resolver of `models:/name@alias` and
`models:/name/3` that the API, the dashboard and the CLI (through the API) share."""

from django.db.models import QuerySet

from kernel.errors import InvalidInput, NotFound
from registry.models import ModelVersion, RegisteredModel, VersionAlias
from registry.names import parse_model_uri
from registry.selectors.catalog import model_list, version_list


def alias_list(*, model: RegisteredModel) -> QuerySet:
    return VersionAlias.objects.filter(model=model).select_related("version", "updated_by").order_by("name")


def is_model_uri(value) -> bool:
    return isinstance(value, str) and value.startswith("models:")


def version_resolve(*, user, uri: str, field: str = "uri") -> ModelVersion:
    """The version `uri` names, among those the user may see.

    A malformed URI is a 400 (InvalidInput, code bad_model_uri) saying what is wrong; a
    model of another team answers exactly as a model that does not exist (404,
    model_not_found), so names cannot be probed across teams."""
    try:
        name, alias, number = parse_model_uri(uri)
    except ValueError as exc:
        raise InvalidInput(f"{field}: {exc}", code="bad_model_uri", field=field) from None
    model = model_list(user=user).filter(name=name).first()
    if model is None:
        raise NotFound(f"{field}: no model named {name!r}.", code="model_not_found", field=field)
    if alias is not None:
        row = VersionAlias.objects.filter(model=model, name=alias).only("version_id").first()
        if row is None:
            known = ", ".join(alias_list(model=model).values_list("name", flat=True)[:20]) or "none"
            raise NotFound(
                f"{field}: model {name!r} has no alias {alias!r} (its aliases: {known}).",
                code="alias_not_found",
                field=field,
            )
        return version_list(user=user, model=model).get(pk=row.version_id)
    version = version_list(user=user, model=model).filter(version=number).first()
    if version is None:
        raise NotFound(f"{field}: model {name!r} has no version {number}.", code="version_not_found", field=field)
    return version
