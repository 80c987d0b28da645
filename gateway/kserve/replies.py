"""KServe v2 shapes of what the gateway answers.

- A reply names the endpoint the client called, not the internal Triton model: Triton
  starts its JSON reply with `{"model_name":"<triton model>","model_version":"<n>"`;
  that prefix is swapped for the endpoint's name and the registry version (which
  variant served is in X-Model-Variant). One `startswith`, one `find` in the first
  bytes and one copy of the body (`python -m bench replies` measures it). When the
  request had an `id`, Triton writes it first (`{"id":"…","model_name":…`): the same
  pair is then found after it (a JSON string cannot hold an unescaped quote, so the
  pattern `"model_name":"<model>","model_version":"` cannot start inside the id), and a
  reply in any other key order is parsed and written again (a cold path). For a reply
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


def reply_prefixes(endpoint: str, triton_model: str, model_version: str) -> tuple[bytes, bytes]:
    """(what Triton's reply starts with up to the version's opening quote, what the client
    is shown instead up to and including the version's closing quote)."""
    triton = json.dumps({"model_name": triton_model, "model_version": ""}, separators=(",", ":"))[:-2].encode()
    public = json.dumps({"model_name": endpoint, "model_version": model_version}, separators=(",", ":"))[:-1].encode()
    return triton, public


def rename(data: bytes, reply_from: bytes, reply_to: bytes) -> bytes | None:
    """`data` with the public names, or None when it does not name Triton's model."""
    if data.startswith(reply_from):
        end = data.find(b'"', len(reply_from))  # the version's closing quote (a version has no quote)
        if end < 0:
            return None
        return reply_to + data[end + 1 :]
    if data[:1] != b"{":
        return None
    # {"id":"…","model_name":"<model>","model_version":"1",…}: the pair after the id
    pair = reply_from[1:]
    at = data.find(pair, 0, 1 << 16)  # the JSON head: an id is at most a few KiB
    if at > 0 and data[at - 1 : at] == b",":
        end = data.find(b'"', at + len(pair))
        if end > 0:
            return data[:at] + reply_to[1:] + data[end + 1 :]
    return _rename_parsed(data, reply_from, reply_to)


def _rename_parsed(data: bytes, reply_from: bytes, reply_to: bytes) -> bytes | None:
    """Any other key order: the JSON part parsed and written again with the public names
    (`data` here is the whole body, or the JSON part's bytes followed by binary tensors:
    only a body that parses whole is rewritten)."""
    try:
        document = json.loads(data)
    except ValueError:
        return None
    model = json.loads(reply_from[len(b'{"model_name":') : -len(b',"model_version":"')])
    if not isinstance(document, dict) or document.get("model_name") != model:
        return None
    public = json.loads(reply_to + b"}")
    document["model_name"], document["model_version"] = public["model_name"], public["model_version"]
    return json.dumps(document, separators=(",", ":")).encode()


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


def _renamed_strings(value, triton_model: str, endpoint: str):
    """Every string in a JSON value with the Triton model's name replaced by the endpoint's."""
    if isinstance(value, str):
        return value.replace(triton_model, endpoint) if triton_model in value else value
    if isinstance(value, list):
        return [_renamed_strings(item, triton_model, endpoint) for item in value]
    if isinstance(value, dict):
        return {k: _renamed_strings(v, triton_model, endpoint) for k, v in value.items()}
    return value


# Model configuration fields that name other models of the pool (ensemble steps): never shown
CONFIG_HIDDEN = ("ensemble_scheduling",)


def public_config(body: bytes, status: int, endpoint: str, variant) -> bytes:
    """Triton's model configuration under the endpoint's name, without what names other models."""
    if status != 200:
        return rename_error(body, None, variant.triton_model.encode(), endpoint.encode())
    try:
        config = json.loads(body)
    except ValueError:
        return body
    if not isinstance(config, dict):
        return body
    for hidden in CONFIG_HIDDEN:
        config.pop(hidden, None)
    config = _renamed_strings(config, variant.triton_model, endpoint)
    config["name"] = endpoint
    return json.dumps(config, separators=(",", ":")).encode()


def _sum_stats(total, more):
    """Triton's statistics of one model from two replicas, added: counts and ns summed,
    last_inference the latest, batch_stats matched by batch size."""
    if isinstance(total, dict) and isinstance(more, dict):
        out = dict(total)
        for key, value in more.items():
            if key not in out:
                out[key] = value
            elif key == "last_inference":
                out[key] = max(out[key], value, key=_number)
            elif key in ("name", "version"):
                continue
            elif key == "batch_stats":
                by_size = {b.get("batch_size"): b for b in out[key]}
                for b in value:
                    size = b.get("batch_size")
                    by_size[size] = _sum_stats(by_size[size], b) if size in by_size else b
                out[key] = list(by_size.values())
            else:
                out[key] = _sum_stats(out[key], value)
        return out
    if isinstance(total, (int, float)) and isinstance(more, (int, float)) and not isinstance(total, bool):
        return total + more
    if isinstance(total, str) and isinstance(more, str) and total.isdigit() and more.isdigit():
        return str(int(total) + int(more))  # protobuf's JSON form writes 64-bit integers as strings
    return total


def _number(value) -> int:
    return int(value) if isinstance(value, str) and value.isdigit() else value if isinstance(value, int) else 0


def public_stats(bodies: list[bytes], endpoint: str, variant) -> list[dict]:
    """The `model_stats` entries of one variant (Triton's replies from each of its
    replicas), summed, named as the endpoint and its registry version."""
    total = None
    for body in bodies:
        try:
            entries = json.loads(body).get("model_stats") or []
        except (ValueError, AttributeError):
            continue
        for entry in entries:
            if isinstance(entry, dict) and entry.get("name") == variant.triton_model:
                total = entry if total is None else _sum_stats(total, entry)
    if total is None:
        return []
    total = dict(total, name=endpoint, version=variant.model_version)
    return [total]
