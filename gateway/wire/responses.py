"""The gateway's own answers: (status, headers, body) tuples for the HTTP server, with the
headers every reply carries (X-Request-Id, X-Model-Variant) and its error bodies.

The gateway's own errors are `{"error": "<message>", "code": "<code>"}`: KServe v2 / Triton
clients read `error` (the protocol's error object); `code` is a stable, machine-readable
extension they ignore. (The OpenAI path wraps the same triple in OpenAI's shape,
gateway/llm/errors.py.)"""

from __future__ import annotations

import json
import math

JSON_CT = "application/json"
IHCL = "Inference-Header-Content-Length"


def error_body(code: str, message: str) -> bytes:
    return json.dumps({"error": message, "code": code}).encode()


def retry_after(seconds: float) -> str:
    """Retry-After in whole seconds (RFC 9110), at least 1."""
    return str(max(1, math.ceil(seconds)))


def plain_headers(rid: str, variant: str = "none", content_type: str = JSON_CT) -> dict:
    return {"Content-Type": content_type, "X-Request-Id": rid, "X-Model-Variant": variant}


def error(status: int, code: str, detail: str, rid: str, variant: str = "none", extra: dict | None = None):
    headers = plain_headers(rid, variant)
    if extra:
        headers.update(extra)
    return status, headers, error_body(code, detail)


def unavailable(detail: str, rid: str, variant: str, wait_s: float):
    """503 with Retry-After while no replica of the variant can serve (down, restarting,
    loading the model); KServe-shaped body ({"error": …}) with the gateway's code."""
    return error(503, "no_ready_backend", detail, rid, variant, extra={"Retry-After": retry_after(wait_s)})


def method_not_allowed(allow: str, path: str, rid: str):
    return error(405, "method_not_allowed", f"use {allow} for {path[:200]}", rid, extra={"Allow": allow})


def header_safe(value: str) -> bool:
    """What may be forwarded to Triton or echoed: printable ASCII only (no control characters, no obs-text)."""
    return value.isascii() and value.isprintable()
