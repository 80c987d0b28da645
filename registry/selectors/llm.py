"""Reads of LLM versions and provider secrets (registry/services/llm.py writes them)."""

from __future__ import annotations

from django.db.models import QuerySet

from kernel.errors import NotFound
from registry.models import LLMSpec, ProviderSecret, Role
from registry.selectors.teams import team_scoped


def secret_list(*, user, team=None) -> QuerySet:
    """The secrets of the teams the user belongs to (names and dates; never a value)."""
    qs = team_scoped(ProviderSecret.objects.select_related("team", "created_by"), user, "team_id", Role.VIEWER)
    return qs.filter(team=team) if team is not None else qs


def secret_get(*, user, secret_id: int) -> ProviderSecret:
    secret = secret_list(user=user).filter(pk=secret_id).first()
    if secret is None:
        raise NotFound(f"No secret with id {secret_id}.", code="secret_not_found")
    return secret


def llm_spec_of_version(version) -> LLMSpec | None:
    """The version's LLM spec, or None for a tensor model's version."""
    try:
        return version.llm
    except LLMSpec.DoesNotExist:
        return None


def llm_spec_of(artifact) -> LLMSpec | None:
    """The LLM spec of an artifact's version, or None for a tensor model's artifact."""
    return llm_spec_of_version(artifact.version)


def llm_specs_for(version_ids) -> dict[int, LLMSpec]:
    """{version id: LLMSpec} with their secrets, read once (the route table)."""
    return {
        spec.version_id: spec
        for spec in LLMSpec.objects.filter(version_id__in=set(version_ids)).select_related("secret")
    }


def artifacts_by_id(ids, *, team=None) -> dict:
    """{id: Artifact} of `ids` (of `team` when given; another team's reads as absent), with
    version and model: an LLM endpoint's fallbacks."""
    from registry.models import Artifact

    qs = Artifact.objects.filter(pk__in=[pk for pk in ids if isinstance(pk, int)]).select_related("version__model")
    if team is not None:
        qs = qs.filter(version__model__team=team)
    return {artifact.pk: artifact for artifact in qs}
