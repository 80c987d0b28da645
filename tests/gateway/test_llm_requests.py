"""The OpenAI request checks (gateway/llm/requests.py): what passes, and the parameter and
code of what does not."""

from __future__ import annotations

import orjson
import pytest

from gateway.llm.errors import LlmError
from gateway.llm.requests import MAX_MESSAGES, MAX_USER, fit_context, parse


def chat(**body):
    return orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hello"}], **body})


def refused(raw: bytes, *, is_chat: bool = True) -> tuple:
    with pytest.raises(LlmError) as caught:
        parse(raw, chat=is_chat)
    return caught.value.status, caught.value.param, caught.value.code


def test_a_chat_request_with_text_parts_and_options():
    raw = orjson.dumps(
        {
            "model": "demo-llm",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]},
            ],
            "max_completion_tokens": 7,
            "temperature": 0.5,
            "stop": "\n",
            "stream": True,
            "stream_options": {"include_usage": True},
            "user": "u-1",
            "seed": 3,
        }
    )
    req = parse(raw, chat=True)
    assert req.messages[1] == {"role": "user", "content": "hi there"}
    assert (req.max_tokens, req.temperature, req.stop, req.stream, req.include_usage) == (7, 0.5, ["\n"], True, True)
    assert req.rendered == "system: be brief\nuser: hi there\n"
    assert req.prompt_estimate == 8 + 8  # 31 characters / 4, rounded up, + 4 per message
    assert req.upstream_options() == {"max_tokens": 7, "temperature": 0.5, "seed": 3, "stop": ["\n"]}


def test_a_completion_takes_one_prompt():
    assert parse(orjson.dumps({"model": "m", "prompt": ["once"]}), chat=False).prompt == "once"
    assert refused(orjson.dumps({"model": "m", "prompt": ["a", "b"]}), is_chat=False) == (
        400,
        "prompt",
        "invalid_value",
    )
    assert refused(orjson.dumps({"model": "m", "prompt": "a", "messages": []}), is_chat=False)[2] == "unknown_parameter"


@pytest.mark.parametrize(
    ("raw", "param", "code"),
    [
        (b"{not json", None, "invalid_json"),
        (b"[1]", None, "invalid_json"),
        (orjson.dumps({"messages": [{"role": "user", "content": "x"}]}), "model", "invalid_value"),
        (chat(messages=[{"role": "tool", "content": "x"}]), "messages[0].role", "invalid_value"),
        (chat(messages=[{"role": "user", "content": 3}]), "messages[0].content", "invalid_value"),
        (
            chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
            "messages[0].content",
            "invalid_value",
        ),
        (chat(messages=[{"role": "user", "content": "x", "tool_calls": []}]), "messages[0]", "invalid_value"),
        (chat(messages=[{"role": "user", "content": "x"}] * (MAX_MESSAGES + 1)), "messages", "invalid_value"),
        (chat(n=2), "n", "invalid_value"),
        (chat(temperature=-0.1), "temperature", "invalid_value"),
        (chat(temperature=True), "temperature", "invalid_value"),
        (chat(top_p=1.5), "top_p", "invalid_value"),
        (chat(max_tokens=0), "max_tokens", "invalid_value"),
        (chat(max_tokens=1.5), "max_tokens", "invalid_value"),
        (chat(stop=["a", "b", "c", "d", "e"]), "stop", "invalid_value"),
        (chat(stop=["x" * 257]), "stop", "invalid_value"),
        (chat(stream="yes"), "stream", "invalid_value"),
        (chat(stream_options={"include_usage": True}), "stream_options", "invalid_value"),
        (chat(stream=True, stream_options={"other": 1}), "stream_options", "invalid_value"),
        (chat(user="u" * (MAX_USER + 1)), "user", "invalid_value"),
        (chat(tools=[]), "tools", "unknown_parameter"),
        (chat(logprobs=True), "logprobs", "unknown_parameter"),
    ],
)
def test_refused_with_the_parameter_named(raw, param, code):
    assert refused(raw) == (400, param, code)


def test_max_tokens_fits_the_context():
    req = parse(chat(), chat=True)  # "user: hello\n": 3 + 4 estimated prompt tokens
    fit_context(req, 100, 256)
    assert req.max_tokens == 93  # the default, capped to what the context leaves
    req = parse(chat(max_tokens=93), chat=True)
    fit_context(req, 100, 256)
    for max_tokens, code in ((94, "context_length_exceeded"), (101, "invalid_value")):
        req = parse(chat(max_tokens=max_tokens), chat=True)
        with pytest.raises(LlmError) as caught:
            fit_context(req, 100, 256)
        assert (caught.value.status, caught.value.code) == (400, code)
    req = parse(chat(messages=[{"role": "user", "content": "x" * 400}]), chat=True)
    with pytest.raises(LlmError) as caught:
        fit_context(req, 100, 256)
    assert caught.value.code == "context_length_exceeded" and caught.value.param == "messages"


def test_what_benchmark_tools_send_is_taken_and_passed_on():
    """guidellm's body with a fixed output length: continuous usage (only with include_usage,
    as vLLM), ignore_eos, min_tokens and stop: null; the backend options carry the two."""
    usage = {"include_usage": True, "continuous_usage_stats": True}
    req = parse(chat(stream=True, stream_options=usage, ignore_eos=True, min_tokens=4, stop=None), chat=True)
    assert (req.include_usage, req.continuous_usage, req.stop) == (True, True, [])
    fit_context(req, 4096, 16)
    options = req.upstream_options()
    assert options["ignore_eos"] is True and options["min_tokens"] == 4 and "stop" not in options
    alone = parse(chat(stream=True, stream_options={"continuous_usage_stats": True}), chat=True)
    assert not alone.continuous_usage and "ignore_eos" not in parse(chat(), chat=True).upstream_options()
    too_many = parse(chat(max_tokens=3, min_tokens=5), chat=True)
    with pytest.raises(LlmError) as caught:
        fit_context(too_many, 4096, 16)
    assert caught.value.param == "min_tokens"
    assert refused(chat(ignore_eos=1)) == (400, "ignore_eos", "invalid_value")
    assert refused(chat(n=2)) == (400, "n", "invalid_value")
    assert refused(chat(logprobs=True)) == (400, "logprobs", "unknown_parameter")
