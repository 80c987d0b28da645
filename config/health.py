"""GET /healthz: 200 only when every component this process depends on answers.

Anyone (a load balancer, a readiness probe) reads the status alone: 200 `{"status": "ok"}`
or 503 `{"status": "degraded"}`. What each component is and why it is down (hosts, child
pids, broker URLs, replica errors) is for staff sessions and for a caller sending
`Authorization: Bearer <HEALTHZ_TOKEN>` (make run, the tests and the closed-loop tooling).
"""

import hmac
import time
import urllib.error
import urllib.request
from urllib.parse import urlparse

from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET


def _check_database() -> dict:
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return {"engine": connection.vendor, "latency_ms": round((time.perf_counter() - started) * 1000, 2)}


def _check_broker() -> dict:
    started = time.perf_counter()
    url = settings.CELERY_BROKER_URL
    if url.startswith("filesystem://"):
        folder = settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"]
        probe = f"{folder}/.healthz"
        with open(probe, "w") as fh:
            fh.write("ok")
        return {"transport": "filesystem", "latency_ms": round((time.perf_counter() - started) * 1000, 2)}
    from kombu import Connection

    with Connection(url, connect_timeout=2, transport_options=settings.CELERY_BROKER_TRANSPORT_OPTIONS) as conn:
        conn.ensure_connection(max_retries=1, timeout=2)
    return {"transport": urlparse(url).scheme, "latency_ms": round((time.perf_counter() - started) * 1000, 2)}


READY_PATH = "/v2/health/ready"  # KServe v2 readiness: what the gateway (and Triton) answer
PROBE_TIMEOUT_S = 1.0


def _check_http(url: str) -> dict:
    """GET the component's readiness URL (`/v2/health/ready` when the URL has no path)
    with a short timeout: a process that accepts connections but does not answer (hung
    loop) reads as down, and so does anything but a 200."""
    if urlparse(url).path in ("", "/"):
        url = url.rstrip("/") + READY_PATH
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="GET"), timeout=PROBE_TIMEOUT_S) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    if status != 200:
        raise RuntimeError(f"GET {url} answered HTTP {status}")
    return {"url": url, "latency_ms": round((time.perf_counter() - started) * 1000, 2)}


def _check_heartbeat(name: str) -> dict:
    from django.utils import timezone

    from config.models import ComponentHeartbeat

    beat = ComponentHeartbeat.objects.filter(name=name).first()
    if beat is None:
        raise RuntimeError("no heartbeat yet")
    age = (timezone.now() - beat.seen_at).total_seconds()
    if age > settings.HEALTHZ_MAX_AGE_S:
        raise RuntimeError(f"last heartbeat {age:.0f}s ago")
    return {"last_seen_s": round(age, 1), **beat.detail}


class Degraded(RuntimeError):
    """A component that answers but reports parts of it broken: `detail` names them."""

    def __init__(self, message: str, detail: dict):
        super().__init__(message)
        self.detail = detail


def _check_pools() -> dict:
    """The pool supervisor's heartbeat, and what it recorded of the pools: a replica
    down (killed, crashed, not answering its probes) makes the platform degraded, naming
    the pool and the replica (components.pools.not_ready.<pool>.<replica>)."""
    from deployments.selectors.pools import pool_health_problems

    beat = _check_heartbeat("pools")
    problems = pool_health_problems()
    if problems:
        first_pool, first = next(iter(problems.items()))
        replica, why = next(iter(first.items()))
        count = sum(len(p) for p in problems.values())
        more = f" (and {count - 1} more)" if count > 1 else ""
        raise Degraded(f"pool {first_pool}: {replica} {why}{more}", {**beat, "not_ready": problems})
    return beat


def _check_feedback() -> dict:
    """The ingest's lag on every exposure and feedback stream (experiments/selectors/streams.py):
    down while an endpoint's feedback has waited longer than FEEDBACK_LAG_ALERT_S, naming it."""
    from experiments.selectors.streams import endpoint_lags, lagging, stream_lags
    from experiments.services.streams import stream_client

    client = stream_client()
    if client is None:
        return {"stream": "none (EXPOSURE_STREAM_URL is empty)"}
    lags = endpoint_lags(stream_lags(client))
    waiting = {name: lag for name, lag in lags.items() if lag["entries"]}
    late = lagging(lags, settings.FEEDBACK_LAG_ALERT_S)
    if late:
        worst, lag = next(iter(late.items()))
        more = f" (and {len(late) - 1} more)" if len(late) > 1 else ""
        raise Degraded(
            f"feedback for {worst} has waited {lag['lag_s']:.0f}s to be ingested{more}",
            {"lagging": late, "waiting": waiting, "threshold_s": settings.FEEDBACK_LAG_ALERT_S},
        )
    return {"waiting": waiting, "threshold_s": settings.FEEDBACK_LAG_ALERT_S}


CHECKS = {"database": _check_database, "broker": _check_broker}
HEARTBEAT_CHECKS = {"pools": _check_pools, "feedback": _check_feedback}  # named in HEALTHZ_EXPECT, not heartbeats


def _check_routes(gateway_url: str) -> dict:
    """The route table the gateway serves against the one the control plane wants
    (deployments/selectors/gateway_routes.py): down when it refused entries or cannot
    apply the desired table, naming the endpoints and why."""
    from deployments.selectors.gateway_routes import gateway_route_sync

    sync = gateway_route_sync(url=gateway_url.rstrip("/") + "/status", timeout=0.5, cached=False)
    if sync["error"]:
        raise RuntimeError(sync["error"])
    if sync["behind"]:
        refused = "; ".join(f"{name} ({r['code']})" for name, r in sorted(sync["refused"].items()))
        raise RuntimeError(
            f"gateway serves route table {sync['served']}, desired {sync['desired']}"
            + (f"; refused endpoint(s): {refused}" if refused else "")
            + (f"; {sync['last_error']}" if sync["last_error"] else "")
        )
    return {k: sync[k] for k in ("served", "desired", "applied", "refused_keys")}


def _expected_checks() -> dict:
    """The components this deployment runs: always database and broker; plus whatever
    `make run` (or the operator) lists in HEALTHZ_EXPECT, e.g. "worker,beat,gateway=http://…"
    (name=URL: probed over HTTP; a bare name: its heartbeat row)."""
    checks = dict(CHECKS)
    for item in settings.HEALTHZ_EXPECT:
        name, _, url = item.partition("=")
        if url:
            checks[name] = lambda url=url: _check_http(url)
            if name == "gateway":  # and whether it serves the route table the control plane wants
                checks["routes"] = lambda url=url: _check_routes(url)
        else:
            checks[name] = HEARTBEAT_CHECKS.get(name) or (lambda name=name: _check_heartbeat(name))
    return checks


def may_read_components(request) -> bool:
    """Staff, or the health token (compared in constant time)."""
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated and user.is_staff:
        return True
    token = settings.HEALTHZ_TOKEN
    scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
    return (
        bool(token) and scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(), token.encode())
    )


@never_cache
@require_GET
def healthz(request):
    components = {}
    for name, check in _expected_checks().items():
        try:
            components[name] = {"state": "up", **check()}
        except Exception as exc:  # any failure of a dependency is a "down", with its reason
            components[name] = {"state": "down", "error": f"{type(exc).__name__}: {exc}"[:300]}
            components[name].update(getattr(exc, "detail", {}))
    healthy = all(c["state"] == "up" for c in components.values())
    body = {"status": "ok" if healthy else "degraded"}
    if may_read_components(request):
        body["components"] = components
    return JsonResponse(body, status=200 if healthy else 503)
