"""The issue's flood: a tenant's own backend answers non-streamed calls with replies that never
end (100 concurrent calls took a gateway worker from 90 MB to 922 MB resident; the Kubernetes
limit is 512Mi; blue's tensor endpoint fell to 36 requests in 30 s). Here red's calls get a 502
`reply_too_large` past GATEWAY_LLM_MAX_REPLY_BYTES or a 429 `reply_buffer_full` once its key's
replies hold GATEWAY_LLM_BUFFER_BYTES_PER_KEY on the host, the gateway's workers stay within
their bound, and blue's traffic holds (tolerance: tests/adversarial/llm_tenants.py).

Real processes: tritonserver (blue's tensor model), the gateway (two workers), blue's pool
stand-in; red's flooding provider is the OpenAI-compatible stand-in (tests/gateway/llm_upstream.py,
`flood-<KiB>`: a fake on purpose, it plays the hostile provider) in a process of its own, so it
floods as fast as a provider would.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.llm import LOOPBACK_RULES
from harness.processes import stop
from tests.adversarial.llm_tenants import (
    BlueTraffic,
    Stack,
    assert_unharmed_interleaved,
    backend,
    llm_entry,
    red_chat,
    red_wave,
    stand_in,
)
from tests.gateway.conftest import require_triton

pytestmark = [pytest.mark.integration]
MAX_REPLY = 1 << 20
PER_KEY = 4 << 20
PER_TEAM = 6 << 20
WAVES, WAVE_SIZE, WAVE_PAUSE_S = 4, 100, 0.5  # the 100 concurrent calls, four times
QUIET_S = 1.5
# A worker's peak resident memory may grow by the team's share held as text, twice over (the
# pieces and the joined reply), plus what 100 connections' buffers and Python's allocator keep:
# 64 MiB over the share. Unbounded, the flood grew it by 832 MB.
GROWTH_BOUND = 2 * PER_TEAM + (64 << 20)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    require_triton()
    stack = Stack(
        tmp_path_factory.mktemp("adversarial-llm-memory"),
        GATEWAY_LLM_MAX_REPLY_BYTES=str(MAX_REPLY),
        GATEWAY_LLM_BUFFER_BYTES_PER_KEY=str(PER_KEY),
        GATEWAY_LLM_BUFFER_BYTES_PER_TEAM=str(PER_TEAM),
    )
    yield stack
    stack.stop()


def _workers(supervisor: int) -> list[int]:
    children = Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()
    return [int(pid) for pid in children]


def _kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def test_a_flooding_backend_costs_only_its_tenant(stack):
    flood, flood_url = stand_in(stack.work, "flood")
    try:
        stack.install(
            llm_endpoints=[
                # 64 KiB a token every 20 ms, 200 tokens: 12.5 MiB a reply, were it held whole
                llm_entry("red-flood", "red", [backend("f", "openai", f"{flood_url}/v1", "flood-64-20")], ["kr"]),
            ],
            llm_rules=LOOPBACK_RULES,
        )
        workers = _workers(stack.gateway.proc.pid)
        assert len(workers) == 2
        resident = {pid: _kib(pid, "VmRSS") for pid in workers}
        blue = BlueTraffic(stack.url, stack.work, stack.control.url)
        answers = []
        try:
            blue.wait_warm()
            quiet, attack = [], []
            for _ in range(WAVES):  # each wave after a quiet window of its own (assert_unharmed_interleaved)
                started = time.time()
                time.sleep(QUIET_S)
                quiet.append((started, time.time()))
                started = time.time()
                answers += red_wave(stack.url, "red-flood", WAVE_SIZE, max_tokens=200)
                time.sleep(WAVE_PAUSE_S)
                attack.append((started, time.time()))
        finally:
            records = blue.stop()
        assert_unharmed_interleaved(records, quiet, attack)
        codes = {(status, body.get("error", {}).get("code")) for status, body in answers}
        assert codes <= {(502, "reply_too_large"), (429, "reply_buffer_full")}, codes
        assert (429, "reply_buffer_full") in codes and (502, "reply_too_large") in codes
        for pid in workers:
            grown = (_kib(pid, "VmHWM") - resident[pid]) * 1024
            assert grown < GROWTH_BOUND, (pid, grown >> 20, "MiB")
        assert stack.gateway.metric("gateway_llm_refusals_total", reason="reply_buffer_full") > 0
        # everything was given back: a new call gets the whole share again
        assert red_chat(stack.url, "red-flood", max_tokens=20)[1]["error"]["code"] == "reply_too_large"
    finally:
        stop(flood)
