"""The inference gateway (data plane): its own asyncio process, `python -m gateway`.

Imports nothing from Django or the control-plane apps; it reads its route table over
HTTP (GATEWAY_ROUTES_URL) or from a file (--routes-file). See docs/gateway.md.
"""
