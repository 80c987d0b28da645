"""Each real LLM backend streams the tiny model's tokens, directly (no gateway):

- tritonserver with the decoupled python-backend model (generate extension, SSE);
- `transformers serve`, the OpenAI-compatible server of backend kind (b), via the `openai` client;
- the external-provider stand-in of kind (c) (harness/llm_provider.py: a fake, since providers
  are on the internet, which is not reachable here), via the `openai` client, with its key and
  the failures the gateway's fallback must survive.
"""

import json
import time

import openai
import pytest
import requests

from harness.llm import OpenAIServer, ProviderStandIn, TritonLLM, sse_data, tiny_llm_dir
from harness.processes import wait_for
from tests.gateway.conftest import require_triton

pytestmark = pytest.mark.integration
CHAT = [{"role": "user", "content": "what is the canary?"}]


@pytest.fixture(scope="module")
def hf_dir():
    return tiny_llm_dir()


@pytest.fixture(scope="module")
def triton(hf_dir, tmp_path_factory):
    require_triton()
    with TritonLLM(tmp_path_factory.mktemp("triton-llm"), hf_dir) as server:
        server.add_model("slow__v1__llm", delay_first_token_ms=400, delay_per_token_ms=40, max_streams=1)
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
    gaps = [b - a for (a, _), (b, _) in zip(events, events[1:-1])]
    assert gaps and min(gaps) >= 0.035


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
    # penalties act on the tokens generated so far: over 30 tokens (the tiny model is very sure
    # of some answers, so either sign may leave one text as it was, never both)
    plain = {"text_input": "the gateway", "max_tokens": 30}
    texts = {
        _text(triton, plain | {"presence_penalty": sign * 2.0, "frequency_penalty": sign * 2.0}) for sign in (1, -1)
    }
    assert texts - {_text(triton, plain)}, texts
    reply = requests.post(triton.generate_stream_url, json={"text_input": "x", "top_p": 1.5}, timeout=30)
    assert reply.status_code == 400 and "top_p must be above 0 and at most 1" in reply.text


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
    with ProviderStandIn(tmp_path_factory.mktemp("provider"), hf_dir, key="sk-test-provider") as server:
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
