"""Reads of releases (build → tune → canary) shared by the API and the endpoint page."""

from __future__ import annotations

from django.db.models import QuerySet

from deployments.models import Release, ReleaseState
from deployments.route_overlays import route_overlays
from deployments.selectors.rollout_page import step_label
from deployments.selectors.rollouts import active_rollouts
from kernel.errors import NotFound
from registry.names import BUILT_VARIANTS, needs_gpu
from registry.selectors.catalog import version_list
from registry.selectors.teams import team_scoped
from registry.selectors.tuning import tune_budget_default, tune_prediction

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


def releases_watched() -> bool:
    """Whether any release is active (beat ticks their reconcile at its full rate only then)."""
    return Release.objects.filter(state__in=ReleaseState.active()).exists()


def release_prediction(release: Release) -> dict | None:
    """What the tune predicted for the release's candidate (None before the build is done or
    when the candidate is untuned)."""
    return tune_prediction(release.candidate_artifact) if release.candidate_artifact_id else None


def release_card(*, user, endpoint) -> dict:
    """The endpoint page's release card and form: the latest release, whether one is active,
    the tune's prediction, and what the form offers (versions of the endpoint's model,
    variants the pool can serve) or why it is not offered now."""
    release = release_list(user=user, endpoint=endpoint).first()
    model = endpoint.stable_artifact.version.model if endpoint.stable_artifact_id else None
    gpu_pool = endpoint.pool.device_kind != "cpu"
    active = release is not None and release.state in ReleaseState.active()
    versions = (
        list(version_list(user=user, model=model).exclude(status="archived")[:50])
        if model is not None and endpoint.kind != "llm"
        else []
    )
    return {
        "release": release,
        "release_active": active,
        "prediction": release_prediction(release) if release else None,
        "release_versions": versions,
        "release_variants": [v for v in BUILT_VARIANTS if needs_gpu(v) == gpu_pool],
        "release_form": _form_offer(endpoint=endpoint, release_active=active, versions=versions),
        "release_rollout_label": step_label(release.rollout) if release is not None and release.rollout_id else "",
        "tune_budget_default": f"{tune_budget_default():g}",
    }


def _form_offer(*, endpoint, release_active: bool, versions: list) -> dict:
    """Whether the release form is offered now and, when release_start would refuse, why:
    an LLM endpoint has nothing to build (its version's artifact is made at registration),
    and a rollout or a running experiment holds the endpoint."""
    if endpoint.kind == "llm" or release_active or not versions:
        return {"offered": False, "why": ""}
    if active_rollouts(endpoints=[endpoint]):
        return {"offered": False, "why": "A release can start once the rollout in progress is over."}
    overlay = route_overlays([endpoint]).get(endpoint.pk)
    if overlay is not None:
        return {"offered": False, "why": f"A release can start once experiment {overlay.name} is decided or stopped."}
    return {"offered": True, "why": ""}
