"""The inference gateway (data plane): its own asyncio process, `python -m gateway`.

Imports nothing from Django or the control-plane apps; it reads its route table over
HTTP (GATEWAY_ROUTES_URL) or from a file (--routes-file). See docs/gateway.md.

One package per role, each importing only those below it (pyproject.toml, gateway-layers):
process/ (server, workers, settings); the two request paths, v2/ (KServe v2, HTTP and
grpc/) and llm/ (the OpenAI API); table/ (the route table); keys/, kserve/ (the v2 codec)
and telemetry/; wire/ (protocol-neutral HTTP) and contracts/ (the one package the control
plane imports).
"""
