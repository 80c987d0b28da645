"""LLM endpoints through the real gateway against the real backends (harness/llm.py): the
project's tiny model on tritonserver (generate extension), `transformers serve` (an
OpenAI-compatible server, kind b) and the external-provider stand-in requiring a bearer key
(kind c; a fake, since providers are on the internet, harness/llm_provider.py says so),
each with the `openai` client, streamed and not; a provider failing before the first token
falls back to Triton in the same request, and so does one whose provider process is killed
while it holds the request; a client leaving mid-stream frees Triton and the provider."""

from __future__ import annotations

import json
import threading
import time

import openai
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from harness import llm
from harness.gateway import METRICS_TOKEN, start_gateway, stop_gateway
from harness.processes import wait_for

from .conftest import require_triton

pytestmark = pytest.mark.integration
PROVIDER_KEY = "sk-provider-for-gateway-tests"
CHAT = [{"role": "user", "content": "what is the canary?"}]


def backend(bid: str, kind: str, url: str, model: str, **extra) -> dict:
    return {"id": bid, "kind": kind, "urls": [url], "model": model, **extra}


def endpoint(name: str, backends: list, fallbacks=(), **extra) -> dict:
    variant = {"name": "stable", "model_version": "1", "role": "stable", "weight_bp": 10000, "backends": backends}
    return {"name": name, "auth": {"public": True}, "variants": [variant], "fallbacks": list(fallbacks), **extra}


@pytest.fixture(scope="module")
def backends(tmp_path_factory):
    require_triton()
    hf_dir = llm.tiny_llm_dir()
    work = tmp_path_factory.mktemp("llm-real")
    with (
        llm.TritonLLM(work / "triton", hf_dir) as triton,
        llm.ProviderStandIn(work / "provider", hf_dir, key=PROVIDER_KEY) as provider,
        llm.OpenAIServer(work / "openai", hf_dir) as server,
    ):
        triton.add_model("slow__v1__llm", delay_first_token_ms=0, delay_per_token_ms=250, max_streams=1)
        yield triton, provider, server


@pytest.fixture(scope="module")
def doomed(tmp_path_factory):
    """A provider of its own for the test that kills it."""
    with llm.ProviderStandIn(tmp_path_factory.mktemp("doomed"), llm.tiny_llm_dir(), key=PROVIDER_KEY) as provider:
        yield provider


@pytest.fixture(scope="module")
def gateway(backends, doomed, tmp_path_factory):
    triton, provider, server = backends
    work = tmp_path_factory.mktemp("llm-real-gateway")
    triton_backend = backend("triton", "triton", triton.url, llm.TINY_NAME)
    provider_backend = backend("provider", "openai", f"{provider.url}/v1", provider.model, secret="provider")
    document = {
        "version": "real-1",
        "endpoints": [],
        "secrets": [{"id": "provider", "value": PROVIDER_KEY}],
        "llm_endpoints": [
            endpoint("tiny-triton", [triton_backend]),
            endpoint("tiny-openai", [backend("serve", "openai", f"{server.url}/v1", server.model)]),
            endpoint("tiny-provider", [provider_backend]),
            endpoint("tiny-fallback", [provider_backend], fallbacks=[triton_backend]),
            endpoint("tiny-slow", [backend("slow", "triton", triton.url, "slow__v1__llm")]),
            endpoint(
                "tiny-doomed",
                [backend("doomed", "openai", f"{doomed.url}/v1", doomed.model, secret="provider")],
                fallbacks=[triton_backend],
            ),
        ],
    }
    routes = work / "routes.json"
    routes.write_text(json.dumps(document))
    proc, port = start_gateway(routes, work, GATEWAY_BREAKER_FAILURES="1000")
    yield f"http://127.0.0.1:{port}"
    stop_gateway(proc)


def client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)


@pytest.mark.parametrize("model", ["tiny-triton", "tiny-openai", "tiny-provider"])
def test_each_backend_kind_streamed_and_not(gateway, model):
    c = client(gateway)
    chunks = list(
        c.chat.completions.create(
            model=model, messages=CHAT, max_tokens=8, stream=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text and chunks[-1].usage.completion_tokens <= 8 and chunks[-1].usage.prompt_tokens > 3
    assert all(ch.model == model for ch in chunks)
    reply = c.completions.create(model=model, prompt="the ranker", max_tokens=6)
    assert reply.choices[0].text and reply.usage.completion_tokens <= 6 and reply.usage.prompt_tokens > 0


def test_a_provider_failing_before_the_first_token_falls_back_to_triton(gateway, backends):
    _, provider, _ = backends
    try:
        for change in ({"status": 500}, {"status": 429}, {"status": 200, "listening": False}):
            provider.control(**change)
            reply = client(gateway).chat.completions.create(model="tiny-fallback", messages=CHAT, max_tokens=4)
            assert reply.choices[0].message.content
    finally:
        provider.healthy()
    text = requests.get(f"{gateway}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=5).text
    reasons = {
        line.split('reason="')[1].split('"')[0]
        for line in text.splitlines()
        if line.startswith('gateway_llm_fallbacks_total{backend="provider",endpoint="tiny-fallback"')
    }
    assert reasons == {"5xx", "429", "connect"}


def test_a_client_leaving_mid_stream_frees_the_triton_model(gateway):
    """The slow model runs one stream at a time (250 ms a token; "the ranker" runs 26 tokens
    before the model ends it): had the gateway kept the abandoned stream going, the next
    request would wait ~6 s for it."""
    stream = client(gateway).completions.create(model="tiny-slow", prompt="the ranker", max_tokens=200, stream=True)
    for n, _ in enumerate(stream):
        if n == 2:
            break
    stream.close()
    started = time.monotonic()
    reply = client(gateway).completions.create(model="tiny-slow", prompt="the ranker", max_tokens=2)
    assert reply.choices[0].text
    assert time.monotonic() - started < 3.0


def test_a_client_leaving_mid_stream_is_seen_by_the_provider(gateway, backends):
    """The provider (a process of its own) counts a stream whose client went away once its
    generation stopped: the gateway closed the upstream connection when its client left."""
    _, provider, _ = backends
    before = provider.stats()["disconnected"]
    try:
        provider.control(token_delay_ms=200)
        stream = client(gateway).chat.completions.create(
            model="tiny-provider", messages=CHAT, max_tokens=60, stream=True
        )
        for n, _ in enumerate(stream):
            if n == 2:
                break
        stream.close()
        # the provider counts the leave, then ends its generation (its token thread, up to one
        # token's 200 ms later), and only then the request is no longer in flight
        wait_for(
            lambda: provider.stats()["disconnected"] == before + 1 and provider.stats()["in_flight"] == 0,
            timeout=10,
            what="the provider saw the leave and ended the stream",
        )
    finally:
        provider.healthy()


def test_a_backend_killed_before_its_first_token_falls_back_within_the_request(gateway, backends, doomed):
    """A provider process killed (SIGKILL) while it holds a request before the first token:
    the same request is answered by the endpoint's fallback (the Triton model), no error."""
    doomed.control(first_token_delay_ms=10_000)
    answer = {}

    def call():
        started = time.monotonic()
        answer["reply"] = client(gateway).chat.completions.create(model="tiny-doomed", messages=CHAT, max_tokens=4)
        answer["seconds"] = time.monotonic() - started

    caller = threading.Thread(target=call)
    caller.start()
    wait_for(lambda: doomed.stats()["in_flight"] == 1, timeout=20, what="the doomed provider holds the request")
    doomed.proc.kill()
    caller.join(30)
    assert answer["reply"].choices[0].message.content and answer["seconds"] < 10
    text = requests.get(f"{gateway}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=5).text
    rescued = [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "gateway_llm_rescued_total" and sample.labels["endpoint"] == "tiny-doomed"
    ]
    assert rescued == [({"endpoint": "tiny-doomed", "variant": "stable", "reason": "5xx"}, 1.0)], rescued
