"""What operators and orchestrators read: liveness and readiness (open), and `/metrics`
and `/status` (behind GATEWAY_METRICS_TOKEN when it is set)."""

from __future__ import annotations

import asyncio
import hmac
import json
import os

from gateway.process.aggregate import all_workers
from gateway.telemetry import metrics
from gateway.wire.ids import request_id
from gateway.wire.responses import JSON_CT, error, plain_headers

LIVE = b'{"live": true}'


def operator_allowed(gateway, request) -> bool:
    """/metrics and /status: open when GATEWAY_METRICS_TOKEN is unset, else only with `Bearer <token>`."""
    expected = gateway.metrics_token
    if not expected:
        return True
    value = request.headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode("latin-1"), expected)


def unauthorized(path: str, request):
    return _unauthorized(path, request_id(request.headers))


def _unauthorized(path: str, rid: str):
    return error(
        401,
        "unauthorized",
        f"{path} needs Authorization: Bearer <GATEWAY_METRICS_TOKEN>",
        rid,
        extra={"WWW-Authenticate": 'Bearer realm="gateway-metrics"'},
    )


def metrics_page(gateway, request):
    rid = request_id(request.headers)
    if not operator_allowed(gateway, request):
        return _unauthorized("/metrics", rid)
    if gateway.control is not None and gateway.settings.run_dir:  # several workers: one exposition for all
        return _all_workers(gateway, rid)
    body, content_type = metrics.exposition()
    return 200, plain_headers(rid, content_type=content_type), body


async def _all_workers(gateway, rid: str):
    # the siblings are read by a thread (control.py), not by this worker's loop
    body = await asyncio.get_running_loop().run_in_executor(
        None, all_workers, gateway.settings.run_dir, gateway.control.own_socket
    )
    return 200, plain_headers(rid, content_type=metrics.CONTENT_TYPE), body


def live(gateway, request):
    return 200, plain_headers(request_id(request.headers)), LIVE


def ready(gateway, request):
    """Live and ready, nothing else: ready once a route table is loaded and until shutdown begins."""
    is_ready = gateway.table is not None and not gateway.stopping
    body = b'{"live": true, "ready": true}' if is_ready else b'{"live": true, "ready": false}'
    return (200 if is_ready else 503), plain_headers(request_id(request.headers)), body


def status_page(gateway, request):
    """For operators: route source, version, staleness, last error, and each replica's breaker."""
    rid = request_id(request.headers)
    if not operator_allowed(gateway, request):
        return _unauthorized("/status", rid)
    table = gateway.table
    detail = {
        "ready": table is not None and not gateway.stopping,
        "worker": {"pid": os.getpid(), "workers": gateway.settings.workers},
        "routes": gateway.status.detail(),
        "keys": len(table.keys) if table else 0,
        "endpoints": {name: _endpoint_detail(ep) for name, ep in (table.endpoints.items() if table else ())},
        "llm_endpoints": {name: ep.describe() for name, ep in (table.llm.items() if table else ())},  # no secrets
    }
    return 200, {"Content-Type": JSON_CT, "X-Request-Id": rid, "X-Model-Variant": "none"}, json.dumps(detail).encode()


def _endpoint_detail(ep) -> dict:
    return {
        "public": ep.auth.public,
        "variants": {
            v.name: {
                "role": v.role,
                "weight_bp": v.weight_bp,
                "triton_model": v.triton_model,
                "signature": v.signature is not None,
                "replicas": {e[0].base: ("open" if e[0].broken else "closed") for e in v.replicas},
            }
            for v in ep.variants
        },
    }
