"""What the gateway serves against what the control plane wants it to serve.

The desired route table is `deployments.routes.route_table()` (its `version` is a digest
of its content); the served one is what the gateway's `/status` says: the version it
applied and the entries it refused (gateway/table/checks.py). Read live, with a short
timeout and a few seconds' cache, by `/healthz` (config/health.py) and the endpoint page.

`behind` is true when the gateway does not serve the desired table for a reason that
will not pass by itself: it refused entries, or its source is failing (the control plane
cannot be reached, or a document was refused whole). A version that differs while the
gateway polls fine is a change in flight (applied within its poll interval): shown, not
an error.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

from django.conf import settings

from deployments import conf as deployments_conf
from deployments.routes import LOADING, route_build, route_table
from deployments.routes import team_label as _team_label
from kernel.conf import setting

ROUTE_LOADING = LOADING  # a problem's code while its endpoint waits for its model to load (not a fault)
CACHE_SECONDS = 2.0
_cache: dict = {"at": 0.0, "url": None, "value": None}
_lock = threading.Lock()


def gateway_status_url() -> str:
    """GATEWAY_STATUS_URL (kernel.conf: a setting, then the environment), else this machine's gateway."""
    return (
        deployments_conf.get("GATEWAY_STATUS_URL")
        or f"http://127.0.0.1:{settings.GATEWAY_CONTROL_PORT or settings.GATEWAY_PORT}/status"
    )


def _read_status(url: str, timeout: float) -> dict:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    token = setting("GATEWAY_METRICS_TOKEN")  # /status is behind the same token as /metrics
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read(1 << 20))


def route_sync(status: dict | None, desired: str, error: str = "") -> dict:
    """The comparison, pure: {"served", "desired", "applied", "refused": {name: {code, reason}},
    "refused_keys", "stale", "last_error", "behind", "error"}."""
    if status is None:
        return {
            "served": None,
            "desired": desired,
            "applied": False,
            "refused": {},
            "refused_keys": [],
            "stale": True,
            "last_error": None,
            "behind": True,
            "error": error,
        }
    routes = status.get("routes") or {}
    refused = [r for r in routes.get("refused") or () if isinstance(r, dict)]
    endpoints = {
        r.get("name"): {"code": r.get("code"), "reason": r.get("reason")}
        for r in refused
        if r.get("kind") in ("endpoint", "llm_endpoint")  # one namespace (gateway/table/checks.py)
    }
    stale = bool(routes.get("stale"))
    return {
        "served": routes.get("version"),
        "desired": desired,
        "applied": routes.get("version") == desired and not endpoints,
        "refused": endpoints,
        "refused_keys": sorted(str(r.get("name")) for r in refused if r.get("kind") == "key"),
        "stale": stale,
        "last_error": routes.get("last_error"),
        "behind": bool(endpoints) or (stale and routes.get("version") != desired),
        "error": "",
    }


def gateway_route_sync(*, url: str | None = None, timeout: float = 1.0, cached: bool = True) -> dict:
    """`route_sync` of the live gateway (cached CACHE_SECONDS per URL)."""
    url = url or gateway_status_url()
    with _lock:
        if cached and _cache["url"] == url and time.monotonic() - _cache["at"] < CACHE_SECONDS:
            return _cache["value"]
    desired = route_table()["version"]
    try:
        value = route_sync(_read_status(url, timeout), desired)
    except (OSError, ValueError, urllib.error.URLError) as exc:
        value = route_sync(None, desired, f"GET {url}: {type(exc).__name__}: {exc}"[:300])
    with _lock:
        _cache.update(at=time.monotonic(), url=url, value=value)
    return value


def route_table_problems() -> dict:
    """What the control plane could not put in the route table as its rows ask:
    {"endpoints": {name: {code, reason, served, team_id}}, "keys": {key id: {...}}}, served
    "stable" (its stable alone) or "none" (left out). For the collector's alerts."""
    _, endpoints, keys = route_build()

    def doc(problem) -> dict:
        return {"code": problem.code, "reason": problem.reason, "served": problem.served, "team_id": problem.team_id}

    return {
        "endpoints": {name: doc(p) for name, p in endpoints.items()},
        "keys": {name: doc(p) for name, p in keys.items()},
    }


def endpoint_route_state(*, endpoint, rollout=None) -> dict:
    """The endpoint page's line on routing: the table served vs desired, whether the
    gateway refused this endpoint's entry (and why), and whether the active rollout's
    candidate is left out of the table by the shared check (and why), and whether the
    builder could not build the entry its rows ask for (`degraded`: code, reason, served)."""
    from deployments.rollout_machine import ACTIVE
    from deployments.selectors.compatibility import serving_problem

    sync = gateway_route_sync()
    excluded = None
    if rollout is not None and rollout.state in ACTIVE:
        excluded = serving_problem(endpoint=endpoint, artifact=rollout.candidate_artifact)
    degraded = route_table_problems()["endpoints"].get(endpoint.name)
    return {
        "served": sync["served"],
        "desired": sync["desired"],
        "applied": sync["served"] == sync["desired"],
        "refused": sync["refused"].get(endpoint.name),
        "error": sync["error"],
        "excluded": excluded,
        "degraded": degraded,
    }


def team_label(team) -> str:
    """The team as the route table names it: what the durable log's subjects carry (other apps read it here)."""
    return _team_label(team)
