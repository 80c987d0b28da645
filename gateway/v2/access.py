"""Who may call an endpoint: the caller's key checked against the endpoint's access
(tenants.authenticate), and the gateway's answer when it may not, counted in
gateway_auth_rejections_total under the endpoint's name and the key's team and id (never
the client's strings).

No name oracle (tests/gateway/test_no_name_oracle.py): a request that is not authorised for
a closed endpoint gets the answer a name the table lacks gets — 404 `unknown_endpoint`, the
same body, headers and work (the presented key's hash is looked up on both paths) — unless
it presents a valid key of the endpoint's own team (then 403 `forbidden`: that caller may
know the endpoint). So no key, a malformed or unknown or revoked key, and another team's key
are all "unknown endpoint"; the metric still says which (`reason`). What an authorised key
gets beyond that (429 with Retry-After over its limits) is about the key, not the name.
"""

from __future__ import annotations

from gateway.keys.tenants import authenticate, lookup_key
from gateway.table.routes import missing_endpoint, unknown_endpoint_detail
from gateway.telemetry import metrics
from gateway.wire.responses import error, retry_after

CONCEALED = frozenset(("missing_key", "invalid_key"))  # refusals that always read as an unknown endpoint


def rejected(problem, reason: str, wait: float, rid: str, ep_name: str, key):
    metrics.AUTH_REJECTIONS.labels(ep_name, key.team if key else "", key.id if key else "", reason).inc()
    status, code, detail = problem
    extra = None
    if status == 401:
        extra = {"WWW-Authenticate": 'Bearer realm="inference"'}
    elif status == 429:
        extra = {"Retry-After": retry_after(wait)}
    return error(status, code, detail, rid, extra=extra)


def conceals(reason: str, key, auth) -> bool:
    """Whether a refusal must read as an unknown endpoint: every one but those of a valid
    key of the endpoint's team (scoped elsewhere, or over its limits)."""
    return reason in CONCEALED or (reason == "forbidden" and (key is None or key.team not in auth.teams))


def concealed(reason: str, rid: str, ep_name: str, key):
    """The unknown endpoint's 404 for a refused request, counted under its real reason."""
    metrics.AUTH_REJECTIONS.labels(ep_name, key.team if key else "", key.id if key else "", reason).inc()
    return error(404, "unknown_endpoint", unknown_endpoint_detail(ep_name), rid)


def admit(table, ep, headers: dict, rid: str, now: float):
    """(key, None) when the caller may call `ep` now — a non-public key's in-flight count is
    taken, so the caller must `tenants.release` it — else (key or None, the response)."""
    key, rejection = authenticate(headers, ep.auth, table.keys, ep.name, now)
    if rejection is None:
        return key, None
    problem, reason, wait = rejection
    if conceals(reason, key, ep.auth):
        return key, concealed(reason, rid, ep.name, key)
    return key, rejected(problem, reason, wait, rid, ep.name, key)


def missing(table, name: str, headers: dict, rid: str):
    """(response, the platform's fault?) for a name the serving table lacks (routes.missing_endpoint).
    The presented key is looked up as `admit` does, so an unknown name costs what a closed
    endpoint's refusal costs."""
    status, code, detail, ours = missing_endpoint(table, name)
    if table is not None:
        lookup_key(headers, table.keys)
    return error(status, code, detail, rid), ours
