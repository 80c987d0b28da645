"""KServe v2 shapes of what the gateway answers.

- The gateway's own errors are `{"error": "<message>", "code": "<code>"}`: KServe v2 /
  Triton clients read `error` (the protocol's error object); `code` is a stable,
  machine-readable extension they ignore.
- A reply names the endpoint the client called, not the internal Triton model: Triton
  starts its JSON reply with `{"model_name":"<triton model>","model_version":"<n>"`;
  that prefix is swapped for the endpoint's name and the registry version (which
  variant served is in X-Model-Variant). One `startswith`, one `find` in the first
  bytes and one copy of the body (`python -m bench replies` measures it). For a reply
  with binary tensors (Inference-Header-Content-Length) the header length moves with
  the JSON part. The gateway does not forward Accept-Encoding: Triton would compress
  (python-requests asks for gzip on every call), which costs far more than the whole
  rewrite on inference-sized replies (same benchmark) and would have to be undone to
  rename; replies are sent uncompressed, which HTTP always allows.
- Model metadata (GET /v2/models/{endpoint}) names the endpoint and the stable's registry
  version, like the replies.
- Triton's own error replies (already `{"error": …}`) get the endpoint's name in place of
  the internal model name (a cold path: a plain replace).
"""

from __future__ import annotations

import json


def error_body(code: str, message: str) -> bytes:
    return json.dumps({"error": message, "code": code}).encode()


def reply_prefixes(endpoint: str, triton_model: str, model_version: str) -> tuple[bytes, bytes]:
    """(what Triton's reply starts with up to the version's opening quote, what the client
    is shown instead up to and including the version's closing quote)."""
    triton = json.dumps({"model_name": triton_model, "model_version": ""}, separators=(",", ":"))[:-2].encode()
    public = json.dumps({"model_name": endpoint, "model_version": model_version}, separators=(",", ":"))[:-1].encode()
    return triton, public


def rename(data: bytes, reply_from: bytes, reply_to: bytes) -> bytes | None:
    """`data` with the public names, or None when it does not start as Triton's reply does."""
    if not data.startswith(reply_from):
        return None
    end = data.find(b'"', len(reply_from))  # the version's closing quote (a version has no quote)
    if end < 0:
        return None
    return reply_to + data[end + 1:]


def public_reply(data: bytes, encoding: str | None, reply_from: bytes, reply_to: bytes) -> tuple[bytes, int] | None:
    """(the reply with public names, how much its JSON part grew), or None to pass it as
    is: a compressed reply (the gateway does not forward Accept-Encoding, so Triton only
    compresses if configured to on its own) or one not shaped as Triton's."""
    if encoding is not None:
        return None
    renamed = rename(data, reply_from, reply_to)
    return None if renamed is None else (renamed, len(renamed) - len(data))


def rename_error(data: bytes, encoding: str | None, triton_model: bytes, endpoint: bytes) -> bytes:
    """Triton's error reply with the endpoint's name in place of the internal model's."""
    return data if encoding is not None else data.replace(triton_model, endpoint)


def public_metadata(body: bytes, status: int, endpoint: str, variant) -> bytes:
    """Triton's model metadata with `name` the endpoint and `versions` the registry version."""
    if status != 200:
        return rename_error(body, None, variant.triton_model.encode(), endpoint.encode())
    try:
        meta = json.loads(body)
    except ValueError:
        return body
    if not isinstance(meta, dict):
        return body
    meta["name"], meta["versions"] = endpoint, [variant.model_version]
    return json.dumps(meta, separators=(",", ":")).encode()
