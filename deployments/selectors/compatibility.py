"""Whether an endpoint can serve an artifact beside its stable: the one check that the
API, the dashboard (hence the CLI, which calls the API) and the route table builder
share, so that what the control plane accepts is what it routes and what the gateway
accepts (tests/deployments/test_route_contract.py).

An artifact may serve an endpoint as a rollout candidate or an experiment arm only if:
- it is a version of the model the endpoint serves (its stable's model): a route entry's
  variants are then one model's (version, variant) pairs, and their names
  (`v{version}-{variant}`, registry/names.py) are unique by construction;
- it is not the same (version, variant) as the stable under another artifact id (a rebuild):
  it would have the stable's variant name and Triton model name;
- the endpoint's pool can run its variant (no GPU variant on a CPU pool);
- it is of the endpoint's kind: an LLM artifact (variant `llm` or `llm-backend`) only on an
  LLM endpoint, a tensor artifact only on a tensor endpoint (`kind_problem`, also checked
  for the stable when an endpoint is created);
- its signature takes the requests the stable takes: the same input names (optional ones
  aside), datatypes and shapes (a -1 dimension matches any size). An artifact whose
  signature is unknown (no readable config, no stored signature) is not refused for it:
  the gateway still checks each request against the shapes it declares;
- a generative recommender's arms serve the same catalog version (an A/B of two models on two
  item sets measures the items, not the models), unless the rollout is of the catalog itself:
  the stable's model version and build target on another version of the same catalog
  (`catalog_problem`).
"""

from __future__ import annotations

from dataclasses import dataclass

from deployments.models import DeviceKind
from kernel.errors import InvalidInput
from registry.names import gr_target, is_gr_variant, is_llm_variant, needs_gpu
from registry.selectors.item_catalogs import serving_catalog
from registry.selectors.serving import artifact_serving_signature


@dataclass(frozen=True)
class ServingProblem:
    code: str  # wrong_model, same_variant, variant_not_servable_here, catalog_mismatch, incompatible_signature
    message: str


def _describe(artifact) -> str:
    return f"artifact {artifact.pk} ({artifact.version.model.name} v{artifact.version.version} {artifact.variant})"


def _shape_problem(name: str, stable: list, other: list) -> str | None:
    if len(stable) != len(other) or any(a != b and -1 not in (a, b) for a, b in zip(stable, other)):
        return f"input {name!r} has shape {other}, the stable's is {stable}"
    return None


def signature_problem(stable: dict | None, other: dict | None) -> str | None:
    """Why requests the stable takes would not fit `other` (a sentence), or None."""
    if stable is None or other is None:
        return None
    mine = {t["name"]: t for t in stable["inputs"]}
    theirs = {t["name"]: t for t in other["inputs"]}
    missing = sorted(n for n, t in theirs.items() if n not in mine and not t.get("optional"))
    if missing:
        return f"it needs input(s) {missing} that the stable does not take (the stable takes {sorted(mine)})"
    unknown = sorted(n for n, t in mine.items() if n not in theirs and not t.get("optional"))
    if unknown:
        return f"it does not take input(s) {unknown} that the stable's requests carry (it takes {sorted(theirs)})"
    for name in sorted(set(mine) & set(theirs)):
        if mine[name]["datatype"] != theirs[name]["datatype"]:
            return f"input {name!r} is {theirs[name]['datatype']}, the stable's is {mine[name]['datatype']}"
        problem = _shape_problem(name, mine[name]["shape"], theirs[name]["shape"])
        if problem:
            return problem
    return None


def stable_problem(*, pool, artifact) -> ServingProblem | None:
    """Why `pool` cannot serve `artifact` as an endpoint's stable (a GPU variant on a CPU pool), or None."""
    if needs_gpu(artifact.variant) and not DeviceKind.is_gpu(pool.device_kind):
        return ServingProblem(
            "variant_not_servable_here",
            f"{_describe(artifact)} needs a GPU; pool {pool.name!r} is {pool.device_kind}.",
        )
    return None


def kind_problem(*, kind: str, artifact) -> ServingProblem | None:
    """Why an endpoint of `kind` ("tensor" or "llm") cannot serve `artifact` at all, or None."""
    llm = is_llm_variant(artifact.variant)
    if llm and kind != "llm":
        return ServingProblem(
            "artifact_kind_mismatch",
            f"{_describe(artifact)} is an LLM artifact; it serves only an LLM endpoint (kind llm, the OpenAI API).",
        )
    if not llm and kind == "llm":
        return ServingProblem(
            "artifact_kind_mismatch",
            f"{_describe(artifact)} is a tensor model's artifact; an LLM endpoint serves LLM versions only "
            "(registered at /api/v1/models/{name}/llm-versions/).",
        )
    return None


def catalog_problem(*, stable, artifact) -> ServingProblem | None:
    """Why `artifact` may not serve beside `stable` for the catalogs they serve, or None: both
    serve one catalog version, or the candidate is the stable's model version and target on
    another version of the same catalog (a rollout of the catalog)."""
    if not (is_gr_variant(stable.variant) or is_gr_variant(artifact.variant)):
        return None
    ours, theirs = serving_catalog(stable), serving_catalog(artifact)
    if ours is None or theirs is None:
        return ServingProblem(
            "catalog_mismatch",
            f"{_describe(artifact)} and the stable ({_describe(stable)}) must both be generative recommender "
            "variants that serve a catalog version.",
        )
    if ours.pk == theirs.pk:
        return None
    if ours.catalog_id != theirs.catalog_id:
        return ServingProblem(
            "catalog_mismatch",
            f"{_describe(artifact)} serves catalog {theirs.catalog.name!r}; the stable serves catalog "
            f"{ours.catalog.name!r}: both arms serve one catalog.",
        )
    if (artifact.version_id, gr_target(artifact.variant)) != (stable.version_id, gr_target(stable.variant)):
        return ServingProblem(
            "catalog_mismatch",
            f"{_describe(artifact)} serves {theirs}, the stable serves {ours}: both arms serve the same catalog "
            f"version unless the rollout is of the catalog itself (the stable's version and target, "
            f"v{stable.version.version} {gr_target(stable.variant)}, built on {theirs}). Roll out the catalog first, "
            f"or build this version on {ours}.",
        )
    return None


def serving_problem(*, endpoint, artifact) -> ServingProblem | None:
    """Why `endpoint` cannot serve `artifact` beside its stable (a candidate or an arm), or None."""
    stable = endpoint.stable_artifact
    problem = kind_problem(kind=endpoint.kind, artifact=artifact)
    if problem is not None:
        return problem
    if stable is None or artifact.pk == stable.pk:
        return None
    if artifact.version.model_id != stable.version.model_id:
        return ServingProblem(
            "wrong_model",
            f"{_describe(artifact)} is a version of model {artifact.version.model.name!r}; endpoint "
            f"{endpoint.name!r} serves model {stable.version.model.name!r} (stable: {_describe(stable)}).",
        )
    if (artifact.version.version, artifact.variant) == (stable.version.version, stable.variant):
        return ServingProblem(
            "same_variant",
            f"{_describe(artifact)} is the same version and variant as the stable ({_describe(stable)}); "
            "promote or roll back between different versions or variants.",
        )
    device = stable_problem(pool=endpoint.pool, artifact=artifact)
    if device is not None:
        return device
    catalog = catalog_problem(stable=stable, artifact=artifact)
    if catalog is not None:
        return catalog
    problem = signature_problem(artifact_serving_signature(stable), artifact_serving_signature(artifact))
    if problem:
        return ServingProblem(
            "incompatible_signature",
            f"{_describe(artifact)} cannot take the requests of endpoint {endpoint.name!r}: {problem}.",
        )
    return None


def require_kind(*, kind: str, artifact, field: str) -> None:
    problem = kind_problem(kind=kind, artifact=artifact)
    if problem is not None:
        raise InvalidInput(f"{field}: {problem.message}", code=problem.code, field=field)


def require_servable_beside_stable(*, endpoint, artifact, field: str) -> None:
    """Raise InvalidInput (400, its code and a sentence saying why) when `serving_problem` finds one."""
    problem = serving_problem(endpoint=endpoint, artifact=artifact)
    if problem is not None:
        raise InvalidInput(f"{field}: {problem.message}", code=problem.code, field=field)
