"""What an API request names as an artifact: an id, or a model URI (`models:/ctr@champion`,
`models:/ctr/3`) whose version's servable artifact is meant. The endpoint create, rollout
start and experiment create fields share it (release start resolves its version with the same
resolver), so the CLI passes a URI through unchanged (modelplane_cli/commands/common.py)."""

from __future__ import annotations

from kernel.errors import InvalidInput, NotFound
from registry.models import ArtifactStatus, ModelVersion
from registry.selectors.aliases import is_model_uri, version_resolve
from registry.selectors.builds import artifact_get as registry_artifact_get
from registry.selectors.builds import artifact_list


def artifact_by_id(*, user, artifact_id: int, field: str):
    try:
        return registry_artifact_get(user=user, artifact_id=int(artifact_id))
    except NotFound:  # an artifact the user may not see is reported like a missing one
        raise InvalidInput(
            f"{field}: no artifact with id {artifact_id}.", code="artifact_not_found", field=field
        ) from None


def artifact_of_version(*, user, version: ModelVersion, field: str, variant: str | None = None, prefer: str = ""):
    """The newest servable artifact of `version`: of `variant` when given, else of the
    variant `prefer` names (e.g. the endpoint's stable's) when built, else the only one."""
    servable = artifact_list(user=user, version=version).filter(status=ArtifactStatus.SERVABLE).order_by("-pk")
    newest = {}
    for artifact in servable[:200]:
        newest.setdefault(artifact.variant, artifact)
    label = f"{version.model.name} v{version.version}"
    if variant:
        if variant not in newest:
            built = ", ".join(sorted(newest)) or "none"
            raise InvalidInput(
                f"{field}: {label} has no servable {variant[:64]!r} artifact (servable: {built}).",
                code="artifact_not_found",
                field=field,
            )
        return newest[variant]
    if not newest:
        raise InvalidInput(
            f"{field}: {label} has no servable artifact yet; build it first (POST /api/v1/builds/).",
            code="no_servable_artifact",
            field=field,
        )
    if prefer in newest:
        return newest[prefer]
    if len(newest) == 1:
        return next(iter(newest.values()))
    raise InvalidInput(
        f"{field}: {label} has servable artifacts in {len(newest)} variants ({', '.join(sorted(newest))}); "
        "say which with the variant field.",
        code="variant_ambiguous",
        field=field,
    )


def artifact_for_ref(*, user, ref, field: str, variant: str | None = None, endpoint=None):
    """The artifact `ref` names: an id, or a model URI (its version's servable artifact; a
    model of another team answers 404 as an unknown one); None for None."""
    if ref is None:
        return None
    if is_model_uri(ref):
        version = version_resolve(user=user, uri=ref, field=field)
        prefer = endpoint.stable_artifact.variant if endpoint is not None and endpoint.stable_artifact_id else ""
        return artifact_of_version(user=user, version=version, field=field, variant=variant, prefer=prefer)
    return artifact_by_id(user=user, artifact_id=ref, field=field)
