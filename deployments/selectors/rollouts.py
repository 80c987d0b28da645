"""Reads of endpoints and rollouts shared by the API, the dashboard, the admin, the
reconcile task and monitoring's canary judge; user-facing lists are team-scoped."""

from django.db.models import QuerySet

from deployments.models import DeviceKind, Endpoint, Rollout
from deployments.rollout_machine import ACTIVE, State
from kernel.errors import NotFound
from registry.names import needs_gpu
from registry.selectors.builds import servable_artifacts
from registry.selectors.teams import team_scoped


def endpoint_list(*, user) -> QuerySet:
    return team_scoped(
        Endpoint.objects.select_related("team", "pool", "stable_artifact__version__model"), user, "team_id"
    )


def endpoint_get(*, user, name: str):
    endpoint = endpoint_list(user=user).filter(name=name).first()
    if endpoint is None:
        raise NotFound(f"No endpoint named {name!r}.", code="endpoint_not_found")
    return endpoint


def rollout_list(*, user, endpoint=None) -> QuerySet:
    qs = Rollout.objects.select_related(
        "endpoint",
        "endpoint__team",
        "candidate_artifact__version__model",
        "baseline_artifact__version__model",
        "created_by",
    )
    qs = team_scoped(qs, user, "endpoint__team_id")
    if endpoint is not None:
        qs = qs.filter(endpoint=endpoint)
    return qs


def rollout_get(*, user, rollout_id: int):
    rollout = rollout_list(user=user).filter(pk=rollout_id).first()
    if rollout is None:
        raise NotFound(f"No rollout with id {rollout_id}.", code="rollout_not_found")
    return rollout


def rollouts_to_reconcile(*, limit: int = 50) -> list[int]:
    """Active rollouts, oldest first (a bounded batch per tick)."""
    return list(
        Rollout.objects.filter(state__in=[s.value for s in ACTIVE])
        .order_by("state_entered_at")
        .values_list("pk", flat=True)[:limit]
    )


def rollouts_watched(*, recent_s: float = 600.0) -> bool:
    """Whether the rollout loop has anything to watch: an active rollout, or one that ended
    within `recent_s` (the judge's tick still alerts on a failure that recent). Beat ticks the
    reconcile and the judge at their full rate only then (config/schedules.py)."""
    from datetime import timedelta

    from django.db.models import Q
    from django.utils import timezone

    since = timezone.now() - timedelta(seconds=recent_s)
    return Rollout.objects.filter(Q(state__in=[s.value for s in ACTIVE]) | Q(state_entered_at__gte=since)).exists()


def rollouts_to_judge(*, limit: int = 50) -> list:
    """Rollouts whose candidate gets traffic now (shadow, canary, promoting), for the judge."""
    return list(
        Rollout.objects.filter(
            state__in=[State.SHADOW, State.CANARY, State.PROMOTING], traffic_started_at__isnull=False
        )
        .select_related(
            "endpoint", "endpoint__team", "candidate_artifact__version__model", "baseline_artifact__version__model"
        )
        .order_by("state_entered_at")[:limit]
    )


def rollouts_failed_since(*, since) -> list:
    return list(
        Rollout.objects.filter(state=State.FAILED, finished_at__gte=since).select_related("endpoint", "endpoint__team")
    )


def one_per_variant(artifacts) -> list:
    """The newest artifact of each (version, variant): a version built twice offers its
    latest build once, not two identical "v2 · onnx-fp32" entries. `artifacts` newest first."""
    seen, out = set(), []
    for artifact in artifacts:
        key = (artifact.version_id, artifact.variant)
        if key not in seen:
            seen.add(key)
            out.append(artifact)
    return out


def candidate_artifacts_for_pool(*, user, endpoint) -> tuple[list, int]:
    """What the rollout form offers: servable artifacts of the endpoint's own model (not
    the stable; the newest build of each version and variant) in variants its pool can run, and how many GPU variants were left out
    because the pool has no GPU."""
    if not endpoint.stable_artifact_id:
        return [], 0
    qs = servable_artifacts(user=user, team_id=endpoint.team_id).filter(
        version__model_id=endpoint.stable_artifact.version.model_id
    )
    stable = endpoint.stable_artifact  # the stable's version and variant, whichever build of it
    qs = qs.exclude(version_id=stable.version_id, variant=stable.variant)
    artifacts = one_per_variant(qs.select_related("version__model")[:200])
    if DeviceKind.is_gpu(endpoint.pool.device_kind):
        return artifacts, 0
    fits = [a for a in artifacts if not needs_gpu(a.variant)]
    return fits, len(artifacts) - len(fits)


def serving_endpoints() -> list:
    """Every endpoint that has a stable artifact, with its pool and stable (not user-scoped:
    the route table and the metrics collector act for the platform)."""
    return list(
        Endpoint.objects.filter(stable_artifact__isnull=False)
        .select_related("team", "pool", "stable_artifact__version__model")
        .order_by("name")
    )


def active_rollouts(*, endpoints) -> dict:
    """{endpoint id: its active rollout} for `endpoints`, with both artifacts."""
    return {
        r.endpoint_id: r
        for r in Rollout.objects.filter(endpoint__in=endpoints, state__in=[s.value for s in ACTIVE]).select_related(
            "candidate_artifact__version__model", "baseline_artifact__version__model"
        )
    }


def rollout_outcomes(*, rollout_ids) -> dict[int, tuple[str, str]]:
    """{rollout id: (state, reason)}: not user-scoped, for a service acting for the platform
    (an experiment's ship follows its rollout to the end)."""
    return {
        pk: (state, reason)
        for pk, state, reason in Rollout.objects.filter(pk__in=list(rollout_ids)).values_list("pk", "state", "reason")
    }
