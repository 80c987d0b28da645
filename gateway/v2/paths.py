"""The paths below /v2/models/ (KServe v2 / Triton HTTP): how one is read into
(endpoint, version, action), shared by the dispatch (server.py) and the body bounds
(bodybounds.py), and the templates they stand for (server.http_routes lists every route the
dispatch serves; the adversarial suite's registry is held to it)."""

from __future__ import annotations

MODELS = "/v2/models/"
MODEL_ACTIONS = frozenset(("", "ready", "config", "stats", "infer", "generate", "generate_stream"))
POST_ACTIONS = frozenset(
    ("infer", "generate", "generate_stream")
)  # generate*: Triton's generate extension, LLM endpoints


def model_route(rest: str):
    """(endpoint, registry version or None, action) of a path below /v2/models/, or None.
    `stats` alone is Triton's every-model statistics (endpoint "")."""
    if rest == "stats":
        return "", None, "stats"
    name, _, tail = rest.partition("/")
    version = None
    if tail.startswith("versions/"):
        version, _, tail = tail[9:].partition("/")
        if not version:
            return None
    if not name or tail not in MODEL_ACTIONS:
        return None
    return name, version, tail


def model_templates() -> list[str]:
    """`METHOD /template` of every route model_route reads."""
    routes = ["GET /v2/models/stats"]
    for action in sorted(MODEL_ACTIONS):
        method = "POST" if action in POST_ACTIONS else "GET"
        tail = f"/{action}" if action else ""
        routes.append(f"{method} /v2/models/{{endpoint}}{tail}")
        routes.append(f"{method} /v2/models/{{endpoint}}/versions/{{version}}{tail}")
    return routes
