"""The gateway's route table, derived from endpoints, rollouts and pool readiness.

The contract is gateway/contracts/route_table.schema.json (and docs/gateway.md): per endpoint,
its variants with role and weight in basis points, the *ready* replica URLs of their
pool and the signature of the served artifact (a rollout with a fair baseline adds a
`baseline` variant: a copy of the stable artifact loaded under its own Triton name, with
the candidate's share) (what the gateway checks requests
against before they reach Triton). Nothing here is stored: the table is a pure function
of the database and the artifacts' files, and its `version` (and the HTTP ETag) is a
digest of its content. It is built once per change and kept in memory by the generation of
the writes it reads (services/route_changes.py; `route_build`).

Inference keys: the top-level `keys` lists every key that is not revoked, once, as its
SHA-256 (never the secret), display prefix, team and limits; each endpoint's `auth` says
`public` (the endpoint's flag) and, when not public, the ids of the keys of its team
scoped to it. A revoked key is absent, and since the version digest covers the keys, the
ETag changes and the gateway drops it at its next poll.

Variant names: an entry's variants are artifacts of one model (the stable's) with
distinct (version, variant) pairs (`_fits`, the same check the API applies), so
`v{version}-{variant}` (and `-baseline` for the stable's copy) is unique within the entry
by construction. The gateway still checks every entry and refuses only a bad one.

Why this is one long module: it is the one builder of the route table contract (STYLE: one
owner per contract), read top to bottom: the variants, the keys, and the per-entry guard
that keeps one endpoint's bad rows from costing the others.

LLM endpoints (kind llm) go to `llm_endpoints`: the same variants (stable,
rollout candidate and fair baseline, experiment arms) with their backends, the endpoint's
fallbacks and LLM settings (deployments/llm_routes.py), checked per entry the same way;
`secrets` lists the provider secrets that the emitted backends name, and only those.
Keys carry their LLM limits (tokens_per_minute, max_streams) too.

Per endpoint, never as a whole: each entry is built and checked against the
schema (gateway/contracts/route_table.schema.json, the file the gateway validates with) on its own.
An entry whose split cannot be built (a rollout row whose plan does not hold, an
experiment provider that fails for it, an unreadable signature) or does not match the
schema is sent with its stable alone; one whose stable entry cannot be built either is
left out; a key whose row does not fit the schema is left out and no entry names it.
`route_build()` returns the table and these problems (`RouteProblem`); the endpoint page
shows them and monitoring's collector tick raises a `route_degraded` alert naming the
endpoint. Database errors are not caught: without the database there is no table, and
the gateway keeps its last good one.
"""

import functools
import hashlib
import json
import logging
import math
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import jsonschema_rs
from django.db import DatabaseError
from django.utils import timezone

from deployments import llm_routes
from deployments.models import PoolModel, PoolModelState
from deployments.rollout_machine import FULL_BP, VariantRole
from deployments.route_overlays import route_overlays_isolated
from deployments.selectors.compatibility import serving_problem
from deployments.selectors.keys import active_inference_keys
from deployments.selectors.pools import ready_replicas
from deployments.selectors.rollouts import active_rollouts, serving_endpoints
from deployments.services.route_changes import route_generation
from registry.models import Task
from registry.names import baseline_triton_name, baseline_variant_name, triton_name, variant_name
from registry.selectors.llm import artifacts_by_id
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
    for field in ("rate_per_s", "burst", "max_concurrency", "tokens_per_minute", "max_streams"):
        value = getattr(key, field)
        if value is not None:
            doc[field] = value
    if key.token_budgets:
        doc["token_budgets"] = key.token_budgets
    return doc


def _auth(endpoint, team_keys: dict) -> dict:
    """`public` and the ids of the team's keys scoped to it, public or not: a public
    endpoint's traffic needs no key, its feedback does (docs/experiments.md)."""
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


log = logging.getLogger(__name__)
SCHEMA_PATH = Path(__file__).resolve().parents[1] / "gateway" / "contracts" / "route_table.schema.json"
SERVED_STABLE = "stable"  # RouteProblem.served: the endpoint serves its stable alone
LOADING = "entry_loading"  # RouteProblem.code: left out while its model loads (info, not a fault)
SERVED_NONE = "none"  # left out of the table: the gateway does not know the endpoint


@dataclass(frozen=True)
class RouteProblem:
    """Why the route table does not carry what an endpoint's rows ask for (by name in
    `route_build()`'s problems): `code` split_failed, split_invalid (its split could not
    be built / does not match the schema: `served` stable), entry_failed, entry_invalid
    (neither could its stable's entry: `served` none), key_invalid (a key left out)."""

    code: str
    reason: str
    served: str
    team_id: int | None = None  # the endpoint's or the key's team (whom the alert goes to)


@functools.cache
def _schema_validators() -> dict:
    """{def name: validator} for an endpoint entry and a key, from the contract's own file."""
    schema = json.loads(SCHEMA_PATH.read_text())
    return {
        name: jsonschema_rs.validator_for(
            {"$schema": schema["$schema"], "$defs": schema["$defs"], "$ref": f"#/$defs/{name}"}
        )
        for name in ("endpoint", "key", "llm_endpoint", "secret")
    }


@functools.cache
def _replica_patterns() -> tuple[re.Pattern, re.Pattern]:
    """The schema's patterns of a replica's HTTP base URL and gRPC address: a replica row
    that does not match one is not routed (HTTP) or takes no gRPC, and costs nothing more."""
    variant = json.loads(SCHEMA_PATH.read_text())["$defs"]["variant"]["properties"]
    return re.compile(variant["replicas"]["items"]["pattern"]), re.compile(variant["grpc_replicas"]["items"]["pattern"])


def _schema_error(kind: str, doc: dict) -> str | None:
    """The first way `doc` does not match the schema's `kind` ("endpoint", "key"), or None."""
    error = next(iter(_schema_validators()[kind].iter_errors(doc)), None)
    if error is None:
        return None
    where = "/".join(str(part) for part in error.instance_path) or "the entry"
    return f"{where}: {error.message}"[:300]


def _exception_text(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


@dataclass
class _Sources:
    """What every entry is built from: read once per table."""

    team_keys: dict
    rollouts: dict
    overlays: dict
    overlay_failures: dict
    ready_models: dict
    replicas: dict
    llm: llm_routes.LLMSources
    fallback_artifacts: dict
    loading_models: set  # (pool id, Triton model name) still loading: an entry waiting for one is not broken


def _sources(endpoints, keys) -> _Sources:
    team_keys: dict[int, list] = {}
    for key, scope in keys:
        team_keys.setdefault(key.team_id, []).append((key, scope))
    pool_ids = {e.pool_id for e in endpoints}
    ready_models = {
        (pm.pool_id, pm.triton_model_name): pm
        for pm in PoolModel.objects.filter(pool_id__in=pool_ids, state=PoolModelState.READY)
    }
    replicas: dict[int, list] = {}
    http_ok, grpc_ok = _replica_patterns()
    for replica in ready_replicas(pool_ids=pool_ids):
        if not http_ok.fullmatch(replica.http_url.rstrip("/") or "-"):  # not an address the schema takes: not routed
            continue
        if replica.grpc_url and not grpc_ok.fullmatch(replica.grpc_url):
            replica.grpc_url = ""  # its variants then take no gRPC (the gateway answers UNAVAILABLE there)
        replicas.setdefault(replica.pool_id, []).append(replica)
    overlays, failures = route_overlays_isolated(endpoints)
    fallback_ids = {pk for e in endpoints if e.kind == "llm" for pk in (e.llm_fallbacks or ()) if isinstance(pk, int)}
    fallback_artifacts = artifacts_by_id(fallback_ids)
    loading = set(
        PoolModel.objects.filter(pool_id__in=pool_ids, state=PoolModelState.LOADING).values_list(
            "pool_id", "triton_model_name"
        )
    )
    return _Sources(
        team_keys,
        active_rollouts(endpoints=endpoints),
        overlays,
        failures,
        ready_models,
        replicas,
        llm_routes.LLMSources(),
        fallback_artifacts,
        loading,
    )


def _rollout_variants(endpoint, rollout, entry: dict, make) -> list | None:
    """The rollout's variants (stable, candidate, fair baseline), or None when it routes none now.
    `make(artifact, role, weight_bp, model_name, name="")` builds one variant."""
    stable = endpoint.stable_artifact
    split = rollout.split
    candidate = rollout.candidate_artifact
    if not (split.candidate_role and candidate.pk != stable.pk and _fits(endpoint, [candidate])):
        return None
    variants = [make(stable, VariantRole.STABLE, split.stable_bp, triton_name(stable))]
    if split.candidate_role == VariantRole.SHADOW:
        if "shadow_sample_rate" in entry:  # tensor entries; an LLM entry copies no traffic (no such field)
            entry["shadow_sample_rate"] = rollout.shadow_sample_rate
        variants.append(make(candidate, VariantRole.SHADOW, 0, triton_name(candidate)))
        return variants
    variants.append(make(candidate, VariantRole.CANARY, split.candidate_bp, triton_name(candidate)))
    if split.baseline_bp:  # the fair baseline: the stable artifact's own copy, the candidate's share
        baseline = rollout.baseline_artifact
        variants.append(
            make(
                baseline,
                VariantRole.BASELINE,
                split.baseline_bp,
                rollout.baseline_model or baseline_triton_name(baseline),
                name=baseline_variant_name(baseline),
            )
        )
    return variants


def _overlay_variants(endpoint, overlay, entry: dict, make, loading: set) -> list | None:
    """An experiment's arms (the first is the stable), or None when they cannot serve here. An
    arm whose model is still loading into the pool (the experiment just started) leaves the
    stable alone until it is ready: no arm's share meets a model that is not there, and the
    analysis never blames an arm for its own loading."""
    arms = [artifact for artifact, _ in overlay.arms[1:]]
    if overlay.arms[0][0].pk != endpoint.stable_artifact.pk or not _fits(endpoint, arms):
        return None
    if any((endpoint.pool_id, triton_name(artifact)) in loading for artifact in arms):
        return None
    entry["salt"], entry["experiment"] = overlay.salt, overlay.name
    if overlay.token_key:
        entry["exposure_token_key"] = overlay.token_key
        entry["exposure_token_ttl_s"] = overlay.token_ttl_s
    return [
        make(artifact, VariantRole.STABLE if i == 0 else VariantRole.ARM, weight_bp, triton_name(artifact))
        for i, (artifact, weight_bp) in enumerate(overlay.arms)
    ]


def _entry(endpoint, sources: _Sources, listed_keys: set, *, split: bool) -> dict:
    """The endpoint's entry: with its rollout's or experiment's split when `split`, else its stable alone."""
    if endpoint.kind == "llm":
        return _llm_entry(endpoint, sources, listed_keys, split=split)
    rollout = sources.rollouts.get(endpoint.pk)
    entry = {
        "name": endpoint.name,
        "team": team_label(endpoint.team),  # who gets 403 rather than the unknown endpoint's 404
        "sticky_header": endpoint.sticky_header,
        "timeout_ms": endpoint.timeout_ms,
        # a client deadline below the endpoint's p99 SLO that expires is the client's doing
        "min_timeout_ms": max(1, min(endpoint.timeout_ms, math.ceil(endpoint.slo_p99_ms))),
        "salt": rollout.salt if rollout and split else "",
        "shadow_sample_rate": 0.0,
        "auth": _listed_auth(endpoint, sources, listed_keys),
    }
    if endpoint.capture_share > 0:  # captured requests' inputs go to the log with their exposure
        entry["capture_share"] = endpoint.capture_share
    if endpoint.stable_artifact.version.model.task == Task.GENERATIVE_REC:
        entry["affinity"] = "user"  # each replica keeps its own users' KV cache (gateway/table/affinity.py)

    def make(artifact, role, weight_bp, model_name, name=""):
        urls = _ready_urls(endpoint.pool_id, model_name, sources.ready_models, sources.replicas)
        return _variant(artifact, role, weight_bp, urls, name=name, triton_model=model_name)

    entry["variants"] = _split_variants(endpoint, sources, entry, make, split=split)
    return entry


def _listed_auth(endpoint, sources: _Sources, listed_keys: set) -> dict:
    auth = _auth(endpoint, sources.team_keys)
    auth["keys"] = [key for key in auth["keys"] if key in listed_keys]  # a key left out is named by no entry
    return auth


def _split_variants(endpoint, sources: _Sources, entry: dict, make, *, split: bool) -> list:
    rollout = sources.rollouts.get(endpoint.pk)
    variants = None
    if split and rollout is not None:
        variants = _rollout_variants(endpoint, rollout, entry, make)
    if split and variants is None and (overlay := sources.overlays.get(endpoint.pk)) is not None:
        variants = _overlay_variants(endpoint, overlay, entry, make, sources.loading_models)
    stable = endpoint.stable_artifact
    return variants or [make(stable, VariantRole.STABLE, FULL_BP, triton_name(stable))]


def _llm_entry(endpoint, sources: _Sources, listed_keys: set, *, split: bool) -> dict:
    """An llm_endpoint entry (deployments/llm_routes.py builds its variants and fallbacks)."""
    rollout = sources.rollouts.get(endpoint.pk)
    entry = {
        "name": endpoint.name,
        "auth": _listed_auth(endpoint, sources, listed_keys),
        "sticky_header": endpoint.sticky_header,
        "salt": rollout.salt if rollout and split else "",
        "team": team_label(endpoint.team),
        "timeout_ms": endpoint.timeout_ms,
        # one saved before the ceiling was lowered is served at the ceiling (the gateway clamps too)
        "first_token_timeout_ms": min(endpoint.first_token_timeout_ms, llm_routes.first_token_timeout_max_ms()),
        "max_tokens_default": endpoint.max_tokens_default,
        "prefix_affinity_chars": endpoint.prefix_affinity_chars,
    }
    context = endpoint.context_length or sources.llm.spec(endpoint.stable_artifact).context_length
    entry["context_length"] = context

    def urls(model_name: str) -> list[str]:
        return [http for http, _ in _ready_urls(endpoint.pool_id, model_name, sources.ready_models, sources.replicas)]

    def make(artifact, role, weight_bp, model_name, name=""):
        return llm_routes.variant(
            artifact, role, weight_bp, model_name=model_name, urls=urls(model_name), sources=sources.llm, name=name
        )

    entry["variants"] = _split_variants(endpoint, sources, entry, make, split=split)
    chosen = [sources.fallback_artifacts[pk] for pk in endpoint.llm_fallbacks or () if pk in sources.fallback_artifacts]
    entry["fallbacks"] = llm_routes.fallbacks(chosen, urls_of=urls, model_name_of=triton_name, sources=sources.llm)
    return entry


def _split_subject(endpoint, sources: _Sources) -> str:
    rollout = sources.rollouts.get(endpoint.pk)
    if rollout is not None:
        return f"rollout #{rollout.pk}"
    overlay = sources.overlays.get(endpoint.pk)
    return f"experiment {overlay.name!r}" if overlay is not None else "its stable's entry"


def _try_entry(endpoint, sources: _Sources, listed_keys: set, *, split: bool) -> tuple[dict | None, str, str]:
    """(entry, "", "") or (None, code suffix "failed"/"invalid", why)."""
    try:
        entry = _entry(endpoint, sources, listed_keys, split=split)
    except DatabaseError:
        raise
    except llm_routes.BackendNotReady as exc:
        if (endpoint.pool_id, exc.model_name) in sources.loading_models:  # waiting, not broken
            return None, "loading", f"waits for Triton model {exc.model_name} to load into pool {endpoint.pool.name}"
        return None, "failed", _exception_text(exc)
    except Exception as exc:  # a row written around the API's checks: its own endpoint pays, no other
        return None, "failed", _exception_text(exc)
    error = _schema_error("llm_endpoint" if endpoint.kind == "llm" else "endpoint", entry)
    return (entry, "", "") if error is None else (None, "invalid", f"does not match the route table schema ({error})")


def _endpoint_entry(endpoint, sources: _Sources, listed_keys: set) -> tuple[dict | None, RouteProblem | None]:
    """The endpoint's entry as its rows ask, else its stable alone, else none; and why not as asked."""
    entry, failure, why = _try_entry(endpoint, sources, listed_keys, split=True)
    overlay_failure = sources.overlay_failures.get(endpoint.pk)
    if entry is not None and overlay_failure is not None and endpoint.pk not in sources.rollouts:
        return entry, RouteProblem(  # its experiment's split could not be read: its stable alone
            "split_failed",
            f"The experiment split of endpoint {endpoint.name!r} could not be built ({overlay_failure}); "
            "it serves its stable alone.",
            SERVED_STABLE,
            endpoint.team_id,
        )
    if entry is not None:
        return entry, None
    subject = _split_subject(endpoint, sources)
    stable_entry, stable_failure, stable_why = _try_entry(endpoint, sources, listed_keys, split=False)
    if stable_entry is not None:
        return stable_entry, RouteProblem(
            f"split_{failure}",
            f"The route entry of endpoint {endpoint.name!r} with {subject} {why}; it serves its stable alone.",
            SERVED_STABLE,
            endpoint.team_id,
        )
    if stable_failure == "loading":
        return None, RouteProblem(
            LOADING,
            f"Endpoint {endpoint.name!r} {stable_why}; it joins the route table once the model is ready "
            "(the gateway answers 404 for it until then).",
            SERVED_NONE,
            endpoint.team_id,
        )
    return None, RouteProblem(
        f"entry_{stable_failure}",
        f"The route entry of endpoint {endpoint.name!r} {stable_why}; it is left out of the route table "
        "(the gateway answers 404 for it) while every other endpoint is served.",
        SERVED_NONE,
        endpoint.team_id,
    )


def _key_docs(keys) -> tuple[list[dict], dict[str, RouteProblem]]:
    docs, problems = [], {}
    for key, _ in keys:
        try:
            doc = _key(key)
        except DatabaseError:
            raise
        except Exception as exc:
            error = _exception_text(exc)
        else:
            error = _schema_error("key", doc)
            if error is None:
                docs.append(doc)
                continue
        problems[f"k{key.pk}"] = RouteProblem(
            "key_invalid",
            f"Inference key k{key.pk} is left out of the route table ({error}).",
            SERVED_NONE,
            key.team_id,
        )
    return docs, problems


_logged: dict = {"problems": None}


CACHE_MAX_AGE_S = 30.0  # a backstop for writes made around the services (raw SQL): rebuilt at least this often
_cache_lock = threading.Lock()
_cache: dict = {"generation": None, "at": 0.0, "built": None}


def route_cache_clear() -> None:
    with _cache_lock:
        _cache.update(generation=None, at=0.0, built=None)


def route_build() -> tuple[dict, dict[str, RouteProblem], dict[str, RouteProblem]]:
    """(the table, {endpoint name: RouteProblem}, {key id: RouteProblem}): every endpoint
    that has a stable artifact, with its current split where its rows allow it.

    Built once per change, not once per read: the last build is kept with the generation it
    was built at (services.route_changes: every write the table reads marks a change in its
    own transaction) and served while the generation is the same, for at most
    CACHE_MAX_AGE_S. The generation is read before the rows, so a build never carries a
    generation newer than what it read. Callers must not change what it returns."""
    generation = route_generation()
    now = time.monotonic()
    with _cache_lock:
        if _cache["generation"] == generation and now - _cache["at"] < CACHE_MAX_AGE_S:
            return _cache["built"]
    built = _route_build_now()
    with _cache_lock:
        _cache.update(generation=generation, at=now, built=built)
    return built


def _route_build_now() -> tuple[dict, dict[str, RouteProblem], dict[str, RouteProblem]]:
    endpoints = serving_endpoints()
    keys = active_inference_keys()
    sources = _sources(endpoints, keys)
    key_docs, key_problems = _key_docs(keys)
    listed_keys = {doc["id"] for doc in key_docs}
    table, llm_table, problems = [], [], {}
    for endpoint in endpoints:
        entry, problem = _endpoint_entry(endpoint, sources, listed_keys)
        if entry is not None:
            (llm_table if endpoint.kind == "llm" else table).append(entry)
        if problem is not None:
            problems[endpoint.name] = problem
    if _logged["problems"] != (problems, key_problems):  # once per change, not once per poll
        _logged["problems"] = (problems, key_problems)
        for name, problem in sorted({**problems, **key_problems}.items()):
            # a model still loading is the normal start of an endpoint, not something wrong
            level = logging.INFO if problem.code == LOADING else logging.WARNING
            log.log(level, "route table: %s (%s): %s", name, problem.code, problem.reason)
    body = {"keys": key_docs, "endpoints": table}
    if llm_table:
        named = set().union(*(llm_routes.secret_ids(entry) for entry in llm_table))
        body["llm_endpoints"] = llm_table
        body["secrets"] = [
            {"id": sid, "value": sources.llm.values[sid], "origins": sources.llm.origins[sid]} for sid in sorted(named)
        ]
        body["llm_rules"] = llm_routes.rules_document()
    # the version (shown in /status and /healthz) digests the secrets by id, never by value: a
    # secret's value never changes under its id (a new value is a new secret)
    digested = {**body, "secrets": [s["id"] for s in body["secrets"]]} if "secrets" in body else body
    version = hashlib.sha256(json.dumps(digested, sort_keys=True).encode()).hexdigest()[:20]
    return (
        {"version": version, "generated_at": timezone.now().strftime("%Y-%m-%dT%H:%M:%SZ"), **body},
        problems,
        key_problems,
    )


def route_table() -> dict:
    """Every endpoint that has a stable artifact, with its current split (route_build's table)."""
    return route_build()[0]
