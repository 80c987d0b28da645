"""The LLM settings of an endpoint (kind llm), checked for endpoint_create/endpoint_update:
the route table's llm_endpoint fields (gateway/contracts/route_table.schema.json gives the bounds)
and the fallbacks, an ordered list of LLM artifacts of the endpoint's team tried after
the chosen variant's own backends (e.g. an external provider behind an internal pool)."""

from __future__ import annotations

from deployments.llm_routes import first_token_timeout_max_ms
from kernel.errors import InvalidInput
from registry.models import MAX_CONTEXT_LENGTH, ArtifactStatus
from registry.names import is_llm_variant
from registry.selectors.llm import artifacts_by_id

LLM_FIELDS = (
    "first_token_timeout_ms",
    "context_length",
    "max_tokens_default",
    "prefix_affinity_chars",
    "llm_fallbacks",
)
BOUNDS = {
    "first_token_timeout_ms": (1, 600_000),
    "context_length": (1, MAX_CONTEXT_LENGTH),
    "max_tokens_default": (1, 1_000_000),
    "prefix_affinity_chars": (0, 100_000),
}
MAX_FALLBACKS = 32
LLM_DEFAULTS = {
    "timeout_ms": 120_000,
    "sticky_header": "X-Session-Id",
}  # a stream takes long; a conversation is the unit


def _whole(value, field: str) -> int:
    low, high = BOUNDS[field]
    if field == "first_token_timeout_ms":  # the operator's ceiling (LLM_FIRST_TOKEN_TIMEOUT_MAX_MS)
        high = min(high, first_token_timeout_max_ms())
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{field}: give a whole number in {low}..{high}.", field=field)
    if not low <= value <= high:
        raise InvalidInput(f"{field}: {value} is out of range; give {low}..{high}.", code=f"bad_{field}", field=field)
    return value


def _fallbacks(value, team) -> list[int]:
    if not isinstance(value, list) or len(value) > MAX_FALLBACKS:
        raise InvalidInput(
            f"llm_fallbacks: give a list of at most {MAX_FALLBACKS} artifact ids.", field="llm_fallbacks"
        )
    ids: list[int] = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int):
            raise InvalidInput("llm_fallbacks: give artifact ids (whole numbers).", field="llm_fallbacks")
        if item in ids:
            raise InvalidInput(f"llm_fallbacks: artifact {item} is listed twice.", field="llm_fallbacks")
        ids.append(item)
    found = artifacts_by_id(ids, team=team)
    for pk in ids:
        artifact = found.get(pk)
        if artifact is None:  # another team's artifact reads as an unknown one
            raise InvalidInput(
                f"llm_fallbacks: no artifact {pk} in team {team.name!r}.",
                code="artifact_not_found",
                field="llm_fallbacks",
            )
        if not is_llm_variant(artifact.variant):
            raise InvalidInput(
                f"llm_fallbacks: artifact {pk} ({artifact.variant}) is not an LLM artifact.",
                code="artifact_kind_mismatch",
                field="llm_fallbacks",
            )
        if artifact.status != ArtifactStatus.SERVABLE:
            raise InvalidInput(
                f"llm_fallbacks: artifact {pk} is {artifact.status}, not servable.",
                code="artifact_not_servable",
                field="llm_fallbacks",
            )
    return ids


def llm_values(changes: dict, *, kind: str, team, stable=None) -> dict:
    """The LLM fields among `changes`, checked; on a tensor endpoint any of them is a 400."""
    given = {key: changes[key] for key in LLM_FIELDS if key in changes and changes[key] is not None}
    if given and kind != "llm":
        raise InvalidInput(
            f"{sorted(given)[0]}: LLM settings apply to LLM endpoints (kind llm) only.",
            code="llm_only",
            field=sorted(given)[0],
        )
    values = {}
    for key, value in given.items():
        values[key] = _fallbacks(value, team) if key == "llm_fallbacks" else _whole(value, key)
    limit = _stable_context(stable)
    if "context_length" in values and limit is not None and values["context_length"] > limit:
        raise InvalidInput(
            f"context_length: {values['context_length']} is more than the stable version's context length, {limit}.",
            code="bad_context_length",
            field="context_length",
        )
    return values


def _stable_context(stable) -> int | None:
    if stable is None:
        return None
    from registry.selectors.llm import llm_spec_of

    spec = llm_spec_of(stable)
    return spec.context_length if spec is not None else None
