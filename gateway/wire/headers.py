"""What the gateway reads from a request's headers and what it forwards either way: the
deadline (X-Request-Timeout-Ms), the tensor headers passed to Triton, the ones passed back."""

from __future__ import annotations

from gateway.wire.faults import Problem
from gateway.wire.responses import IHCL

# Not Accept-Encoding: replies come back uncompressed, so naming the endpoint in them is a
# prefix swap (replies.py), and Triton spends no time compressing small replies.
FORWARD_REQUEST = (
    ("content-type", "Content-Type"),
    ("inference-header-content-length", IHCL),
    ("content-encoding", "Content-Encoding"),
)
FORWARD_RESPONSE = FORWARD_REQUEST
MAX_TIMEOUT_DIGITS = 7  # X-Request-Timeout-Ms up to 9999999 (then capped by the endpoint's timeout_ms)


def deadline_s(headers, endpoint_timeout_s: float):
    """The deadline in seconds: the endpoint's, shortened (never lengthened) by
    X-Request-Timeout-Ms; a Problem when that header is not a positive integer."""
    raw = headers.get("x-request-timeout-ms")
    if raw is None:
        return endpoint_timeout_s
    if not (raw.isascii() and raw.isdigit()) or len(raw) > MAX_TIMEOUT_DIGITS or int(raw) == 0:
        return Problem(
            400,
            "bad_timeout",
            f"X-Request-Timeout-Ms must be a positive integer of at most {MAX_TIMEOUT_DIGITS} digits, got {raw[:40]!r}",
        )
    return min(endpoint_timeout_s, int(raw) / 1000.0)


def forwarded_headers(headers):
    """(header bytes for Triton, Content-Encoding or None), or a Problem for a header that
    is not printable ASCII."""
    up_headers = b""
    encoding = None
    for key, out_key in FORWARD_REQUEST:
        value = headers.get(key)
        if value is not None:
            if not (value.isascii() and value.isprintable()):  # responses.header_safe, inlined (hot path)
                return Problem(400, "bad_header", f"{out_key} has characters other than printable ASCII")
            if key == "content-encoding":
                encoding = value
            up_headers += f"{out_key}: {value}\r\n".encode("latin-1")
    return up_headers, encoding


def reply_headers(upstream_headers: dict, rid: str, variant: str) -> dict:
    """The reply's headers: X-Request-Id, X-Model-Variant and the upstream's tensor headers
    that are printable ASCII."""
    out = {"X-Request-Id": rid, "X-Model-Variant": variant}
    for key, out_key in FORWARD_RESPONSE:
        value = upstream_headers.get(key)
        if value is not None and value.isascii() and value.isprintable():
            out[out_key] = value
    return out
