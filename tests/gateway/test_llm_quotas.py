"""Per-key LLM limits (gateway/llm/quotas.py): tokens per minute estimated before and
corrected after, LLM requests in flight, the key's request rate; and that they hold across
the workers of one host (the shared mapping of gateway/keys/sharedlimits.py, used from a forked
process as a worker would)."""

from __future__ import annotations

import multiprocessing

import pytest

from gateway.keys import tenants
from gateway.keys.sharedlimits import SharedLimits
from gateway.llm import quotas
from gateway.llm.errors import LlmError


@pytest.fixture
def shared():
    store = SharedLimits(rows=2, capacity=64)
    tenants.share_limits(store)
    yield store
    tenants.share_limits(None)


def key(kid: str, **limits) -> tenants.Key:
    return tenants.Key({"id": kid, "sha256": "0" * 64, "team": "t", **limits})


def refusal(k, now: float, estimate: int) -> LlmError:
    with pytest.raises(LlmError) as caught:
        quotas.admit(k, now, estimate)
    return caught.value


def test_tokens_per_minute_estimated_then_corrected(shared):
    k = key("tpm", tokens_per_minute=600)  # 10 tokens a second
    first = quotas.admit(k, 100.0, 500)
    quotas.finish(first, 200)  # the backend counted 200: 300 of the estimate come back
    second = quotas.admit(k, 100.0, 400)  # 600 - 200 = 400 left
    quotas.finish(second, None)
    over = refusal(k, 100.0, 100)
    assert (over.status, over.code) == (429, "tokens_per_minute")
    assert over.retry_after_s == pytest.approx(10.0)  # 100 tokens at 10 a second
    quotas.finish(quotas.admit(k, 110.0, 100), 100)  # refilled


def test_a_request_larger_than_a_minute_waits_for_a_full_bucket(shared):
    k = key("big", tokens_per_minute=60)
    quotas.finish(quotas.admit(k, 0.0, 1000), 1000)  # a full bucket lets it through, leaving a debt
    assert refusal(k, 30.0, 10).retry_after_s > 0


def test_streams_in_flight_and_request_rate(shared):
    k = key("streams", max_streams=2)
    held = [quotas.admit(k, 0.0, 1), quotas.admit(k, 0.0, 1)]
    assert refusal(k, 0.0, 1).code == "max_streams"
    quotas.finish(held.pop(), 1)
    held.append(quotas.admit(k, 0.0, 1))
    for admission in held:
        quotas.finish(admission, 1)
    assert k.in_flight == 0
    rated = key("rated", rate_per_s=1, burst=1)
    quotas.finish(quotas.admit(rated, 0.0, 1), 1)
    assert refusal(rated, 0.1, 1).code == "rate_limited"


def _worker_takes(store: SharedLimits, row: int, result) -> None:
    store.set_row(row)
    tenants.share_limits(store)
    k = key("across", tokens_per_minute=600, max_streams=1)
    quotas.admit(k, 50.0, 550)  # held: this worker keeps its stream and its tokens
    result.put("taken")


def test_limits_hold_across_workers(shared):
    ctx = multiprocessing.get_context("fork")
    result = ctx.Queue()
    child = ctx.Process(target=_worker_takes, args=(shared, 1, result))
    child.start()
    assert result.get(timeout=10) == "taken"
    child.join(10)
    k = key("across", tokens_per_minute=600, max_streams=1)
    assert refusal(k, 50.0, 10).code == "max_streams"  # the other worker's stream counts here
    shared.forget_row(1)  # that worker is gone: its stream is given back (workers.py does this)
    assert refusal(k, 50.0, 100).code == "tokens_per_minute"  # its tokens were spent all the same
    quotas.finish(quotas.admit(k, 50.0, 50), 50)
