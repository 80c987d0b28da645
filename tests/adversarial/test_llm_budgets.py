"""The issue's overdraw: streaming and hanging up just before the last event, so the backend's
`usage` never arrives and the gateway charged its estimate (characters / 4), gave 1,722 real
tokens in 30 s on a 600 tokens/min key (1.9x). Here the same attack, on the project's tiny model
served by a real tritonserver (the platform's generate adapter counts with the model's own
tokenizer and says so on every event), is charged the tokens that really passed, and the key
gets no more than its budget, while blue's traffic holds (tolerance:
tests/adversarial/llm_tenants.py).

Real processes: tritonserver with the tiny LLM (20 ms a token, so a client can leave mid-stream),
tritonserver with blue's tensor model, the gateway (two workers), blue's pool stand-in.
"""

from __future__ import annotations

import json
import time

import pytest
import requests

from harness.llm import TINY_NAME, TritonLLM, tiny_llm_dir
from tests.adversarial.llm_tenants import RED_KEY, BlueTraffic, Stack, assert_unharmed, backend, key_doc, llm_entry
from tests.gateway.conftest import require_triton

pytestmark = [pytest.mark.integration]
TOKENS_PER_MINUTE = 600
MAX_TOKENS = 64
LEAVE_AFTER = 12  # content chunks read before hanging up (the stream has tens of tokens)
QUIET_S, ATTACK_S = 3.0, 10.0
CHAT = [{"role": "user", "content": "tell me about the canary"}]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    require_triton()
    stack = Stack(tmp_path_factory.mktemp("adversarial-llm-budgets"))
    llm = TritonLLM(tmp_path_factory.mktemp("tiny-llm"), tiny_llm_dir(), delay_per_token_ms=20).start()
    stack.tiny = llm
    yield stack
    llm.stop()
    stack.stop()


def hang_up_before_usage(base: str) -> tuple[int, int, int]:
    """One attack request: (status, content chunks read, characters read), the connection closed
    after LEAVE_AFTER chunks, before the usage event."""
    body = {
        "model": "red-tiny",
        "messages": CHAT,
        "max_tokens": MAX_TOKENS,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks = chars = 0
    with requests.post(
        f"{base}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {RED_KEY}"},
        stream=True,
        timeout=30,
    ) as reply:
        if reply.status_code != 200:
            return reply.status_code, 0, 0
        for line in reply.iter_lines():
            if not line.startswith(b"data: {"):
                continue
            event = json.loads(line[6:])
            if event.get("usage"):
                raise AssertionError("the usage arrived: the attack left too late")
            text = event["choices"][0]["delta"].get("content") if event.get("choices") else None
            if text:
                chunks, chars = chunks + 1, chars + len(text)
                if chunks >= LEAVE_AFTER:
                    break  # closing the response closes the connection
    return 200, chunks, chars


def test_hanging_up_before_usage_is_charged_the_real_tokens(stack):
    stack.install(
        llm_endpoints=[llm_entry("red-tiny", "red", [backend("t", "triton", stack.tiny.url, TINY_NAME)], ["kr"])],
        keys=[key_doc("kr", RED_KEY, "red", tokens_per_minute=TOKENS_PER_MINUTE)],
    )
    charged_before = stack.gateway.metric("gateway_llm_tokens_total", key="kr", kind="completion")
    blue = BlueTraffic(stack.url, stack.work)
    attempts = []
    try:
        blue.wait_warm()
        time.sleep(QUIET_S)
        started = time.time()
        deadline = time.monotonic() + ATTACK_S
        while time.monotonic() < deadline:
            attempts.append(hang_up_before_usage(stack.url))
            if attempts[-1][0] == 429:
                time.sleep(0.2)  # the budget's Retry-After is seconds; try again soon, as an abuser would
        ended = time.time()
    finally:
        records = blue.stop()
    assert_unharmed(records, (started - QUIET_S, started), (started, ended))
    served = [a for a in attempts if a[0] == 200]
    assert served and {a[0] for a in attempts} <= {200, 429}
    relayed = sum(chunks for _, chunks, _ in served)  # each content chunk is at least one token
    chars = sum(c for _, _, c in served)
    assert chars / 4 < relayed  # what the old estimate charged: the attack's profit
    time.sleep(1.0)  # the gateway settles the last hung-up request
    charged = stack.gateway.metric("gateway_llm_tokens_total", key="kr", kind="completion") - charged_before
    # at least what passed; at most what the backend could generate before it saw the hang-up
    assert relayed <= charged <= len(served) * MAX_TOKENS, (relayed, charged)
    # the budget holds: a full bucket, its refill over the attack, and one request's debt at most
    allowed = TOKENS_PER_MINUTE + TOKENS_PER_MINUTE / 60 * (ended - started) + MAX_TOKENS + 64
    assert relayed <= allowed, (relayed, allowed)
