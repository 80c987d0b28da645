"""Reads of releases (build → tune → canary) shared by the API and the endpoint page."""

from __future__ import annotations

from django.db.models import QuerySet

from deployments.models import Release, ReleaseState
from kernel.errors import NotFound
from registry.names import BUILT_VARIANTS, needs_gpu
from registry.selectors.catalog import version_list
from registry.selectors.teams import team_scoped
from registry.selectors.tuning import tune_prediction

_RELATED = ("endpoint__team", "endpoint__pool", "version__model", "build", "candidate_artifact__version", "rollout")


def release_list(*, user, endpoint=None) -> QuerySet:
    qs = team_scoped(Release.objects.select_related(*_RELATED), user, "endpoint__team_id")
    if endpoint is not None:
        qs = qs.filter(endpoint=endpoint)
    return qs.order_by("-created_at")


def release_get(*, user, release_id: int) -> Release:
    release = release_list(user=user).filter(pk=release_id).first()
    if release is None:
        raise NotFound(f"No release with id {release_id}.", code="release_not_found")
    return release


def releases_to_reconcile(*, limit: int = 20) -> list[int]:
    """Active releases, oldest first, a bounded batch per tick (not user-scoped: the platform acts)."""
    return list(
        Release.objects.filter(state__in=ReleaseState.active())
        .order_by("updated_at")
        .values_list("pk", flat=True)[:limit]
    )


def release_prediction(release: Release) -> dict | None:
    """What the tune predicted for the release's candidate (None before the build is done or
    when the candidate is untuned)."""
    return tune_prediction(release.candidate_artifact) if release.candidate_artifact_id else None


def release_card(*, user, endpoint) -> dict:
    """The endpoint page's release card and form: the latest release, whether one is active,
    the tune's prediction, and what the form offers (versions of the endpoint's model,
    variants the pool can serve)."""
    release = release_list(user=user, endpoint=endpoint).first()
    model = endpoint.stable_artifact.version.model if endpoint.stable_artifact_id else None
    gpu_pool = endpoint.pool.device_kind != "cpu"
    return {
        "release": release,
        "release_active": release is not None and release.state in ReleaseState.active(),
        "prediction": release_prediction(release) if release else None,
        "release_versions": list(version_list(user=user, model=model).exclude(status="archived")[:50])
        if model is not None
        else [],
        "release_variants": [v for v in BUILT_VARIANTS if needs_gpu(v) == gpu_pool],
    }
