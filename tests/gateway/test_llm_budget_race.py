"""A token budget holds under a race: 1,000 concurrent requests against one key's budget, spread
over every worker of a real gateway (four processes on one port, connections landing where the
kernel puts them), admit no more than the budget allows, and every one it allows. The budget is
a month's (the refill during the race is a fraction of a token), each request's estimate is
exact (the backend's usage equals it: nothing is given back), so the budget admits exactly
budget // estimate requests.

The backend is the stand-in of tests/gateway/llm_upstream.py (a fake, on purpose: it answers
every request at once with exact token counts).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import Counter

import aiohttp
import pytest

from harness.gateway import GatewayProcess

from .llm_upstream import LlmUpstream

pytestmark = pytest.mark.integration
KEY = "sk-race-0123456789abcdef"
REQUESTS = 1000
WORKERS = 4
PROMPT, MAX_TOKENS = "a", 20  # estimate: 1 (a character / 4, rounded up) + 20; the stand-in's usage: 1 + 20
ESTIMATE = 21
ADMITTED = 100
MONTH_S = 30 * 86400


def _table(up: LlmUpstream) -> dict:
    key = {
        "id": "kr",
        "sha256": hashlib.sha256(KEY.encode()).hexdigest(),
        "team": "red",
        "token_budgets": [{"tokens": ADMITTED * ESTIMATE, "window_s": MONTH_S}],
    }
    backend = {"id": "b", "kind": "triton", "urls": [up.url], "model": "quick"}
    variant = {"name": "stable", "model_version": "1", "role": "stable", "weight_bp": 10000, "backends": [backend]}
    entry = {"name": "race", "auth": {"keys": ["kr"]}, "variants": [variant]}
    return {"version": "race", "endpoints": [], "keys": [key], "llm_endpoints": [entry]}


async def _race(base: str) -> list[tuple[int, str]]:
    body = {"model": "race", "prompt": PROMPT, "max_tokens": MAX_TOKENS}
    headers = {"Authorization": f"Bearer {KEY}"}
    connector = aiohttp.TCPConnector(limit=REQUESTS, force_close=True)  # a connection each: every worker gets some
    start = asyncio.Event()
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:

        async def one():
            await start.wait()
            async with session.post(f"{base}/v1/completions", json=body, headers=headers) as reply:
                answer = await reply.json()
                return reply.status, answer.get("error", {}).get("code", "")

        tasks = [asyncio.create_task(one()) for _ in range(REQUESTS)]
        await asyncio.sleep(0.2)
        start.set()
        return await asyncio.gather(*tasks)


def test_a_thousand_requests_racing_on_every_worker_get_exactly_the_budget(tmp_path):
    up = LlmUpstream().start()
    routes = tmp_path / "routes.json"
    routes.write_text(json.dumps(_table(up)))
    gateway = GatewayProcess(
        tmp_path, {"GATEWAY_ROUTES_FILE": str(routes), "GATEWAY_WORKERS": str(WORKERS), "GATEWAY_METRICS_OPEN": "1"}
    ).start(timeout=60)
    try:
        answers = asyncio.run(_race(gateway.url))
        counts = Counter(answers)
        assert counts[(200, "")] == ADMITTED, counts
        assert counts[(429, "token_budget")] == REQUESTS - ADMITTED, counts
        served = len([r for r in up.requests if r["path"].endswith("/generate_stream")])
        assert served == ADMITTED  # nothing admitted past the budget reached the backend either
        charged = gateway.metric("gateway_llm_tokens_total", key="kr")
        assert charged == ADMITTED * ESTIMATE
    finally:
        gateway.stop()
        up.stop()
