"""The gateway's route table, derived from endpoints, rollouts and pool readiness.

The contract is gateway/route_table.schema.json (and gateway/README.md): per endpoint,
its variants with role and weight in basis points, the *ready* replica URLs of their
pool and the signature of the served artifact (a rollout with a fair baseline adds a
`baseline` variant: a copy of the stable artifact loaded under its own Triton name, with
the candidate's share) (what the gateway checks requests
against before they reach Triton). Nothing here is stored: the table is a pure function
of the database and the artifacts' files, and its `version` (and the HTTP ETag) is a
digest of its content.

Inference keys: the top-level `keys` lists every key that is not revoked, once, as its
SHA-256 (never the secret), display prefix, team and limits; each endpoint's `auth` says
`public` (the endpoint's flag) and, when not public, the ids of the keys of its team
scoped to it. A revoked key is absent, and since the version digest covers the keys, the
ETag changes and the gateway drops it at its next poll.

Variant names: an entry's variants are artifacts of one model (the stable's) with
distinct (version, variant) pairs (`_fits`, the same check the API applies), so
`v{version}-{variant}` (and `-baseline` for the stable's copy) is unique within the entry
by construction. The gateway still checks every entry and refuses only a bad one.
"""

import hashlib
import json
import math
import re

from django.utils import timezone

from deployments.models import PoolModel, PoolModelState
from deployments.rollout_machine import FULL_BP, VariantRole
from deployments.route_overlays import route_overlays
from deployments.selectors.compatibility import serving_problem
from deployments.selectors.keys import active_inference_keys
from deployments.selectors.pools import ready_replicas
from deployments.selectors.rollouts import active_rollouts, serving_endpoints
from registry.names import baseline_triton_name, baseline_variant_name, triton_name, variant_name
from registry.selectors.serving import artifact_serving_signature


def _ready_urls(pool_id: int, model_name: str, ready_models: dict, replicas: dict) -> list[tuple[str, str]]:
    """(HTTP base URL, gRPC host:port or "") of each replica that has the model ready, by URL."""
    pool_model = ready_models.get((pool_id, model_name))
    if pool_model is None:
        return []
    return sorted(
        (replica.http_url.rstrip("/"), replica.grpc_url or "")
        for replica in replicas.get(pool_id, [])
        if replica.http_url and pool_model.replica_ready.get(replica.name)
    )


def _variant(artifact, role, weight_bp, urls, *, name: str = "", triton_model: str = "") -> dict:
    out = {
        "name": name or variant_name(artifact),
        "model_version": str(artifact.version.version),
        "triton_model": triton_model or triton_name(artifact),
        "role": str(role),  # a VariantRole
        "weight_bp": int(weight_bp),
        "replicas": [http for http, _ in urls],
    }
    # gRPC addresses when every listed replica has one (the gateway's gRPC port forwards there)
    if urls and all(grpc for _, grpc in urls):
        out["grpc_replicas"] = [grpc for _, grpc in urls]
    signature = artifact_serving_signature(artifact)
    if signature is not None:
        out["signature"] = signature
    return out


LABEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")  # the schema's `name`: a metric label


def team_label(team) -> str:
    """The team as the gateway labels its metrics: its name, or team-<id> when the name
    is not a valid label (team names are free text)."""
    return team.name if LABEL_RE.fullmatch(team.name) else f"team-{team.pk}"


def _key(key) -> dict:
    doc = {"id": key.gateway_id, "prefix": key.prefix, "sha256": key.sha256, "team": team_label(key.team)}
    for field in ("rate_per_s", "burst", "max_concurrency"):
        value = getattr(key, field)
        if value is not None:
            doc[field] = value
    return doc


def _auth(endpoint, team_keys: dict) -> dict:
    """`public` and the ids of the team's keys scoped to it, public or not: a public
    endpoint's traffic needs no key, its feedback does (README "Online experiments")."""
    return {
        "public": bool(endpoint.public),
        "keys": [
            key.gateway_id
            for key, scope in team_keys.get(endpoint.team_id, ())
            if scope is None or endpoint.pk in scope
        ],
    }


def _fits(endpoint, artifacts) -> bool:
    """Whether the endpoint may route to every one of `artifacts` beside its stable: the
    check the API and the dashboard ran when they accepted them (selectors.compatibility),
    run again here so a row written around it (an older release, a manual edit) costs
    only its own split: the endpoint then serves its stable alone, never an entry the
    gateway would refuse (its variants are one model's distinct (version, variant) pairs,
    so their names are unique by construction). The endpoint page says why."""
    return all(serving_problem(endpoint=endpoint, artifact=artifact) is None for artifact in artifacts)


def route_table() -> dict:
    """Every endpoint that has a stable artifact, with its current split."""
    endpoints = serving_endpoints()
    keys = active_inference_keys()
    team_keys: dict[int, list] = {}
    for key, scope in keys:
        team_keys.setdefault(key.team_id, []).append((key, scope))
    rollouts = active_rollouts(endpoints=endpoints)
    overlays = route_overlays(endpoints)
    pool_ids = {e.pool_id for e in endpoints}
    ready_models = {
        (pm.pool_id, pm.triton_model_name): pm
        for pm in PoolModel.objects.filter(pool_id__in=pool_ids, state=PoolModelState.READY)
    }
    replicas: dict[int, list] = {}
    for replica in ready_replicas(pool_ids=pool_ids):
        replicas.setdefault(replica.pool_id, []).append(replica)

    table = []
    for endpoint in endpoints:
        stable = endpoint.stable_artifact
        stable_urls = _ready_urls(endpoint.pool_id, triton_name(stable), ready_models, replicas)
        rollout = rollouts.get(endpoint.pk)
        entry = {
            "name": endpoint.name,
            "sticky_header": endpoint.sticky_header,
            "timeout_ms": endpoint.timeout_ms,
            # a client deadline below the endpoint's p99 SLO that expires is the client's doing
            "min_timeout_ms": max(1, min(endpoint.timeout_ms, math.ceil(endpoint.slo_p99_ms))),
            "salt": rollout.salt if rollout else "",
            "shadow_sample_rate": 0.0,
            "auth": _auth(endpoint, team_keys),
        }
        variants = []
        split = rollout.split if rollout else None
        candidate = rollout.candidate_artifact if rollout else None
        if split and split.candidate_role and candidate.pk != stable.pk and _fits(endpoint, [candidate]):
            candidate_urls = _ready_urls(endpoint.pool_id, triton_name(candidate), ready_models, replicas)
            variants.append(_variant(stable, VariantRole.STABLE, split.stable_bp, stable_urls))
            if split.candidate_role == VariantRole.SHADOW:
                entry["shadow_sample_rate"] = rollout.shadow_sample_rate
                variants.append(_variant(candidate, VariantRole.SHADOW, 0, candidate_urls))
            else:
                variants.append(_variant(candidate, VariantRole.CANARY, split.candidate_bp, candidate_urls))
                if split.baseline_bp:  # the fair baseline: the stable artifact's own copy, the candidate's share
                    baseline = rollout.baseline_artifact
                    baseline_urls = _ready_urls(endpoint.pool_id, rollout.baseline_model, ready_models, replicas)
                    variants.append(
                        _variant(
                            baseline,
                            VariantRole.BASELINE,
                            split.baseline_bp,
                            baseline_urls,
                            name=baseline_variant_name(baseline),
                            triton_model=baseline_triton_name(baseline),
                        )
                    )
        elif (
            (overlay := overlays.get(endpoint.pk)) is not None
            and overlay.arms[0][0].pk == stable.pk
            and _fits(endpoint, [artifact for artifact, _ in overlay.arms[1:]])
        ):
            entry["salt"], entry["experiment"] = overlay.salt, overlay.name
            if overlay.token_key:
                entry["exposure_token_key"] = overlay.token_key
            for i, (artifact, weight_bp) in enumerate(overlay.arms):
                urls = (
                    stable_urls
                    if i == 0
                    else _ready_urls(endpoint.pool_id, triton_name(artifact), ready_models, replicas)
                )
                variants.append(_variant(artifact, VariantRole.STABLE if i == 0 else VariantRole.ARM, weight_bp, urls))
        else:
            variants.append(_variant(stable, VariantRole.STABLE, FULL_BP, stable_urls))
        entry["variants"] = variants
        table.append(entry)
    body = {"keys": [_key(key) for key, _ in keys], "endpoints": table}
    version = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:20]
    return {"version": version, "generated_at": timezone.now().strftime("%Y-%m-%dT%H:%M:%SZ"), **body}
