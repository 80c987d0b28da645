"""What a KServe v2 / Triton client reads besides inference, under the endpoint's name
(never the Triton model's or another team's), with the same keys as /infer unless the
endpoint is public (a request that may not read a closed endpoint gets the unknown
endpoint's 404, access.py):

- `GET /v2`: the gateway's own server metadata (name, version, the protocol extensions it
  serves);
- `GET /v2/models/{e}[/versions/{v}]`, `…/ready`, `…/config`, `…/stats`: from the variant
  the request would reach — the registry version `v` when given (404 naming the versions
  served otherwise), else the sticky arm of the request's sticky key, else the stable —
  read from its replica(s) and renamed (replies.py); statistics are summed over the
  variant's replicas so a client's deltas stay consistent whichever replica serves;
- `GET /v2/models/stats`: the statistics of every endpoint the caller may read.

The variant choice and the renaming are shared with the gRPC service (gateway/v2/grpc/).
"""

from __future__ import annotations

import asyncio
import json
from importlib import metadata as package_metadata
from time import perf_counter

from gateway.keys.tenants import lookup_key, release
from gateway.kserve.replies import public_config, public_metadata, public_stats, rename_error
from gateway.v2.access import admit, missing
from gateway.wire.ids import request_id
from gateway.wire.responses import JSON_CT, error, header_safe, plain_headers
from gateway.wire.upstream import UpstreamError

# KServe v2 / Triton extensions the gateway serves itself (not Triton's repository, shared
# memory, trace or logging extensions: those stay on the replicas)
EXTENSIONS = ("binary_tensor_data", "classification", "model_configuration", "parameters", "statistics")
MAX_LISTED = 200  # endpoints in one GET /v2/models/stats


def _version() -> str:
    try:
        return package_metadata.version("modelplane")
    except package_metadata.PackageNotFoundError:
        return "0"


SERVER_METADATA = {"name": "modelplane-gateway", "version": _version(), "extensions": list(EXTENSIONS)}


def read_variant(ep, version: str | None, sticky: str | None):
    """The variant a request to `ep` would reach: the one serving registry version
    `version`; else the sticky arm of `sticky`; else the stable. None: no such version."""
    if version is not None:
        return ep.versions.get(version)
    if sticky and len(ep.live) > 1:
        return ep.sticky(sticky)
    return ep.stable


def versions_served(ep) -> str:
    return ", ".join(sorted(ep.versions, key=lambda v: (len(v), v)))


def unknown_version(ep, version: str) -> str:
    return f"endpoint {ep.name!r} serves version(s) {versions_served(ep)}, not {version[:40]!r}"


def server_metadata(gateway, request):
    return 200, plain_headers(request_id(request.headers)), json.dumps(SERVER_METADATA).encode()


def _endpoint_for_read(gateway, request, name: str, rid: str):
    """(endpoint, None) when the caller may read this endpoint, else (None, response)."""
    table = gateway.table
    ep = table.endpoints.get(name) if table else None
    if ep is None:
        return None, missing(table, name, request.headers, rid)[0]
    key, response = admit(table, ep, request.headers, rid, perf_counter())
    if response is not None:
        return None, response
    if key is not None:
        release(key)
    return ep, None


def _variant_for_read(gateway, request, name: str, version: str | None, rid: str):
    """(endpoint, variant, None) or (None, None, response)."""
    ep, response = _endpoint_for_read(gateway, request, name, rid)
    if ep is None:
        return None, None, response
    variant = read_variant(ep, version, request.headers.get(ep.sticky_key))
    if variant is None:
        return None, None, error(404, "unknown_version", unknown_version(ep, version), rid)
    return ep, variant, None


def model_ready(gateway, request, name: str, version: str | None = None):
    rid = request_id(request.headers)
    ep, variant, response = _variant_for_read(gateway, request, name, version, rid)
    if ep is None:
        return response
    return (200 if variant.available else 503), {"X-Request-Id": rid, "X-Model-Variant": variant.name}, b""


async def _upstream_get(ep, variant, suffix: str, rid: str, entry=None):
    """GET /v2/models/{triton model}{suffix} from a replica of the variant: (status, headers, body) or a response."""
    entry = entry or variant.pick()
    if entry is None:
        detail = f"endpoint {ep.name!r}: variant {variant.name!r} has no ready replica"
        return None, error(503, "no_ready_backend", detail, rid, variant.name, extra={"Retry-After": "1"})
    line = f"GET /v2/models/{variant.triton_model}{suffix} HTTP/1.1\r\n".encode()
    try:
        return await entry[0].pool.request(line, b"", ep.timeout_s), None
    except (TimeoutError, UpstreamError, OSError) as exc:
        detail = f"{suffix.lstrip('/') or 'metadata'} from variant {variant.name!r}: {type(exc).__name__}"
        return None, error(502, "upstream_error", detail, rid, variant.name)


def _reply(status: int, rheaders: dict, body: bytes, rid: str, variant) -> tuple:
    content_type = rheaders.get("content-type", JSON_CT)
    if not header_safe(content_type):
        content_type = JSON_CT
    return status, {"Content-Type": content_type, "X-Request-Id": rid, "X-Model-Variant": variant.name}, body


async def model_metadata(gateway, request, name: str, version: str | None = None):
    rid = request_id(request.headers)
    ep, variant, response = _variant_for_read(gateway, request, name, version, rid)
    if ep is None:
        return response
    got, response = await _upstream_get(ep, variant, "", rid)
    if got is None:
        return response
    status, rheaders, body = got
    return _reply(status, rheaders, public_metadata(body, status, name, variant), rid, variant)


async def model_config(gateway, request, name: str, version: str | None = None):
    rid = request_id(request.headers)
    ep, variant, response = _variant_for_read(gateway, request, name, version, rid)
    if ep is None:
        return response
    got, response = await _upstream_get(ep, variant, "/config", rid)
    if got is None:
        return response
    status, rheaders, body = got
    return _reply(status, rheaders, public_config(body, status, name, variant), rid, variant)


async def variant_stats(ep, variant, rid: str):
    """(the variant's statistics summed over its replicas, as the endpoint's, None) or (None, response)."""
    entries = [entry for entry in variant.replicas if not entry[0].broken] or variant.replicas[:1]
    if not entries:
        return None, (await _upstream_get(ep, variant, "/stats", rid))[1]
    got = await asyncio.gather(*(_upstream_get(ep, variant, "/stats", rid, entry) for entry in entries))
    bodies = []
    for result, response in got:
        if result is None:
            return None, response
        status, _, body = result
        if status != 200:
            return None, (
                status,
                plain_headers(rid, variant.name),
                rename_error(body, None, variant.triton_model.encode(), ep.name.encode()),
            )
        bodies.append(body)
    return public_stats(bodies, ep.name, variant), None


async def model_stats(gateway, request, name: str, version: str | None = None):
    rid = request_id(request.headers)
    if name == "" and version is None:
        return await all_stats(gateway, request, rid)
    ep, variant, response = _variant_for_read(gateway, request, name, version, rid)
    if ep is None:
        return response
    stats, response = await variant_stats(ep, variant, rid)
    if stats is None:
        return response
    return 200, plain_headers(rid, variant.name), json.dumps({"model_stats": stats}).encode()


def readable_endpoints(table, headers) -> list:
    """The endpoints a caller may read without naming one: the public ones, and those its
    key is scoped to (no rate token is taken: this lists, it does not call)."""
    _, key = lookup_key(headers, table.keys)
    return [ep for ep in table.endpoints.values() if ep.auth.public or (key is not None and key.id in ep.auth.allowed)][
        :MAX_LISTED
    ]


async def all_stats(gateway, request, rid: str):
    table = gateway.table
    if table is None:
        return error(503, "no_routes", "no route table loaded yet", rid)
    stats = []
    for ep in readable_endpoints(table, request.headers):
        got, _ = await variant_stats(ep, ep.stable, rid)
        stats += got or []
    return 200, plain_headers(rid), json.dumps({"model_stats": stats}).encode()
