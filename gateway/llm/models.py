"""GET /v1/models and GET /v1/models/{model} (the openai client's `models.list` and
`models.retrieve`): the LLM endpoints the caller may call — the public ones, and those its key
is scoped to — as OpenAI's model objects. One the caller may not call reads exactly as one that
does not exist (404 model_not_found), whatever credentials came with the request; credentials
that are no key are ignored, as a public model's call ignores them."""

from __future__ import annotations

from urllib.parse import unquote

import orjson

from gateway.llm.errors import LlmError, headers, model_not_found, reply

MAX_MODEL_ID = 256  # as a request's `model` (requests.py)


def _visible(ep, key) -> bool:
    return ep.auth.public or (key is not None and key.id in ep.auth.allowed)


def _object(name: str) -> dict:
    return {"id": name, "object": "model", "created": 0, "owned_by": "modelplane"}


def listing(table, known_key, request, rid: str):
    if table is None:
        return reply(LlmError(503, "no_routes", "no route table loaded yet", None, 1.0), rid)
    key = known_key(table, request.headers)
    data = [_object(name) for name, ep in sorted(table.llm.items()) if _visible(ep, key)]
    return 200, headers(rid), orjson.dumps({"object": "list", "data": data})


def one(table, known_key, request, rid: str, raw_id: str):
    """One model by its id (the path's rest, percent-decoded: an id may hold a slash)."""
    if table is None:
        return reply(LlmError(503, "no_routes", "no route table loaded yet", None, 1.0), rid)
    name = unquote(raw_id[: 3 * MAX_MODEL_ID])
    key = known_key(table, request.headers)  # looked up whether or not the name exists: the same work
    ep = table.llm.get(name)
    if ep is None or not _visible(ep, key):
        return reply(model_not_found(name), rid)
    return 200, headers(rid), orjson.dumps(_object(name))
