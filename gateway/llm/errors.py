"""The OpenAI error shape, `{"error": {"message", "type", "param", "code"}}`, as the gateway's
(status, headers, body) replies. Every reply carries X-Request-Id and X-Model-Variant."""

from __future__ import annotations

import orjson

from gateway.wire.responses import retry_after

TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_exceeded",
    499: "invalid_request_error",
    500: "server_error",
    502: "server_error",
    503: "server_error",
    504: "server_error",
}


class LlmError(Exception):
    """A request the gateway answers itself: status, code, message, and the parameter at fault."""

    def __init__(self, status: int, code: str, message: str, param: str | None = None, retry_after_s: float = 0.0):
        super().__init__(message)
        self.status, self.code, self.message, self.param, self.retry_after_s = (
            status,
            code,
            message,
            param,
            retry_after_s,
        )

    def body(self) -> bytes:
        return error_body(self.status, self.code, self.message, self.param)


def error_body(status: int, code: str, message: str, param: str | None = None) -> bytes:
    kind = TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return orjson.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}})


def headers(rid: str, variant: str = "none", content_type: str = "application/json") -> dict:
    return {"Content-Type": content_type, "X-Request-Id": rid, "X-Model-Variant": variant}


def reply(exc: LlmError, rid: str, variant: str = "none"):
    out = headers(rid, variant)
    if exc.status == 401:
        out["WWW-Authenticate"] = 'Bearer realm="inference"'
    if exc.status in (429, 503):
        out["Retry-After"] = retry_after(exc.retry_after_s)
    return exc.status, out, exc.body()


def reply_v2(exc: LlmError, rid: str, variant: str = "none"):
    """The same refusal in the KServe v2 shape ({"error": message, "code": code}), for Triton's
    generate routes on an LLM endpoint: what a Triton client reads."""
    status, out, _ = reply(exc, rid, variant)
    return status, out, orjson.dumps({"error": exc.message, "code": exc.code})


def model_not_found(model: str) -> LlmError:
    """One answer for a model that does not exist and one the caller may not call (no name oracle)."""
    return LlmError(
        404,
        "model_not_found",
        f"The model {model[:200]!r} does not exist or you do not have access to it.",
        "model",
    )
