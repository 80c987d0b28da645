"""Writes of releases: one flow from a build request to a canary (deployments/models/releases.py).

    release_start  → build (registry: the variant, with a tune against the SLO)   [building]
    release_reconcile, every tick while active:
        build failed or cancelled                              → failed
        build succeeded → rollout_start(tuned or plain variant) → canary
        rollout succeeded / rolled_back / failed               → promoted / rolled_back / failed

The canary is an ordinary rollout (fair baseline by default, the judge, the endpoint's
SLOs): a tuned config the judge rejects is rolled back like any candidate. Every change of
a release and its audit event share a transaction; the reconcile is idempotent (the row,
locked, says what is left to do) and bounded per tick (deployments.releases_reconcile).
"""

from __future__ import annotations

import uuid

from django.db import IntegrityError, transaction
from django.utils import timezone

from deployments.lock_objects import release_for_update
from deployments.models import Endpoint, Release, ReleaseState
from deployments.rollout_machine import DEFAULT_PLAN, TERMINAL, Plan, State, Strategy
from deployments.route_overlays import route_overlays
from deployments.selectors.rollouts import active_rollouts
from deployments.services import rollouts as rollout_services
from kernel.errors import Conflict, InvalidInput, PlatformError
from registry.models import ArtifactStatus, BuildStatus, EventAction, ModelVersion, Role
from registry.names import BUILT_VARIANTS as VARIANTS
from registry.names import needs_gpu, tuned_variant, variant_name
from registry.selectors.builds import build_artifacts
from registry.selectors.tuning import tune_prediction
from registry.services import builds as build_services
from registry.services.events import event_record
from registry.services.teams import require_role

ROLLOUT_OPTIONS = (
    "steps_bp",
    "step_min_seconds",
    "step_min_requests",
    "step_deadline_seconds",
    "on_inconclusive",
    "fair_baseline",
    "promote_grace_seconds",
)


def _check_plan(endpoint: Endpoint, options: dict) -> dict:
    """The rollout options, checked now (as rollout_start will) so a bad plan is a 400 at the
    start of the release, not a failure after its build."""
    unknown = sorted(set(options) - set(ROLLOUT_OPTIONS))
    if unknown:
        raise InvalidInput(f"{unknown[0]}: not a rollout option of a release.", field=unknown[0])
    try:
        Plan(
            strategy=Strategy.CANARY,
            steps_bp=tuple(int(s) for s in (options.get("steps_bp") or DEFAULT_PLAN.steps_bp)),
            step_min_seconds=float(options.get("step_min_seconds", DEFAULT_PLAN.step_min_seconds)),
            step_min_requests=int(options.get("step_min_requests", DEFAULT_PLAN.step_min_requests)),
            step_deadline_seconds=float(options.get("step_deadline_seconds", DEFAULT_PLAN.step_deadline_seconds)),
            on_inconclusive=options.get("on_inconclusive") or endpoint.on_inconclusive,
            baseline=bool(options.get("fair_baseline", True)),
        )
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"plan: {exc}", code="bad_plan", field="steps_bp") from None
    return dict(options)


def release_start(
    *,
    user,
    endpoint: Endpoint,
    version: ModelVersion,
    variant: str = "onnx-int8",
    slo_p99_ms: float | None = None,
    tune_budget_s: float | None = None,
    max_trials: int | None = None,
    search_space: dict | None = None,
    rollout_options: dict | None = None,
) -> Release:
    """Build `version` as `variant`, tune it against the endpoint's p99 SLO (or `slo_p99_ms`)
    under the pool's queue limits, then canary the result against the stable.

    Guarantees: the version is the endpoint's own model and the variant one its pool can
    serve (400 otherwise); one active release, no other active rollout and no running
    experiment per endpoint (409); the build is queued after the release row commits."""
    require_role(user=user, team=endpoint.team, role=Role.DEPLOYER)
    if endpoint.kind == "llm":  # an LLM version's artifact is made at registration: nothing to build or tune
        raise InvalidInput(
            f"endpoint: {endpoint.name!r} is an LLM endpoint; start a rollout of an LLM version's artifact instead "
            "(a release builds and tunes ONNX variants).",
            code="llm_endpoint",
            field="endpoint",
        )
    stable = endpoint.stable_artifact
    if stable is None:
        raise InvalidInput("endpoint: it has no stable artifact to canary against.", code="no_stable", field="endpoint")
    if version.model_id != stable.version.model_id:
        raise InvalidInput(
            f"version: {version} is not a version of {stable.version.model.name}, the model endpoint "
            f"{endpoint.name!r} serves.",
            code="wrong_model",
            field="version",
        )
    if variant not in VARIANTS:
        raise InvalidInput(
            f"variant: {variant[:40]!r} is not a variant the factory builds ({', '.join(VARIANTS)}).", field="variant"
        )
    if needs_gpu(variant) != (endpoint.pool.device_kind != "cpu"):
        raise InvalidInput(
            f"variant: pool {endpoint.pool.name!r} ({endpoint.pool.device_kind}) cannot serve {variant}.",
            code="variant_not_servable_here",
            field="variant",
        )
    if active_rollouts(endpoints=[endpoint]):
        raise Conflict(f"Endpoint {endpoint.name!r} already has a rollout in progress.", code="rollout_in_progress")
    overlay = route_overlays([endpoint]).get(endpoint.pk)
    if overlay is not None:  # its canary would be refused after the build: say so now
        raise Conflict(
            f"Endpoint {endpoint.name!r} is running experiment {overlay.name}; stop it or let it decide first.",
            code="experiment_running",
        )
    options = _check_plan(endpoint, rollout_options or {})
    slo = float(slo_p99_ms) if slo_p99_ms is not None else float(endpoint.slo_p99_ms)
    tune = {
        "slo_p99_ms": slo,
        "variants": [variant],
        "max_queue_size": int(endpoint.pool.max_queue_size),
        "queue_timeout_ms": int(endpoint.pool.queue_timeout_ms),
        **({"budget_s": tune_budget_s} if tune_budget_s is not None else {}),
        **({"max_trials": max_trials} if max_trials is not None else {}),
        **({"search_space": search_space} if search_space else {}),
    }
    try:
        with transaction.atomic():
            release = Release.objects.create(
                endpoint=endpoint,
                version=version,
                variant=variant,
                slo_p99_ms=slo,
                rollout_options=options,
                created_by=user,
                reason=f"building {variant} of {version} and tuning it for p99 <= {slo:g} ms",
            )
            build, _ = build_services.build_start(
                user=user,
                version=version,
                targets=[variant],
                tune=tune,
                idempotency_key=f"release-{release.pk}-{uuid.uuid4().hex[:8]}",
            )
            release.build = build
            release.save(update_fields=["build"])
            event_record(
                actor=user,
                obj=release,
                team=endpoint.team,
                action=EventAction.CREATED,
                to_state=ReleaseState.BUILDING,
                reason=release.reason,
                data={"build": build.pk, "variant": variant, "slo_p99_ms": slo, "rollout": options},
            )
    except IntegrityError:
        raise Conflict(
            f"Endpoint {endpoint.name!r} already has a release in progress.", code="release_in_progress"
        ) from None
    return release


def _finish(release: Release, state: str, reason: str, data: dict | None = None) -> None:
    old = release.state
    release.state, release.reason = state, reason[:2000]
    if state not in ReleaseState.active():
        release.finished_at = timezone.now()
    release.save(update_fields=["state", "reason", "finished_at", "candidate_artifact", "rollout", "updated_at"])
    event_record(
        actor=None,
        obj=release,
        team=release.endpoint.team,
        action=EventAction.STATUS_CHANGED,
        from_state=old,
        to_state=state,
        reason=release.reason,
        data=data,
    )


def _candidate(release: Release):
    """The tuned variant when the tune published one, else the variant itself; with why."""
    artifacts = {a.variant: a for a in build_artifacts(release.build)}
    tuned = artifacts.get(tuned_variant(release.variant))
    if tuned is not None and tuned.status == ArtifactStatus.SERVABLE:
        prediction = tune_prediction(tuned) or {}
        gain = f"{prediction['gain']:.2f}x the default's" if prediction.get("gain") else "more than the default's"
        return tuned, f"tuned: {gain} throughput within p99 <= {release.slo_p99_ms:g} ms ({prediction.get('config')})"
    plain = artifacts.get(release.variant)
    if plain is None or plain.status != ArtifactStatus.SERVABLE:
        return None, f"the build made no servable {release.variant}" + (f" ({plain.status_reason})" if plain else "")
    why = tuned.status_reason if tuned is not None else "the tune made no variant"
    return plain, f"untuned {release.variant}: {why}"


def _start_canary(release: Release) -> None:
    candidate, why = _candidate(release)
    if candidate is None:
        return _finish(release, ReleaseState.FAILED, why)
    try:
        rollout = rollout_services.rollout_start(
            user=release.created_by,
            endpoint=release.endpoint,
            candidate=candidate,
            strategy=Strategy.CANARY,
            **release.rollout_options,
        )
    except PlatformError as exc:
        release.candidate_artifact = candidate
        return _finish(release, ReleaseState.FAILED, f"the canary did not start: {exc.detail}")
    release.candidate_artifact, release.rollout = candidate, rollout
    _finish(
        release,
        ReleaseState.CANARY,
        f"canary of {variant_name(candidate)} (rollout #{rollout.pk}): {why}",
        data={"rollout": rollout.pk, "candidate": candidate.pk},
    )


ROLLOUT_ENDS = {
    State.SUCCEEDED.value: ReleaseState.PROMOTED,
    State.ROLLED_BACK.value: ReleaseState.ROLLED_BACK,
    State.FAILED.value: ReleaseState.FAILED,
}


def release_reconcile(*, release_id: int) -> Release | None:
    """One step of an active release (see the module docstring); None when it is gone."""
    with transaction.atomic():
        try:
            release = release_for_update(release_id)
        except Release.DoesNotExist:
            return None
        if release.state == ReleaseState.BUILDING:
            build = release.build
            if build.status in (BuildStatus.FAILED, BuildStatus.CANCELLED):
                _finish(release, ReleaseState.FAILED, f"build #{build.pk} {build.status}: {build.error or 'no reason'}")
            elif build.status == BuildStatus.SUCCEEDED:
                _start_canary(release)
        elif release.state == ReleaseState.CANARY:
            rollout = release.rollout
            if rollout is None:
                _finish(release, ReleaseState.FAILED, "its rollout is gone")
            elif State(rollout.state) in TERMINAL:
                _finish(
                    release,
                    ROLLOUT_ENDS.get(rollout.state, ReleaseState.FAILED),
                    f"rollout #{rollout.pk} {rollout.state}: {rollout.reason or 'no reason given'} (after the {release.reason})",
                    data={"rollout": rollout.pk},
                )
    return release
