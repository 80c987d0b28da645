"""Each real LLM backend streams the tiny model's tokens, first directly, then through the real
gateway (one started set of backends for both: each starts a process with torch):

- tritonserver with the decoupled python-backend model (generate extension, SSE);
- `transformers serve`, the OpenAI-compatible server of backend kind (b), via the `openai` client;
- the external-provider stand-in of kind (c) (harness/llm_provider.py: a fake, since providers
  are on the internet, which is not reachable here), via the `openai` client, with its key and
  the failures the gateway's fallback must survive;
- through the gateway, with the `openai` client, streamed and not: a provider failing before the
  first token falls back to Triton in the same request, and so does one whose provider process
  is killed while it holds the request; a client leaving mid-stream frees Triton and the provider.
"""

import json
import threading
import time

import openai
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from harness import llm
from harness.gateway import METRICS_TOKEN, start_gateway, stop_gateway
from harness.llm import OpenAIServer, ProviderStandIn, TritonLLM, sse_data, tiny_llm_dir
from harness.processes import wait_for
from tests.gateway.conftest import require_triton

pytestmark = pytest.mark.integration
CHAT = [{"role": "user", "content": "what is the canary?"}]
PROVIDER_KEY = "sk-test-provider"


@pytest.fixture(scope="module")
def hf_dir():
    return tiny_llm_dir()


@pytest.fixture(scope="module")
def triton(hf_dir, tmp_path_factory):
    require_triton()
    with TritonLLM(tmp_path_factory.mktemp("triton-llm"), hf_dir) as server:
        server.add_model("slow__v1__llm", delay_first_token_ms=400, delay_per_token_ms=40, max_streams=1)
        server.add_model("crawl__v1__llm", delay_first_token_ms=0, delay_per_token_ms=250, max_streams=1)
        server.add_older_model("older__v1__llm")
        yield server


def _stream(url: str, body: dict, *, stop_after: int | None = None) -> list[tuple[float, dict]]:
    """(seconds since the request, event) for each SSE event; leaves after `stop_after` events."""
    started = time.monotonic()
    events = []
    with requests.post(url, json=body, stream=True, timeout=30) as reply:
        assert reply.headers["Content-Type"].startswith("text/event-stream")
        for data in sse_data(reply):
            events.append((time.monotonic() - started, json.loads(data)))
            if stop_after and len(events) >= stop_after:
                break
    return events


def test_triton_streams_one_event_per_token_and_usage_at_the_end(triton):
    events = [e for _, e in _stream(triton.generate_stream_url, {"messages_json": json.dumps(CHAT), "max_tokens": 100})]
    *tokens, final = events
    assert len(tokens) > 20 and all(e["text_output"] for e in tokens)
    text = "".join(e["text_output"] for e in events)
    assert "canary" in text and "traffic" in text
    assert final["finish_reason"] == "stop"  # the model ended its turn before 100 tokens
    assert final["completion_tokens"] == len(tokens) + (1 if final["text_output"] else 0)
    assert 5 < final["prompt_tokens"] < 30
    # /generate with stream: false gives the same greedy text as one JSON
    whole = requests.post(
        triton.generate_url(triton.name, stream=False),
        json={"messages_json": json.dumps(CHAT), "max_tokens": 100, "stream": False},
        timeout=30,
    ).json()
    assert whole["text_output"] == text and whole["completion_tokens"] == final["completion_tokens"]


def test_triton_max_tokens_stop_strings_and_completion_prompts(triton):
    events = [e for _, e in _stream(triton.generate_stream_url, {"text_input": "the gateway", "max_tokens": 5})]
    assert events[-1]["finish_reason"] == "length" and events[-1]["completion_tokens"] == 5
    events = [e for _, e in _stream(triton.generate_stream_url, {"messages_json": json.dumps(CHAT), "stop": ["judge"]})]
    text = "".join(e["text_output"] for e in events)
    assert events[-1]["finish_reason"] == "stop" and "traffic and the" in text and "judge" not in text


@pytest.mark.parametrize(
    "body,message",
    [
        ({"text_input": "a", "messages_json": "[]"}, "exactly one of text_input"),
        ({"messages_json": "not json"}, "messages_json is not valid JSON"),
        ({"messages_json": '[{"content": "no role"}]'}, "string role"),
        ({"text_input": "the ranker", "max_tokens": 0}, "max_tokens must be at least 1"),
        ({"text_input": "the ranker", "temperature": 7.5}, "temperature must be between 0 and 2"),
        ({"text_input": "ranker " * 300}, "the context length is 256"),
    ],
)
def test_triton_refuses_a_bad_request_naming_the_input(triton, body, message):
    reply = requests.post(triton.generate_stream_url, json=body, timeout=30)
    assert reply.status_code == 400
    assert message in reply.text


def test_triton_slower_model_delays_the_first_token_and_each_next(triton):
    events = _stream(triton.generate_url("slow__v1__llm"), {"text_input": "the ranker", "max_tokens": 4})
    assert events[0][0] >= 0.4
    # the client sees the model's pacing through its own scheduling: a token read late shortens
    # the gap to the next one, but no token arrives before the model sent it, so each token k is
    # judged on its arrival after the first delay and k per-token delays (40 ms, 35 allowed)
    tokens = [at for at, _ in events[:-1]]
    assert len(tokens) >= 3 and all(at >= 0.4 + 0.035 * k for k, at in enumerate(tokens)), tokens


def test_triton_stops_generating_when_the_client_leaves(triton):
    """A model of its own that runs one stream at a time, 250 ms a token: "the ranker" runs
    26 tokens before the model ends it, so had the abandoned stream kept generating, the next
    request would wait ~6 s for its first token; and the abandoned request is ended, not left
    in flight (unloading waits for requests in flight)."""
    name = triton.add_model("cancel__v1__llm", delay_per_token_ms=250, max_streams=1)
    url = triton.generate_url(name)
    _stream(url, {"text_input": "the ranker", "max_tokens": 200}, stop_after=2)
    events = _stream(url, {"text_input": "the ranker", "max_tokens": 2})
    assert events[0][0] < 3.0, f"first token after {events[0][0]:.2f}s: the abandoned stream went on"
    triton.triton.unload(name, timeout=30)
    wait_for(lambda: _state(triton, name) == "UNAVAILABLE", timeout=8, what="the model unloaded (none in flight)")


def test_triton_sampling_options_seed_top_p_and_penalties(triton):
    """The OpenAI sampling options the gateway passes on: a seed makes sampling repeatable,
    top_p near 0 leaves only the likeliest token (greedy's text), a penalty changes the text,
    and an option out of range is refused naming it."""
    greedy = _text(triton, {"text_input": "the ranker", "max_tokens": 12})
    seeded = {"text_input": "the ranker", "max_tokens": 12, "temperature": 1.5, "seed": 7}
    assert _text(triton, seeded) == _text(triton, seeded)
    assert _text(triton, {**seeded, "top_p": 0.001}) == greedy
    # penalties act on the tokens generated so far: over 30 tokens. The tiny model is very sure of
    # some answers (either sign may leave a text as it was, and for some prompts both do: which
    # ones depends on the weights a machine trained), so of a few prompts one at least must change;
    # penalties ignored would change none
    changed = {}
    for prompt in ("the gateway", "the ranker", "a canary", "rollback"):
        plain = {"text_input": prompt, "max_tokens": 30}
        texts = {
            _text(triton, plain | {"presence_penalty": sign * 2.0, "frequency_penalty": sign * 2.0}) for sign in (1, -1)
        }
        changed[prompt] = texts - {_text(triton, plain)}
    assert any(changed.values()), changed
    reply = requests.post(triton.generate_stream_url, json={"text_input": "x", "top_p": 1.5}, timeout=30)
    assert reply.status_code == 400 and "top_p must be above 0 and at most 1" in reply.text


def test_triton_logprobs_are_the_chosen_tokens_log_softmax(triton):
    """With logprobs, each response carries the entries of the tokens its text covers: greedy,
    the chosen token is the likeliest of its top_logprobs and its logprob is that one's (<= 0);
    the tokens' text is the response's; top_logprobs past 20 or without logprobs is refused."""
    body = {"messages_json": json.dumps(CHAT), "max_tokens": 12, "logprobs": True, "top_logprobs": 3}
    events = [e for _, e in _stream(triton.generate_stream_url, body)]
    entries = [entry for e in events for entry in json.loads(e["logprobs"])]
    assert len(entries) == events[-1]["completion_tokens"] == 12
    for event in events:
        assert "".join(x["token"] for x in json.loads(event["logprobs"])) == event["text_output"]
    for entry in entries:
        assert len(entry["top_logprobs"]) == 3 and entry["logprob"] <= 0
        best = entry["top_logprobs"][0]
        assert (best["token"], best["logprob"]) == (entry["token"], entry["logprob"])
        assert entry["bytes"] == list(entry["token"].encode())
        assert [t["logprob"] for t in entry["top_logprobs"]] == sorted(
            (t["logprob"] for t in entry["top_logprobs"]), reverse=True
        )
    for wrong, message in (
        ({"top_logprobs": 21}, "top_logprobs must be between 0 and 20"),
        ({"logprobs": False}, "needs logprobs"),
    ):
        reply = requests.post(triton.generate_stream_url, json=body | wrong, timeout=30)
        assert reply.status_code == 400 and message in reply.text


def _text(triton, body: dict) -> str:
    return "".join(e.get("text_output", "") for _, e in _stream(triton.generate_stream_url, body))


def _state(triton, name: str) -> str:
    index = requests.post(f"{triton.url}/v2/repository/index", json={}, timeout=5).json()
    return next((m.get("state", "") for m in index if m["name"] == name), "")


# --- backend kind (b): a real OpenAI-compatible server --------------------------------------------
@pytest.fixture(scope="module")
def openai_server(hf_dir, tmp_path_factory):
    with OpenAIServer(tmp_path_factory.mktemp("openai-server"), hf_dir) as server:
        yield server


def test_openai_compatible_server_streams_chat_and_reports_usage(openai_server):
    with openai.OpenAI(base_url=f"{openai_server.url}/v1", api_key="unused", max_retries=0) as client:
        _chat_and_completion(client, openai_server.model)


def _chat_and_completion(client, model):
    assert model in [m.id for m in client.models.list().data]
    chunks = list(
        client.chat.completions.create(
            model=model,
            messages=CHAT,
            max_tokens=100,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) > 20 and "canary" in "".join(pieces)
    # transformers serve counts the end-of-turn token it generated too
    assert chunks[-1].usage.completion_tokens in (len(pieces), len(pieces) + 1)
    assert chunks[-1].usage.prompt_tokens > 5
    completion = client.completions.create(model=model, prompt="the gateway", max_tokens=6)
    assert completion.usage.completion_tokens == 6 and completion.choices[0].finish_reason == "length"


# --- backend kind (c): the external-provider stand-in ----------------------------------------------
@pytest.fixture(scope="module")
def provider(hf_dir, tmp_path_factory):
    with ProviderStandIn(tmp_path_factory.mktemp("provider"), hf_dir, key=PROVIDER_KEY) as server:
        yield server


@pytest.fixture
def provider_client(provider):
    provider.healthy()
    with openai.OpenAI(base_url=f"{provider.url}/v1", api_key=provider.key, max_retries=0, timeout=10) as client:
        yield client
    provider.healthy()


def test_provider_stand_in_streams_with_usage_and_needs_its_key(provider, provider_client):
    chunks = list(
        provider_client.chat.completions.create(
            model=provider.model, messages=CHAT, max_tokens=100, stream=True, stream_options={"include_usage": True}
        )
    )
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) > 20 and "canary" in "".join(pieces)
    assert chunks[-1].usage.completion_tokens == len(pieces)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    completion = provider_client.completions.create(model=provider.model, prompt="the gateway", max_tokens=6)
    assert completion.usage.completion_tokens == 6 and completion.choices[0].finish_reason == "length"
    stranger = openai.OpenAI(base_url=f"{provider.url}/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        stranger.chat.completions.create(model=provider.model, messages=CHAT)


def test_provider_stand_in_fails_as_told(provider, provider_client):
    ask = dict(model=provider.model, messages=CHAT, max_tokens=3)
    provider.control(status=429)
    with pytest.raises(openai.RateLimitError) as limited:
        provider_client.chat.completions.create(**ask)
    assert limited.value.response.headers["Retry-After"] == "1"
    provider.control(status=500)
    with pytest.raises(openai.InternalServerError):
        provider_client.chat.completions.create(**ask)
    provider.control(status=200, listening=False)
    with pytest.raises(openai.APIConnectionError):
        provider_client.chat.completions.create(**ask)
    provider.control(listening=True, first_token_delay_ms=500)
    started = time.monotonic()
    assert provider_client.chat.completions.create(**ask).usage.completion_tokens == 3
    assert time.monotonic() - started >= 0.5


def test_provider_stand_in_stops_generating_when_the_client_leaves(provider, provider_client):
    before = provider.stats()["disconnected"]
    provider.control(token_delay_ms=50)  # 200 tokens: 10 s, unless it stops when the client leaves
    stream = provider_client.chat.completions.create(model=provider.model, messages=CHAT, max_tokens=200, stream=True)
    for n, _ in enumerate(stream):
        if n == 2:
            break
    stream.close()
    wait_for(lambda: provider.stats()["disconnected"] > before, timeout=3, what="the provider to see the client leave")


# --- through the real gateway ------------------------------------------------------------------
def backend(bid: str, kind: str, url: str, model: str, **extra) -> dict:
    return {"id": bid, "kind": kind, "urls": [url], "model": model, **extra}


def endpoint(name: str, backends: list, fallbacks=(), **extra) -> dict:
    variant = {"name": "stable", "model_version": "1", "role": "stable", "weight_bp": 10000, "backends": backends}
    return {"name": name, "auth": {"public": True}, "variants": [variant], "fallbacks": list(fallbacks), **extra}


@pytest.fixture(scope="module")
def backends(triton, provider, openai_server):
    """The backends the direct tests above drove, now behind the gateway."""
    provider.healthy()
    return triton, provider, openai_server


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
        "secrets": [{"id": "provider", "value": PROVIDER_KEY, "origins": llm.origins(provider.url, doomed.url)}],
        "llm_rules": llm.LOOPBACK_RULES,
        "llm_endpoints": [
            endpoint("tiny-triton", [triton_backend]),
            endpoint("tiny-openai", [backend("serve", "openai", f"{server.url}/v1", server.model)]),
            endpoint("tiny-provider", [provider_backend]),
            endpoint("tiny-fallback", [provider_backend], fallbacks=[triton_backend]),
            endpoint("tiny-slow", [backend("slow", "triton", triton.url, "crawl__v1__llm")]),
            endpoint("tiny-older", [backend("older", "triton", triton.url, "older__v1__llm")]),
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


def test_benchmark_options_through_the_gateway_on_the_real_backends(gateway):
    """What guidellm sends with a fixed output length, through the gateway with the openai
    client: the Triton adapter takes ignore_eos and min_tokens (the chat answer, which the
    model ends before 100 tokens, runs to max_tokens), every chunk carries the usage so far
    (continuous_usage_stats), stop: null is no stop; the provider, which (as OpenAI's API)
    does not know ignore_eos, refuses it by name."""
    c = client(gateway)
    natural = c.chat.completions.create(model="tiny-triton", messages=CHAT, max_tokens=100)
    assert natural.choices[0].finish_reason == "stop" and natural.usage.completion_tokens < 100
    usage = {"include_usage": True, "continuous_usage_stats": True}
    for options in ({"ignore_eos": True, "stop": None}, {"min_tokens": 100}):
        chunks = list(
            c.chat.completions.create(
                model="tiny-triton",
                messages=CHAT,
                max_tokens=100,
                stream=True,
                stream_options=usage,
                extra_body=options,
            )
        )
        assert all(ch.usage is not None for ch in chunks)
        assert chunks[-1].usage.completion_tokens == 100, options
        assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "length"
    with pytest.raises(openai.BadRequestError) as caught:
        c.chat.completions.create(model="tiny-provider", messages=CHAT, max_tokens=4, extra_body={"ignore_eos": True})
    assert caught.value.body["code"] == "backend_refused" and "ignore_eos" in caught.value.body["message"]


def test_chat_logprobs_through_the_gateway_from_the_real_backends(gateway):
    """The openai client's logprobs / top_logprobs on the Triton model, streamed and not: greedy,
    each token is its own top alternative, logprobs <= 0, the tokens spell the text, streamed
    the same entries as not; the legacy completions' integer logprobs in its own shape (greedy,
    each token its likeliest alternative); a model without the input, and a server that takes the argument
    but returns none (the provider stand-in), refuse the request naming logprobs."""
    c = client(gateway)
    ask = dict(model="tiny-triton", messages=CHAT, max_tokens=10, temperature=0, logprobs=True, top_logprobs=2)
    reply = c.chat.completions.create(**ask)
    entries = reply.choices[0].logprobs.content
    assert len(entries) == reply.usage.completion_tokens == 10
    assert "".join(e.token for e in entries) == reply.choices[0].message.content
    for entry in entries:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 2
        assert (entry.top_logprobs[0].token, entry.top_logprobs[0].logprob) == (entry.token, entry.logprob)
    chunks = list(c.chat.completions.create(**ask, stream=True))
    streamed = [e for ch in chunks if ch.choices and ch.choices[0].logprobs for e in ch.choices[0].logprobs.content]
    assert [e.model_dump() for e in streamed] == [e.model_dump() for e in entries]
    for ch in chunks:
        if ch.choices and ch.choices[0].delta.content:
            assert "".join(e.token for e in ch.choices[0].logprobs.content) == ch.choices[0].delta.content
    legacy = c.completions.create(model="tiny-triton", prompt="the ranker", max_tokens=8, temperature=0, logprobs=2)
    shape = legacy.choices[0].logprobs
    assert "".join(shape.tokens) == legacy.choices[0].text and len(shape.tokens) == legacy.usage.completion_tokens
    for token, value, top in zip(shape.tokens, shape.token_logprobs, shape.top_logprobs, strict=True):
        assert value <= 0 and len(top) <= 2 and max(top, key=top.get) == token and top[token] == value
    assert shape.text_offset == [sum(len(t) for t in shape.tokens[:i]) for i in range(len(shape.tokens))]
    for model in ("tiny-older", "tiny-provider"):
        with pytest.raises(openai.BadRequestError) as caught:
            c.chat.completions.create(model=model, messages=CHAT, max_tokens=4, logprobs=True)
        body = caught.value.body
        assert (body["code"], body["param"]) == ("backend_refused", "logprobs"), body
        with pytest.raises(openai.BadRequestError) as caught:
            c.completions.create(model=model, prompt="the ranker", max_tokens=4, logprobs=1)
        assert caught.value.body["param"] == "logprobs"


def _llm_counts(gateway: str, endpoint: str) -> tuple[float, float]:
    """(requests, TTFT observations) of an endpoint in the gateway's metrics."""
    text = requests.get(f"{gateway}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=5).text
    counts = [0.0, 0.0]
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("endpoint") != endpoint:
                continue
            if sample.name == "gateway_llm_requests_total":
                counts[0] += sample.value
            elif sample.name == "gateway_llm_ttft_seconds_count":
                counts[1] += sample.value
    return counts[0], counts[1]


def test_n_choices_from_the_triton_model_are_its_seeded_generations(gateway):
    """n = 3 with a seed on the Triton model: three indexed choices, choice i the text of the
    same request for one choice with seed 40 + i, the usage their sum (the prompt once),
    streamed the same texts by index; one request and one first token in the metrics. The
    provider stand-in ignores n (it sends one choice): the request fails naming n, never a
    reply with fewer choices."""
    c = client(gateway)
    ask = dict(model="tiny-triton", messages=CHAT, max_tokens=8, temperature=1.0)
    singles = [c.chat.completions.create(**ask, seed=40 + i) for i in range(3)]
    before = _llm_counts(gateway, "tiny-triton")
    reply = c.chat.completions.create(**ask, seed=40, n=3)
    assert _llm_counts(gateway, "tiny-triton") == (before[0] + 1, before[1] + 1)
    assert [ch.index for ch in reply.choices] == [0, 1, 2]
    assert [ch.message.content for ch in reply.choices] == [s.choices[0].message.content for s in singles]
    assert len({ch.message.content for ch in reply.choices}) > 1  # sampled with different seeds
    assert reply.usage.completion_tokens == sum(s.usage.completion_tokens for s in singles)
    assert reply.usage.prompt_tokens == singles[0].usage.prompt_tokens
    chunks = list(c.chat.completions.create(**ask, seed=40, n=3, stream=True, stream_options={"include_usage": True}))
    texts = ["", "", ""]
    for ch in chunks:
        for choice in ch.choices:
            texts[choice.index] += choice.delta.content or ""
    assert texts == [ch.message.content for ch in reply.choices]
    assert chunks[-1].usage.completion_tokens == reply.usage.completion_tokens
    completion = c.completions.create(model="tiny-triton", prompt="the ranker", max_tokens=4, n=2)
    assert [ch.index for ch in completion.choices] == [0, 1] and all(ch.text for ch in completion.choices)
    with pytest.raises(openai.APIStatusError) as caught:
        c.chat.completions.create(model="tiny-provider", messages=CHAT, max_tokens=4, n=2)
    assert caught.value.status_code == 502 and "n=2" in caught.value.body["message"]


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
