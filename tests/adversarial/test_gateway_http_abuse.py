"""HTTP transport abuse on a real gateway in front of a real tritonserver, beside a second
tenant's HTTP traffic (127.0.0.1: keep-alive, and a new connection every 10 requests) held to
harness/abuse.py's tolerance (success >= 99%, p50 <= 2x + 5 ms, p99 <= 4x + 100 ms of the same
tenant alone, measured just before). Each abuser has its own loopback address.

- connection hoarding: one client opening 8,400 idle connections once made 105 of 148 other
  clients' new connections fail; now it holds GATEWAY_MAX_CONNECTIONS_PER_CLIENT and the rest
  are 429 `too_many_connections`; two hoarders that together fill GATEWAY_MAX_CONNECTIONS lose
  their oldest idle connections to the tenant's new ones;
- big bodies: four clients sending 7-8 MB bodies (tensors for a 13-float model, or a prompt
  for a 4,096-token model), 10 a second each, once took blue's p50 from 5 to 179 ms; now each
  is a 413 naming the endpoint's bound from its Content-Length (chunked: as soon as it passes
  the bound), before the body is parsed (a flood of requests, big or small, is another class);
- slowloris: 400 connections sending their head a byte every 0.5 s end 408 at the receive
  timeout (2 s here).
"""

from __future__ import annotations

import time

import pytest
import requests

from harness.abuse import Honest, harm, start_stack
from harness.abusers import Abuser, big_body, close_all, hoard, niced, slowloris
from tests.gateway.conftest import require_triton

pytestmark = pytest.mark.integration

MAX_CONNECTIONS = 1024
# Each big-body abuser starts a 7-8 MB body 10 times a second (~600 Mbit/s of it offered): before
# the bound each cost 0.6-2.2 s of the gateway's CPU; now it is answered from its head.
BODY_EVERY_S = 0.1
PER_CLIENT = 256


@pytest.fixture(scope="module")
def stack():
    require_triton()
    stack = start_stack(
        GATEWAY_MAX_CONNECTIONS=str(MAX_CONNECTIONS),
        GATEWAY_MAX_CONNECTIONS_PER_CLIENT=str(PER_CLIENT),
        GATEWAY_MAX_BODY_BYTES=str(8 << 20),
        GATEWAY_IDLE_TIMEOUT_S="60",
    )
    yield stack
    stack.stop()


@pytest.fixture
def honest(stack):
    tenant = Honest(stack)
    tenant.start()
    time.sleep(2.5)  # the tenant alone first
    yield tenant
    tenant.finish()


def test_connection_hoarding_takes_only_the_hoarders_share(stack, honest):
    alone, mark = honest.since(0), honest.mark()
    held, outcomes = niced(hoard, stack.port, 8400, "127.0.0.2")
    try:
        time.sleep(2.0)
        beside = honest.since(mark)
    finally:
        close_all(held)
    assert outcomes["held"] == PER_CLIENT, outcomes
    assert outcomes.get("429", 0) == 8400 - PER_CLIENT, outcomes
    assert not harm(alone, beside), (harm(alone, beside), alone, beside, honest.errors)


def test_near_the_cap_the_oldest_idle_connections_make_room(stack, honest):
    """Hoarders on four addresses fill the gateway's cap with idle connections; the tenant's new
    connections close the oldest idle ones instead of being refused."""
    time.sleep(0.5)  # the previous hoarder's connections are gone
    alone, mark = honest.since(0), honest.mark()
    reaped_before = stack.metric("gateway_connections_reaped_total")
    hoards = [niced(hoard, stack.port, PER_CLIENT, f"127.0.0.{i}") for i in (3, 4, 5, 6)]
    try:
        time.sleep(2.0)
        beside = honest.since(mark)
        reaped = stack.metric("gateway_connections_reaped_total") - reaped_before
    finally:
        for held, _ in hoards:
            close_all(held)
    assert sum(outcomes["held"] for _, outcomes in hoards) >= MAX_CONNECTIONS * 7 // 8 - 1
    assert reaped > 0
    assert not harm(alone, beside), (harm(alone, beside), alone, beside, honest.errors)


def test_big_bodies_are_refused_before_they_are_read(stack, honest):
    refused = requests.post(
        f"{stack.url}/v2/models/ctr/infer", data=b" " * 7_000_000, headers={"Content-Type": "application/json"}
    )
    assert refused.status_code == 413
    assert refused.json()["code"] == "body_too_large"
    assert "the most endpoint 'ctr''s signature can need" in refused.json()["error"]
    prompt = requests.post(f"{stack.url}/v1/chat/completions", data=b" " * 7_000_000)
    assert prompt.status_code == 413 and "the most model 'chat' can need" in prompt.json()["error"]
    alone, mark = honest.since(0), honest.mark()
    abusers = [Abuser(big_body(stack.port, f"127.0.0.{10 + i}", 7_500_000), BODY_EVERY_S) for i in range(2)]
    abusers.append(Abuser(big_body(stack.port, "127.0.0.12", 7_000_000, path=b"/v1/chat/completions"), BODY_EVERY_S))
    abusers.append(Abuser(big_body(stack.port, "127.0.0.13", 8_000_000, chunked=True), BODY_EVERY_S))
    for abuser in abusers:
        abuser.start()
    # at least 4 s of abuse, and until each abuser has sent its 10 bodies (a busy host runs it slower)
    started = time.monotonic()
    while time.monotonic() - started < 4.0 or (
        min(sum(a.outcomes.values()) for a in abusers) < 10 and time.monotonic() - started < 60.0
    ):
        time.sleep(0.5)
    beside = honest.since(mark)
    for abuser in abusers:
        abuser.finish()
    for abuser in abusers:
        assert set(abuser.outcomes) == {413}, abuser.outcomes
        assert sum(abuser.outcomes.values()) >= 10
    assert not harm(alone, beside), (harm(alone, beside), alone, beside, honest.errors)


def test_slowloris_ends_at_the_receive_timeout(stack, honest):
    alone, mark = honest.since(0), honest.mark()
    abuser = Abuser(slowloris(stack.port, "127.0.0.20", 200, interval_s=0.5))
    abuser.start()
    time.sleep(4.0)
    beside = honest.since(mark)
    abuser.finish()
    assert abuser.outcomes.get(408, 0) >= 150, abuser.outcomes
    assert not harm(alone, beside), (harm(alone, beside), alone, beside, honest.errors)
