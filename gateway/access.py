"""Who may call an endpoint: the caller's key checked against the endpoint's access
(tenants.authenticate), and the gateway's answer when it may not (401 with
WWW-Authenticate, 403, 429 with Retry-After), counted in gateway_auth_rejections_total
under the endpoint's name and the key's team and id (never the client's strings)."""

from __future__ import annotations

from . import metrics
from .responses import error
from .tenants import authenticate, retry_after


def rejected(problem, reason: str, wait: float, rid: str, ep_name: str, key):
    metrics.AUTH_REJECTIONS.labels(ep_name, key.team if key else "", key.id if key else "", reason).inc()
    status, code, detail = problem
    extra = None
    if status == 401:
        extra = {"WWW-Authenticate": 'Bearer realm="inference"'}
    elif status == 429:
        extra = {"Retry-After": retry_after(wait)}
    return error(status, code, detail, rid, extra=extra)


def admit(table, ep, headers: dict, rid: str, now: float):
    """(key, None) when the caller may call `ep` now — a non-public key's in-flight count is
    taken, so the caller must `tenants.release` it — else (key or None, the response)."""
    key, rejection = authenticate(headers, ep.auth, table.keys, ep.name, now)
    if rejection is None:
        return key, None
    problem, reason, wait = rejection
    return key, rejected(problem, reason, wait, rid, ep.name, key)
