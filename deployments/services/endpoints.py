"""Writes of endpoints: what clients call on the gateway, a pool and its stable artifact.
The stable artifact changes only through a rollout (rollouts.py)."""

from __future__ import annotations

import math
import re

from django.db import transaction

from deployments.lock_objects import endpoint_for_update
from deployments.models import Endpoint, ServingPool
from deployments.rollout_machine import OnInconclusive
from deployments.selectors.compatibility import require_kind, stable_problem
from deployments.services import pools as pool_services
from deployments.services.llm_endpoints import LLM_DEFAULTS, llm_values
from kernel.errors import InvalidInput
from registry.models import Artifact, ArtifactStatus, EventAction, Role
from registry.names import LLM_BACKEND_VARIANT, name_conflict
from registry.selectors.llm import artifacts_by_id
from registry.services.events import event_record
from registry.services.teams import require_role

# The endpoint API's URL pattern (deployments/api/rollouts.py) and the gateway's path segment.
ENDPOINT_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
STICKY_HEADER_RE = re.compile(r"^[A-Za-z0-9-]{1,100}$")
# The dashboard's page for a new endpoint (/deployments/endpoints/new/) takes this name's place.
RESERVED_ENDPOINT_NAMES = frozenset({"new"})
ENDPOINT_KINDS = ("tensor", "llm")
ENDPOINT_FIELDS = (
    "capture_share",
    "slo_p99_ms",
    "slo_error_rate",
    "ttft_slo_ms",
    "itl_slo_ms",
    "psi_threshold",
    "latency_margin",
    "sticky_header",
    "timeout_ms",
    "public",
    "on_inconclusive",
    "ttft_slo_ms",
    "itl_slo_ms",
)
# Fields whose null is a value of its own: a latency margin of None is "derived from the SLO's
# headroom" (monitoring/paired.py margin_for), so an update may set it back to None.
NULLABLE_FIELDS = ("latency_margin",)


def require_servable(artifact: Artifact, team, field: str) -> None:
    if artifact.status != ArtifactStatus.SERVABLE:
        raise InvalidInput(
            f"{field}: artifact {artifact.pk} is {artifact.status}, not servable.",
            code="artifact_not_servable",
            field=field,
        )
    if artifact.version.model.team_id != team.pk:
        raise InvalidInput(
            f"{field}: artifact {artifact.pk} belongs to another team.", code="artifact_other_team", field=field
        )


def _endpoint_values(changes: dict) -> dict:
    values = {}
    for key in ENDPOINT_FIELDS:
        if key not in changes:
            continue
        value = changes[key]
        if value is None:
            if key in NULLABLE_FIELDS:
                values[key] = None  # back to its derived default
            continue
        if key == "latency_margin" and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
        ):
            raise InvalidInput(
                f"latency_margin: {value!r} is not a fraction; give a number in 0..5, or null for the derived default.",
                field=key,
            )
        if key == "capture_share" and not (isinstance(value, (int, float)) and 0 <= float(value) <= 1):
            raise InvalidInput(
                f"capture_share: {value!r} is not a share of requests; give a number in 0..1 (0.1 = one in ten).",
                field=key,
            )
        if key == "slo_error_rate" and not 0 <= float(value) <= 1:
            raise InvalidInput("slo_error_rate: give a fraction in 0..1.", field=key)
        if key in ("slo_p99_ms", "psi_threshold", "ttft_slo_ms", "itl_slo_ms") and not 0 < float(value) <= 3_600_000:
            raise InvalidInput(f"{key}: must be positive.", field=key)
        if key == "latency_margin" and not 0 <= float(value) <= 5:
            raise InvalidInput("latency_margin: give a fraction in 0..5 (0.2 = 20 % slower is tolerated).", field=key)
        if key == "timeout_ms" and not 1 <= int(value) <= 600_000:
            raise InvalidInput("timeout_ms: give 1..600000.", field=key)
        if key == "on_inconclusive" and value not in set(OnInconclusive):
            raise InvalidInput(
                f"on_inconclusive: {value!r} is not a policy; give rollback, pause or promote.", field=key
            )
        if key == "sticky_header" and not STICKY_HEADER_RE.match(str(value)):
            raise InvalidInput(
                "sticky_header: give an HTTP header name: 1-100 letters, digits and '-', e.g. X-User-Id.", field=key
            )
        if key == "public" and not isinstance(value, bool):
            raise InvalidInput("public: give true or false.", field=key)
        values[key] = value
    return values


def endpoint_create(
    *,
    user,
    name: str,
    pool: ServingPool,
    stable_artifact: Artifact | None = None,
    kind: str = "tensor",
    **settings_,
) -> Endpoint:
    """Create an endpoint on `pool` (the endpoint's team is the pool's); with a stable
    artifact, ask the pool to load it (traffic flows once it is READY everywhere; an LLM
    backend reference has nothing to load). It is closed (only the team's inference keys)
    unless created with public=True. `kind` llm: an OpenAI API endpoint (its stable an LLM
    artifact, its LLM settings and fallbacks checked by services/llm_endpoints.py). The API,
    the dashboard's form and the admin's Add all come here: one set of rules."""
    require_role(user=user, team=pool.team, role=Role.DEPLOYER)
    if kind not in ENDPOINT_KINDS:
        raise InvalidInput(f"kind: {kind!r} is not an endpoint kind; give tensor or llm.", field="kind")
    if kind == "llm":
        settings_ = {
            **{k: v for k, v in LLM_DEFAULTS.items() if settings_.get(k) is None},
            **{k: v for k, v in settings_.items() if v is not None},
        }
    if not ENDPOINT_NAME_RE.match(name or ""):
        raise InvalidInput(
            "name: use 1-64 lowercase letters, digits, - and _, starting with a letter or digit "
            "(it is part of the endpoint's URLs, e.g. /v2/models/{name}/infer).",
            field="name",
        )
    if name in RESERVED_ENDPOINT_NAMES:  # the dashboard's /deployments/endpoints/new/: the reserved word's answer
        raise name_conflict(user=user, kind="endpoint", name=name)
    values = _endpoint_values(settings_)
    if stable_artifact is not None:
        require_servable(stable_artifact, pool.team, "stable_artifact")
        problem = stable_problem(pool=pool, artifact=stable_artifact)
        if problem is not None:
            raise InvalidInput(f"stable_artifact: {problem.message}", code=problem.code, field="stable_artifact")
        require_kind(kind=kind, artifact=stable_artifact, field="stable_artifact")
    values.update(llm_values(settings_, kind=kind, team=pool.team, stable=stable_artifact))
    with transaction.atomic():
        holder = Endpoint.objects.filter(name=name).select_related("team").first()
        if holder is not None:  # another team's name reads as a reserved one (no name oracle)
            raise name_conflict(user=user, kind="endpoint", name=name, holder_team=holder.team)
        endpoint = Endpoint.objects.create(
            name=name,
            team=pool.team,
            pool=pool,
            stable_artifact=stable_artifact,
            kind=kind,
            created_by=user,
            **values,
        )
        event_record(
            actor=user,
            obj=endpoint,
            action=EventAction.CREATED,
            to_state="serving" if stable_artifact else "empty",
            data={"pool": pool.name, "stable_artifact": getattr(stable_artifact, "pk", None), "kind": kind},
        )
        if stable_artifact is not None and stable_artifact.variant != LLM_BACKEND_VARIANT:
            pool_services.pool_load_request(user=user, pool=pool, artifact=stable_artifact)
        _load_fallbacks(user, endpoint)
    return endpoint


def _load_fallbacks(user, endpoint: Endpoint) -> None:
    """An LLM endpoint's fallbacks that are Triton models are loaded into its pool (idempotent)."""
    for artifact in artifacts_by_id(endpoint.llm_fallbacks or [], team=endpoint.team).values():
        if artifact.variant != LLM_BACKEND_VARIANT:
            pool_services.pool_load_request(user=user, pool=endpoint.pool, artifact=artifact)


def endpoint_update(*, user, endpoint: Endpoint, **changes) -> Endpoint:
    """Change SLOs, sticky header, timeout or whether it is public (the stable artifact
    changes only by rollout)."""
    require_role(user=user, team=endpoint.team, role=Role.DEPLOYER)
    values = _endpoint_values(changes)
    values.update(llm_values(changes, kind=endpoint.kind, team=endpoint.team, stable=endpoint.stable_artifact))
    if not values:
        return endpoint
    with transaction.atomic():
        locked = endpoint_for_update(endpoint.pk)
        before = {key: getattr(locked, key) for key in values}
        for key, value in values.items():
            setattr(locked, key, value)
        locked.save()
        event_record(actor=user, obj=locked, action=EventAction.UPDATED, data={k: str(v) for k, v in values.items()})
        if "llm_fallbacks" in values:
            _load_fallbacks(user, locked)
        if "public" in values and before["public"] != values["public"]:  # who may call it: its own line in the trail
            event_record(
                actor=user,
                obj=locked,
                action=EventAction.ACCESS_CHANGED,
                from_state="public" if before["public"] else "keys only",
                to_state="public" if values["public"] else "keys only",
            )
    return locked
