"""Real processes for the gateway tests: tritonserver (serving/tritonserver.py), the
gateway (`python -m gateway` child process), and a route-table HTTP server in a thread
of the test process that plays the control plane's GET /api/v1/gateway/routes (token,
ETag, 304) — real HTTP between processes."""

from __future__ import annotations

import os

import pytest

from serving.tritonserver import TritonNotAvailable, find_binary


def require_triton() -> None:
    try:
        find_binary()
    except TritonNotAvailable as exc:
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(f"tritonserver needed in CI: {exc}")
        pytest.skip(f"tritonserver not available: {exc}")
