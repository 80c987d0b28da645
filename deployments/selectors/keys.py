"""Reads of inference keys: team-scoped lists for people (prefixes only: the secret is
never stored), and the active keys with their scopes for the gateway's route table."""

import hashlib

from django.db.models import Prefetch, QuerySet

from deployments.models import Endpoint, InferenceKey
from kernel.errors import NotFound
from registry.selectors.teams import team_scoped


def inference_key_list(*, user, team: str | None = None, active: bool | None = None) -> QuerySet:
    """Keys of the user's teams (any role reads them), newest first per team."""
    qs = InferenceKey.objects.select_related("team", "created_by", "revoked_by").prefetch_related(
        Prefetch("endpoints", queryset=Endpoint.objects.only("id", "name").order_by("name"))
    )
    qs = team_scoped(qs, user, "team_id")
    if team:
        qs = qs.filter(team__name=team)
    if active is not None:
        qs = qs.filter(revoked_at__isnull=active)
    return qs


def inference_key_get(*, user, key_id) -> InferenceKey:
    """A key of the user's teams, else 404 (another team's key "does not exist")."""
    try:
        key_id = int(key_id)
    except (TypeError, ValueError):
        raise NotFound(f"No inference key with id {str(key_id)[:40]!r}.", code="key_not_found") from None
    key = inference_key_list(user=user).filter(pk=key_id).first()
    if key is None:
        raise NotFound(f"No inference key with id {key_id}.", code="key_not_found")
    return key


def active_inference_keys() -> list[tuple[InferenceKey, frozenset[int] | None]]:
    """Every key not revoked, with the ids of the endpoints it is scoped to (None: all of
    its team's). Not user-scoped: the route table acts for the platform. Two queries."""
    keys = list(InferenceKey.objects.filter(revoked_at__isnull=True).select_related("team").order_by("pk"))
    scoped = [k.pk for k in keys if not k.all_endpoints]
    scopes: dict[int, set[int]] = {pk: set() for pk in scoped}
    if scoped:
        through = InferenceKey.endpoints.through.objects.filter(inferencekey_id__in=scoped)
        for key_id, endpoint_id in through.values_list("inferencekey_id", "endpoint_id"):
            scopes[key_id].add(endpoint_id)
    return [(k, None if k.all_endpoints else frozenset(scopes[k.pk])) for k in keys]


def inference_key_for_endpoint(*, secret: str, endpoint) -> InferenceKey | None:
    """The active key whose secret this is, when it may call `endpoint` (a key of its team,
    scoped to it); else None. The one key check outside the gateway (feedback to the API).
    Looked up by the secret's SHA-256 (unique, indexed): keys are random high-entropy
    tokens, so a lookup's timing tells nothing about a key nobody can invert."""
    if not secret or len(secret) > 512:
        return None
    digest = hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()
    key = InferenceKey.objects.filter(sha256=digest, revoked_at__isnull=True).first()
    if key is None or key.team_id != endpoint.team_id:
        return None
    if not key.all_endpoints and not key.endpoints.filter(pk=endpoint.pk).exists():
        return None
    return key
