"""LLM endpoints through the real gateway process (`python -m gateway --routes-file`) with the
OpenAI Python client, against a backend speaking Triton's generate extension and the OpenAI
API (tests/gateway/llm_upstream.py: a stand-in until the project's real LLM servers are on
main; its docstring says so)."""

from __future__ import annotations

import hashlib
import http.client
import json
import socket
import time

import openai
import pytest
import requests

from gateway.contracts.feedback_rules import read_exposure_token, unit_tag
from harness.gateway import METRICS_TOKEN, GatewayProcess, start_gateway, stop_gateway
from harness.llm import LOOPBACK_RULES, origins
from serving.tritonserver import free_port

from .llm_upstream import LlmUpstream, fake_logprob

pytestmark = pytest.mark.integration

KEY_A = "sk-team-a-4f1c2b9e8d7a6b5c"
KEY_Q = "sk-team-q-0a9b8c7d6e5f4a3b"
KEY_B = "sk-team-b-1122334455667788"
KEY_W = "sk-team-w-8899aabbccddeeff"
PROVIDER_SECRET = "sk-provider-secret-value-42"
EXPOSURE_KEY = bytes(range(32))
OPERATOR = {"Authorization": f"Bearer {METRICS_TOKEN}"}


def _key(kid: str, key: str, team: str, **limits) -> dict:
    return {"id": kid, "sha256": hashlib.sha256(key.encode()).hexdigest(), "team": team, **limits}


def _endpoint(name: str, backends: list, *, auth=None, fallbacks=(), **extra) -> dict:
    variant = {"name": "stable", "model_version": "1", "role": "stable", "weight_bp": 10000, "backends": backends}
    return {
        "name": name,
        "auth": auth or {"public": True},
        "variants": [variant],
        "fallbacks": list(fallbacks),
        **extra,
    }


def _triton(bid: str, url: str, model: str = "tiny__v1__llm", **extra) -> dict:
    return {"id": bid, "kind": "triton", "urls": [url], "model": model, **extra}


def table(up: LlmUpstream, dead_url: str) -> dict:
    return {
        "version": "llm-1",
        "endpoints": [],
        "keys": [
            _key("ka", KEY_A, "team-a"),
            _key("kq", KEY_Q, "team-q", tokens_per_minute=60, max_streams=1),
            _key("kb", KEY_B, "team-b"),
        ],
        "secrets": [{"id": "provider", "value": PROVIDER_SECRET, "origins": origins(up.provider.url)}],
        "llm_rules": LOOPBACK_RULES,
        "llm_endpoints": [
            _endpoint("tri-llm", [_triton("tri", up.url)]),
            _endpoint(
                "oai-llm",
                [
                    {
                        "id": "provider",
                        "kind": "openai",
                        "urls": [f"{up.provider.url}/v1"],
                        "model": "gpt-stand-in",
                        "secret": "provider",
                        "cost_per_1k_prompt": 1.0,
                        "cost_per_1k_completion": 2.0,
                    }
                ],
                auth={"keys": ["ka"]},
            ),
            _endpoint(
                "fallback-llm",
                [_triton("dead", dead_url, connect_timeout_ms=200), _triton("broken", up.url, "fail-500", priority=1)],
                fallbacks=[_triton("rescue", up.url, "rescue")],
            ),
            _endpoint("json-llm", [_triton("plain", up.url, "json-1")], fallbacks=[_triton("sse", up.url)]),
            _endpoint("stall-llm", [_triton("stalled", up.url, "stall-3000")], fallbacks=[_triton("quick", up.url)])
            | {"first_token_timeout_ms": 300},
            _endpoint("slow-llm", [_triton("slow", up.url, "slow-50")]),
            _endpoint("strict-llm", [_triton("strict", up.url, "strict")]),
            _endpoint("pace-fast", [_triton("pf", up.url, "slow-2")]),
            _endpoint("pace-slow", [_triton("ps", up.url, "quick")], context_length=30000),
            _endpoint("die-llm", [_triton("dies", up.url, "die-2")], fallbacks=[_triton("unused", up.url)]),
            _endpoint("exp-llm", [_triton("e", up.url)], experiment="exp-7", exposure_token_key=EXPOSURE_KEY.hex()),
            _endpoint("quota-llm", [_triton("q", up.url)], auth={"keys": ["kq"]}, context_length=200),
            # one tenant's broken entry (its secret is not in the table): refused alone
            _endpoint("bad-llm", [_triton("x", up.url, secret="nowhere")]),
        ],
    }


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    work = tmp_path_factory.mktemp("llm-gateway")
    up = LlmUpstream(api_key=PROVIDER_SECRET).start()
    up.provider = LlmUpstream(api_key=PROVIDER_SECRET, twin_of=up).start()
    routes = work / "routes.json"
    routes.write_text(json.dumps(table(up, f"http://127.0.0.1:{free_port()}")))
    proc, port = start_gateway(routes, work)
    yield up, f"http://127.0.0.1:{port}", work
    stop_gateway(proc)
    up.stop()
    up.provider.stop()
    log = "\n".join(p.read_text() for p in work.glob("gateway-*.log"))
    assert PROVIDER_SECRET not in log


def client(base: str, key: str = "unused", **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, **kw)


def metric(base: str, name: str, **labels) -> float:
    text = requests.get(f"{base}/metrics", headers=OPERATOR, timeout=5).text
    total = 0.0
    for line in text.splitlines():
        series, _, value = line.rpartition(" ")
        if series.split("{")[0] == name and all(f'{k}="{v}"' in series for k, v in labels.items()):
            total += float(value)
    return total


def test_chat_and_completions_streamed_and_not_on_both_backend_kinds(stack):
    up, base, _ = stack
    c = client(base)
    reply = c.chat.completions.create(
        model="tri-llm", messages=[{"role": "user", "content": "hello there"}], max_tokens=4
    )
    assert reply.choices[0].message.content == "w0 w1 w2 w3 "
    assert reply.model == "tri-llm" and reply.choices[0].finish_reason == "length"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) == (2, 4, 6)
    sent = up.requests[-1]
    assert sent["path"] == "/v2/models/tiny__v1__llm/generate_stream"
    assert json.loads(sent["body"]["messages_json"]) == [{"role": "user", "content": "hello there"}]

    chunks = list(
        c.completions.create(
            model="tri-llm", prompt="a b c", max_tokens=3, stream=True, stream_options={"include_usage": True}
        )
    )
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == "w0 w1 w2 "
    assert chunks[-1].usage.prompt_tokens == 3 and chunks[-1].usage.completion_tokens == 3
    assert up.requests[-1]["body"]["text_input"] == "a b c"

    keyed = client(base, KEY_A)
    before = metric(base, "gateway_llm_tokens_total", endpoint="oai-llm", key="ka", kind="completion")
    stream = keyed.chat.completions.create(
        model="oai-llm", messages=[{"role": "user", "content": "x y"}], max_tokens=5, stream=True
    )
    deltas = [ch.choices[0].delta.content for ch in stream if ch.choices and ch.choices[0].delta.content]
    assert "".join(deltas) == "w0 w1 w2 w3 w4 "
    sent = up.requests[-1]
    assert sent["path"] == "/v1/chat/completions" and sent["body"]["model"] == "gpt-stand-in"
    assert sent["headers"]["Authorization"] == f"Bearer {PROVIDER_SECRET}"  # the provider's key, never the client's
    text = keyed.completions.create(model="oai-llm", prompt="p q r", max_tokens=2)
    assert text.choices[0].text == "w0 w1 " and text.usage.prompt_tokens == 3
    assert metric(base, "gateway_llm_tokens_total", endpoint="oai-llm", key="ka", kind="completion") == before + 7
    assert metric(base, "gateway_llm_cost_total", endpoint="oai-llm", key="ka") > 0
    assert metric(base, "gateway_llm_ttft_seconds_count", endpoint="oai-llm", variant="stable") >= 2

    stopped = c.completions.create(model="tri-llm", prompt="a", max_tokens=8, stop=["w2", "never"])
    assert (stopped.choices[0].text, stopped.choices[0].finish_reason) == ("w0 w1 ", "stop")  # applied by the gateway

    raw = requests.post(f"{base}/v1/completions", json={"model": "tri-llm", "prompt": "a", "max_tokens": 1}, timeout=5)
    assert raw.headers["X-Model-Variant"] == "stable" and len(raw.headers["X-Request-Id"]) == 32


def test_models_keys_and_no_name_oracle(stack):
    _, base, _ = stack
    anonymous = {m.id for m in client(base).models.list()}
    assert "tri-llm" in anonymous and "oai-llm" not in anonymous and "quota-llm" not in anonymous
    assert "oai-llm" in {m.id for m in client(base, KEY_A).models.list()}

    # a private model and a name that is not there read alike, whatever credentials come: none,
    # the README's placeholder (so a mistyped public name is named unknown, not a bad key),
    # another team's key B; for chat and for the openai client's models.retrieve
    answers = set()
    for key in ("unused-on-a-public-endpoint", KEY_B):
        c = client(base, key)
        for model in ("oai-llm", "no-such-model", "tri-lm"):
            for call in (
                lambda: c.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}]),
                lambda: c.models.retrieve(model),
            ):
                with pytest.raises(openai.NotFoundError) as caught:
                    call()
                body = caught.value.body
                answers.add((body["code"], body["type"], body["message"].replace(model, "M")))
    for model in ("oai-llm", "no-such-model"):  # no credentials at all
        chat = {"model": model, "messages": [{"role": "user", "content": "x"}]}
        for reply in (
            requests.post(f"{base}/v1/chat/completions", json=chat, timeout=5),
            requests.get(f"{base}/v1/models/{model}", timeout=5),
        ):
            assert reply.status_code == 404
            body = reply.json()["error"]
            answers.add((body["code"], body["type"], body["message"].replace(model, "M")))
    assert answers == {
        ("model_not_found", "invalid_request_error", "The model 'M' does not exist or you do not have access to it.")
    }
    assert client(base).models.retrieve("tri-llm").id == "tri-llm"
    assert client(base, KEY_A).models.retrieve("oai-llm").id == "oai-llm"
    health = requests.get(f"{base}/health", timeout=5)  # vLLM's health path, beside /healthz
    assert health.status_code == 200 and requests.get(f"{base}/healthz", timeout=5).status_code == 200


def test_benchmark_tool_options_reach_the_backend_or_are_refused_by_name(stack):
    """What guidellm sends with a fixed output length: stream_options.continuous_usage_stats
    (the usage in every chunk), ignore_eos, min_tokens and stop: null; passed to a backend that
    takes them, refused naming the input by one that does not (a Triton model without it)."""
    up, base, _ = stack
    options = {"ignore_eos": True, "min_tokens": 3, "stop": None}
    usage = {"include_usage": True, "continuous_usage_stats": True}
    for model, c in (("tri-llm", client(base)), ("oai-llm", client(base, KEY_A))):
        chunks = list(
            c.completions.create(
                model=model, prompt="a b", max_tokens=4, stream=True, stream_options=usage, extra_body=options
            )
        )
        texts = [ch for ch in chunks if ch.choices and ch.choices[0].text]
        assert len(texts) == 4 and all(ch.usage is not None for ch in chunks)
        assert [ch.usage.completion_tokens for ch in texts] == [1, 2, 3, 4]
        assert chunks[-1].usage.completion_tokens == 4 and chunks[-1].usage.prompt_tokens == 2
        sent = up.requests[-1]["body"]
        assert (sent["ignore_eos"], sent["min_tokens"]) == (True, 3) and "stop" not in sent
    with pytest.raises(openai.BadRequestError) as caught:
        client(base).completions.create(model="strict-llm", prompt="a", max_tokens=4, extra_body=options)
    body = caught.value.body
    assert body["code"] == "backend_refused" and "unexpected inference input 'ignore_eos'" in body["message"]
    assert "for model 'strict-llm'" in body["message"]  # the endpoint's name, never the backend's model
    with pytest.raises(openai.BadRequestError) as caught:
        client(base).completions.create(model="tri-llm", prompt="a", max_tokens=2, extra_body={"min_tokens": 5})
    assert caught.value.body["param"] == "min_tokens"


def test_chat_logprobs_relayed_in_openais_shape_from_both_backend_kinds(stack):
    """Each token's entry, streamed (with the chunk that carries its text) and not, from the
    adapter's JSON output (Triton) and the provider's choices[0].logprobs (OpenAI API); a
    Triton model without the input refuses, named."""
    up, base, _ = stack
    want = [fake_logprob(i, 2) for i in range(3)]
    for model, c in (("tri-llm", client(base)), ("oai-llm", client(base, KEY_A))):
        ask = dict(model=model, messages=[{"role": "user", "content": "a b"}], max_tokens=3)
        reply = c.chat.completions.create(**ask, logprobs=True, top_logprobs=2)
        assert reply.choices[0].message.content == "w0 w1 w2 "
        assert reply.choices[0].logprobs.model_dump()["content"] == want
        sent = up.requests[-1]["body"]
        assert (sent["logprobs"], sent["top_logprobs"]) == (True, 2)
        chunks = list(c.chat.completions.create(**ask, logprobs=True, top_logprobs=2, stream=True))
        texts = [ch.choices[0] for ch in chunks if ch.choices and ch.choices[0].delta.content]
        assert [t.logprobs.model_dump()["content"] for t in texts] == [[e] for e in want]
        assert c.chat.completions.create(**ask).choices[0].logprobs is None
        assert "logprobs" not in up.requests[-1]["body"]
    for model, c in (("tri-llm", client(base)), ("oai-llm", client(base, KEY_A))):  # the legacy shape
        legacy = {
            "tokens": ["w0 ", "w1 ", "w2 "],
            "token_logprobs": [0.0, -0.1, -0.2],
            "top_logprobs": [{"a0.0": -0.5}, {"a1.0": -0.5}, {"a2.0": -0.5}],
            "text_offset": [0, 3, 6],
        }
        reply = c.completions.create(model=model, prompt="a b", max_tokens=3, logprobs=1)
        assert reply.choices[0].logprobs.model_dump() == legacy
        chunks = list(c.completions.create(model=model, prompt="a b", max_tokens=3, logprobs=1, stream=True))
        parts = [ch.choices[0].logprobs for ch in chunks if ch.choices and ch.choices[0].text]
        assert [p.text_offset for p in parts] == [[0], [3], [6]]
        assert [p.tokens[0] for p in parts] == legacy["tokens"]
        sent = up.requests[-1]["body"]
        assert (sent["logprobs"], sent.get("top_logprobs")) == ((True, 1) if model == "tri-llm" else (1, None))
    with pytest.raises(openai.BadRequestError) as caught:
        client(base).chat.completions.create(
            model="strict-llm", messages=[{"role": "user", "content": "a"}], max_tokens=2, logprobs=True
        )
    body = caught.value.body
    assert (body["code"], body["param"]) == ("backend_refused", "logprobs")


def test_n_choices_from_both_backend_kinds_streamed_and_not(stack):
    """n = 3: Triton's three generations (seeds seed+i) and the provider's n, merged into choices
    by index, streamed (each chunk its choice's index, the role on each choice's first) and not;
    the usage sums the completions and counts the prompt once."""
    up, base, _ = stack
    for model, c in (("tri-llm", client(base)), ("oai-llm", client(base, KEY_A))):
        before = len(up.requests)
        ask = dict(model=model, messages=[{"role": "user", "content": "a b"}], max_tokens=3, n=3, seed=40)
        reply = c.chat.completions.create(**ask)
        assert [ch.index for ch in reply.choices] == [0, 1, 2]
        assert all(ch.message.content == "w0 w1 w2 " and ch.finish_reason == "length" for ch in reply.choices)
        assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (2, 9)
        sent = [r["body"] for r in up.requests[before:]]
        if model == "tri-llm":
            assert sorted(b["seed"] for b in sent) == [40, 41, 42] and all("n" not in b for b in sent)
        else:
            assert [b["n"] for b in sent] == [3]
        chunks = list(c.chat.completions.create(**ask, stream=True, stream_options={"include_usage": True}))
        texts = {i: "" for i in range(3)}
        for ch in chunks:
            for choice in ch.choices:
                texts[choice.index] += choice.delta.content or ""
        assert texts == {i: "w0 w1 w2 " for i in range(3)}
        roles = [ch.choices[0].index for ch in chunks if ch.choices and ch.choices[0].delta.role]
        assert sorted(roles) == [0, 1, 2]
        finishes = {
            ch.choices[0].index: ch.choices[0].finish_reason
            for ch in chunks
            if ch.choices and ch.choices[0].finish_reason
        }
        assert finishes == {0: "length", 1: "length", 2: "length"}
        assert chunks[-1].usage.completion_tokens == 9
        completion = c.completions.create(model=model, prompt="a b", max_tokens=2, n=2)
        assert [(ch.index, ch.text) for ch in completion.choices] == [(0, "w0 w1 "), (1, "w0 w1 ")]


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role", "invalid_value"),
        ({"messages": []}, "messages", "invalid_value"),
        ({"messages": [{"role": "user", "content": "x"}], "n": 9}, "n", "invalid_value"),
        ({"messages": [{"role": "user", "content": "x"}], "temperature": 3}, "temperature", "invalid_value"),
        ({"messages": [{"role": "user", "content": "x"}], "tools": []}, "tools", "unknown_parameter"),
        ({"messages": [{"role": "user", "content": "x"}], "logprobs": 1}, "logprobs", "invalid_value"),
        ({"messages": [{"role": "user", "content": "x"}], "ignore_eos": "yes"}, "ignore_eos", "invalid_value"),
        ({"messages": [{"role": "user", "content": "x"}], "min_tokens": -1}, "min_tokens", "invalid_value"),
        (
            {
                "messages": [{"role": "user", "content": "x"}],
                "stream": True,
                "stream_options": {"continuous_usage_stats": 1},
            },
            "stream_options.continuous_usage_stats",
            "invalid_value",
        ),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 5000}, "max_tokens", "invalid_value"),
        (
            {"messages": [{"role": "user", "content": "x" * 16000}], "max_tokens": 100},
            "messages",
            "context_length_exceeded",
        ),
    ],
)
def test_bad_requests_get_the_openai_error_shape(stack, body, param, code):
    _, base, _ = stack
    resp = requests.post(f"{base}/v1/chat/completions", json={"model": "tri-llm", **body}, timeout=5)
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert (error["param"], error["code"], error["type"]) == (param, code, "invalid_request_error")
    assert set(error) == {"message", "type", "param", "code"}


def test_token_quota_429_with_retry_after_and_streams_limit(stack):
    """Key q: 60 tokens a minute, one stream at a time. A request estimated at 3 + 50 tokens
    passes, and its real usage (1 + 50) is what the minute counts; the next one does not fit."""
    up, base, _ = stack
    c = client(base, KEY_Q)
    first = c.completions.create(model="quota-llm", prompt="abcdefghij", max_tokens=50)
    assert first.usage.total_tokens == 51
    with pytest.raises(openai.RateLimitError) as caught:
        c.completions.create(model="quota-llm", prompt="abcdefghij", max_tokens=50)
    assert caught.value.body["type"] == "rate_limit_exceeded" and caught.value.body["code"] == "tokens_per_minute"
    assert int(caught.value.response.headers["Retry-After"]) >= 1
    assert metric(base, "gateway_llm_tokens_total", endpoint="quota-llm", key="kq") == 51
    # per tenant: its requests by status (the 429 among them) and its time to first token
    assert metric(base, "gateway_tenant_requests_total", key="kq", endpoint="quota-llm", status="200") == 1
    assert metric(base, "gateway_tenant_requests_total", key="kq", endpoint="quota-llm", status="429") == 1
    assert metric(base, "gateway_llm_tenant_ttft_seconds_count", team="team-q", key="kq") == 1


def test_backend_dead_or_failing_before_first_token_falls_back_in_the_same_request(stack):
    up, base, _ = stack
    before = {
        r: metric(base, "gateway_llm_fallbacks_total", endpoint="fallback-llm", reason=r) for r in ("connect", "5xx")
    }
    t0 = time.monotonic()
    reply = client(base).chat.completions.create(
        model="fallback-llm", messages=[{"role": "user", "content": "x"}], max_tokens=2, stream=True
    )
    assert "".join(ch.choices[0].delta.content or "" for ch in reply if ch.choices) == "w0 w1 "
    assert time.monotonic() - t0 < 2.0
    assert up.requests[-1]["path"] == "/v2/models/rescue/generate_stream"  # the endpoint's fallback served
    for reason in ("connect", "5xx"):
        assert metric(base, "gateway_llm_fallbacks_total", endpoint="fallback-llm", reason=reason) == before[reason] + 1
    # the variant's own backends failed it: its failure for the judge, the reply the fallbacks'
    assert metric(base, "gateway_llm_rescued_total", endpoint="fallback-llm", variant="stable", reason="5xx") == 1
    assert metric(base, "gateway_llm_requests_total", endpoint="fallback-llm", variant="fallback", status="200") == 1
    assert metric(base, "gateway_llm_requests_total", endpoint="fallback-llm", variant="stable") == 0

    # a 200 that is not an event stream (JSON: the server ignored stream: true) is the backend's failure
    plain = client(base).completions.create(model="json-llm", prompt="x", max_tokens=2)
    assert plain.choices[0].text == "w0 w1 "
    assert metric(base, "gateway_llm_fallbacks_total", endpoint="json-llm", backend="plain", reason="5xx") == 1

    stalled = client(base).completions.create(model="stall-llm", prompt="x", max_tokens=1)
    assert stalled.choices[0].text == "w0 "  # first_token_timeout_ms 300: the stalled backend was left behind
    assert metric(base, "gateway_llm_fallbacks_total", endpoint="stall-llm", backend="stalled", reason="timeout") >= 1


def test_client_disconnect_mid_stream_cancels_the_upstream(stack):
    up, base, _ = stack
    cancelled = up.cancelled["slow-50"]
    body = json.dumps({"model": "slow-llm", "prompt": "x", "max_tokens": 200, "stream": True}).encode()
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        assert b"200 OK" in sock.recv(4096)
        time.sleep(0.2)  # a few tokens of 200 (50 ms apart)
    deadline = time.monotonic() + 5
    while up.cancelled["slow-50"] == cancelled and time.monotonic() < deadline:
        time.sleep(0.05)
    assert up.cancelled["slow-50"] == cancelled + 1  # the backend saw its stream closed long before its 10 s
    assert metric(base, "gateway_llm_requests_total", endpoint="slow-llm", status="499", fault="client") == 1

    body = json.dumps({"model": "slow-llm", "prompt": "x", "max_tokens": 200}).encode()  # not streamed: the same
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        time.sleep(0.3)
    deadline = time.monotonic() + 5
    while up.cancelled["slow-50"] == cancelled + 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert up.cancelled["slow-50"] == cancelled + 2
    assert metric(base, "gateway_llm_requests_total", endpoint="slow-llm", status="499", fault="client") == 2
    assert metric(base, "gateway_llm_streams_in_flight", endpoint="slow-llm") == 0


def test_a_deadline_that_passes_mid_generation_ends_the_call_streamed_or_not(stack):
    """The client's deadline (X-Request-Timeout-Ms) after the first token: a reply that is not
    streamed gets a 502 naming the deadline (the whole reply holds one timer), a stream ends with
    an error event; either way the backend's stream is closed at once, not left to its 10 s."""
    up, base, _ = stack
    cancelled = up.cancelled["slow-50"]
    headers = {"X-Request-Timeout-Ms": "400"}  # the first token at once, then 50 ms apart: 200 need 10 s
    started = time.monotonic()
    reply = requests.post(
        f"{base}/v1/completions",
        json={"model": "slow-llm", "prompt": "x", "max_tokens": 200},
        headers=headers,
        timeout=10,
    )
    assert reply.status_code == 502 and reply.json()["error"]["code"] == "upstream_error", reply.text
    assert "deadline passed during the generation" in reply.json()["error"]["message"]
    assert time.monotonic() - started < 5
    streamed = requests.post(
        f"{base}/v1/completions",
        json={"model": "slow-llm", "prompt": "x", "max_tokens": 200, "stream": True},
        headers=headers,
        timeout=10,
    )
    assert streamed.status_code == 200 and "deadline passed during the generation" in streamed.text
    deadline = time.monotonic() + 5
    while up.cancelled["slow-50"] < cancelled + 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert up.cancelled["slow-50"] == cancelled + 2
    assert metric(base, "gateway_llm_streams_in_flight", endpoint="slow-llm") == 0


def test_status_shows_llm_endpoints_without_secrets_and_refuses_the_bad_entry_alone(stack):
    _, base, _ = stack
    status = requests.get(f"{base}/status", headers=OPERATOR, timeout=5).json()
    assert PROVIDER_SECRET not in json.dumps(status)
    assert status["llm_endpoints"]["oai-llm"]["variants"]["stable"]["backends"][0]["secret"] == "provider"
    refused = {r["name"]: r["code"] for r in status["routes"]["refused"]}
    assert refused == {"bad-llm": "unknown_secret"}
    resp = requests.post(f"{base}/v1/completions", json={"model": "tri-llm", "prompt": "a", "max_tokens": 1}, timeout=5)
    assert resp.status_code == 200, resp.text  # the others are served


def test_a_backend_dying_after_the_first_token_ends_the_stream_with_an_error_not_a_retry(stack):
    up, base, _ = stack
    served = len(up.requests)
    stream = client(base).completions.create(model="die-llm", prompt="x", max_tokens=10, stream=True)
    texts = []
    with pytest.raises(openai.APIError, match="after its first token"):
        for chunk in stream:
            texts.append(chunk.choices[0].text)
    assert texts == ["w0 ", "w1 "]
    assert len(up.requests) == served + 1  # no second backend continued someone else's sentence
    assert metric(base, "gateway_llm_requests_total", endpoint="die-llm", status="502", fault="backend") == 1


def test_an_experiment_endpoint_signs_an_exposure_token(stack):
    _, base, _ = stack
    resp = requests.post(
        f"{base}/v1/chat/completions",
        json={"model": "exp-llm", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1, "user": "u-9"},
        timeout=5,
    )
    assert resp.status_code == 200
    claims = read_exposure_token(resp.headers["X-Exposure-Token"], {"exp-7": EXPOSURE_KEY}.get)
    assert (claims.experiment, claims.endpoint, claims.arm, claims.request_id) == (
        "exp-7",
        "exp-llm",
        "stable",
        resp.headers["X-Request-Id"],
    )
    assert claims.unit == unit_tag("u-9") and claims.expires_ms > claims.issued_ms  # the unit it was served to


def test_stream_and_token_limits_hold_across_two_workers(stack, tmp_path):
    """Two worker processes on one port (gateway/process/workers.py): connections land on either, and a
    key's one stream and its tokens per minute are the host's, not each worker's."""
    up, _, _ = stack
    routes = tmp_path / "routes.json"
    doc = table(up, f"http://127.0.0.1:{free_port()}")
    doc["keys"].append(_key("kw", KEY_W, "team-w", tokens_per_minute=300, max_streams=1))
    doc["llm_endpoints"].append(_endpoint("workers-llm", [_triton("s", up.url, "slow-100")], auth={"keys": ["kw"]}))
    doc["llm_endpoints"].append(_endpoint("workers-fast", [_triton("f", up.url)], auth={"keys": ["kw"]}))
    routes.write_text(json.dumps(doc))
    gateway = GatewayProcess(
        tmp_path, {"GATEWAY_ROUTES_FILE": str(routes), "GATEWAY_WORKERS": "2", "GATEWAY_METRICS_TOKEN": METRICS_TOKEN}
    ).start()
    try:
        taken_from = time.monotonic()  # the key's bucket refills from its first take on
        held = client(gateway.url, KEY_W).completions.create(
            model="workers-llm", prompt="x", max_tokens=20, stream=True
        )  # its first chunk is in: the stream is held for ~2 s
        codes = []
        for _ in range(8):  # new connections: both workers answer some of them
            with requests.Session() as session:
                resp = session.post(
                    f"{gateway.url}/v1/completions",
                    json={"model": "workers-llm", "prompt": "x", "max_tokens": 1},
                    headers={"Authorization": f"Bearer {KEY_W}", "Connection": "close"},
                    timeout=5,
                )
                codes.append((resp.status_code, resp.json()["error"]["code"]))
        assert codes == [(429, "max_streams")] * 8
        assert len(list(held)) > 1
        pids = set()
        spent = []
        for _ in range(8):
            with requests.Session() as session:
                resp = session.post(
                    f"{gateway.url}/v1/completions",
                    json={"model": "workers-fast", "prompt": "x", "max_tokens": 100},
                    headers={"Authorization": f"Bearer {KEY_W}", "Connection": "close"},
                    timeout=10,
                )
                spent.append(resp.status_code)
                status = session.get(f"{gateway.url}/status", headers=OPERATOR, timeout=5).json()
                pids.add(status["worker"]["pid"])
        # 300 tokens a minute: the stream took ~21, then two requests of ~101, then none but what
        # the bucket refilled meanwhile (5 tokens a second: one more request per ~20 s on a slow machine)
        refilled = int((time.monotonic() - taken_from) * 300 / 60 / 101)
        assert spent[:2] == [200, 200] and 429 in spent[2:] and spent.count(200) <= 2 + refilled, spent
        assert len(pids) == 2  # both workers served
    finally:
        gateway.stop()


def test_anonymous_callers_of_a_public_endpoint_share_one_cap_and_leave_the_others_alone(stack, tmp_path):
    """A public endpoint reads no key: its anonymous callers together hold at most
    GATEWAY_LLM_ANONYMOUS_STREAMS requests in flight on the host (both workers), so one client
    opening streams takes that endpoint's share, not the other endpoints' (llm/quotas.py)."""
    up, _, _ = stack
    routes = tmp_path / "routes.json"
    doc = table(up, f"http://127.0.0.1:{free_port()}")
    doc["llm_endpoints"].append(_endpoint("open-slow", [_triton("s", up.url, "slow-100")]))
    routes.write_text(json.dumps(doc))
    env = {
        "GATEWAY_ROUTES_FILE": str(routes),
        "GATEWAY_WORKERS": "2",
        "GATEWAY_METRICS_TOKEN": METRICS_TOKEN,
        "GATEWAY_LLM_ANONYMOUS_STREAMS": "2",
    }
    gateway = GatewayProcess(tmp_path, env).start()
    try:
        held = [
            client(gateway.url).completions.create(model="open-slow", prompt="x", max_tokens=20, stream=True)
            for _ in range(2)
        ]  # each has its first chunk: two streams held for ~2 s
        codes, others = [], []
        for _ in range(6):  # new connections: both workers answer some of them
            with requests.Session() as session:
                resp = session.post(
                    f"{gateway.url}/v1/completions",
                    json={"model": "open-slow", "prompt": "x", "max_tokens": 1},
                    headers={"Connection": "close"},
                    timeout=5,
                )
                codes.append((resp.status_code, resp.json()["error"]["code"], "Retry-After" in resp.headers))
                other = session.post(
                    f"{gateway.url}/v1/completions",
                    json={"model": "tri-llm", "prompt": "x", "max_tokens": 1},
                    headers={"Connection": "close"},
                    timeout=5,
                )
                others.append(other.status_code)
        assert codes == [(429, "max_streams", True)] * 6, codes
        assert "open-slow" in resp.json()["error"]["message"]
        assert others == [200] * 6  # another public endpoint is not that one's share
        assert all(len(list(stream)) > 1 for stream in held)
        resp = requests.post(
            f"{gateway.url}/v1/completions", json={"model": "open-slow", "prompt": "x", "max_tokens": 1}, timeout=10
        )
        assert resp.status_code == 200, resp.text  # the streams ended: their slots are free again
    finally:
        gateway.stop()


def test_a_slow_reader_sets_its_own_gaps_and_they_are_not_the_variants_itl(stack):
    """ITL is what the variant's backend paced: a client that stops reading fills its socket, the
    gateway waits for it to drain, and the gaps it set are counted in
    gateway_llm_itl_client_paced, not observed as inter-token latency (llm/call.py); a
    client that reads as the tokens come sets none."""
    _, base, _ = stack
    body = {"model": "pace-fast", "prompt": "x", "max_tokens": 500, "stream": True}
    with requests.post(f"{base}/v1/completions", json=body, stream=True, timeout=30) as fast:
        assert fast.status_code == 200 and len(list(fast.iter_lines())) > 500  # read as it comes
    assert metric(base, "gateway_llm_itl_seconds_count", endpoint="pace-fast") == 499
    assert metric(base, "gateway_llm_itl_client_paced_total", endpoint="pace-fast") == 0

    host, port = base.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    sock.connect((host, int(port)))
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.sock = sock
    # 20,000 tokens at once (~3 MB of events): more than the sockets and the writer's buffer hold
    slow_body = json.dumps(body | {"model": "pace-slow", "max_tokens": 20000})
    conn.request("POST", "/v1/completions", slow_body, {"Content-Type": "application/json"})
    slow = conn.getresponse()  # the first token is in
    assert slow.status == 200
    time.sleep(3.0)  # the client reads nothing: the gateway waits for it
    assert slow.read().count(b"data: ") > 20000
    conn.close()
    paced = metric(base, "gateway_llm_itl_client_paced_total", endpoint="pace-slow")
    seen = metric(base, "gateway_llm_itl_seconds_count", endpoint="pace-slow")
    assert paced >= 1 and paced + seen == 19999, (paced, seen)
    # no gap of the reader's 3 s pause is the variant's (without the rule, one of ~3 s would be)
    assert metric(base, "gateway_llm_itl_seconds_bucket", endpoint="pace-slow", le="1.0") == seen
