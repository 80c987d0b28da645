"""The OpenAI request checks (gateway/llm/requests.py): what passes, and the parameter and
code of what does not."""

from __future__ import annotations

import orjson
import pytest

from gateway.llm.errors import LlmError
from gateway.llm.generate import parse_generate
from gateway.llm.requests import MAX_MESSAGES, MAX_USER, fit_context, parse
from harness.hostile_json import variants


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
        (chat(n=9), "n", "invalid_value"),
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
        (chat(logprobs="yes"), "logprobs", "invalid_value"),
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


def test_n_choices_up_to_the_bound():
    """n 1..8 on chat and completions, passed to an OpenAI-compatible backend when above 1."""
    req = parse(chat(n=8), chat=True)
    fit_context(req, 4096, 16)
    assert req.n == 8 and req.upstream_options()["n"] == 8
    one = parse(chat(n=1), chat=True)
    fit_context(one, 4096, 16)
    assert one.n == 1 and "n" not in one.upstream_options()
    assert parse(chat(), chat=True).n == 1
    assert parse(orjson.dumps({"model": "m", "prompt": "a", "n": 3}), chat=False).n == 3
    for wrong in (0, 9, -1, 2.0, "2", True):
        assert refused(chat(n=wrong)) == (400, "n", "invalid_value"), wrong
    assert parse_generate(b'{"text_input": "a"}', "ep", stream=False).n == 1


def test_chat_logprobs_and_top_logprobs_are_checked_and_passed_on():
    """logprobs a boolean, top_logprobs 0..20 and only with logprobs (OpenAI's rules), on chat;
    the legacy completions' integer logprobs 0..5 (alternatives per token)."""
    req = parse(chat(logprobs=True, top_logprobs=20), chat=True)
    fit_context(req, 4096, 16)
    assert (req.logprobs, req.top_logprobs) == (True, 20)
    assert req.upstream_options() | {"max_tokens": 0} == {"max_tokens": 0, "logprobs": True, "top_logprobs": 20}
    plain = parse(chat(logprobs=False), chat=True)
    fit_context(plain, 4096, 16)
    assert not plain.logprobs and "logprobs" not in plain.upstream_options()
    alone = parse(chat(logprobs=True), chat=True)
    fit_context(alone, 4096, 16)
    assert alone.upstream_options()["logprobs"] is True and "top_logprobs" not in alone.upstream_options()
    assert refused(chat(logprobs=1)) == (400, "logprobs", "invalid_value")
    assert refused(chat(logprobs=True, top_logprobs=21)) == (400, "top_logprobs", "invalid_value")
    assert refused(chat(logprobs=True, top_logprobs=-1)) == (400, "top_logprobs", "invalid_value")
    assert refused(chat(logprobs=True, top_logprobs=2.0)) == (400, "top_logprobs", "invalid_value")
    assert refused(chat(top_logprobs=2)) == (400, "top_logprobs", "invalid_value")
    assert refused(chat(logprobs=False, top_logprobs=2)) == (400, "top_logprobs", "invalid_value")
    legacy = parse(orjson.dumps({"model": "m", "prompt": "a", "logprobs": 5}), chat=False)
    fit_context(legacy, 4096, 16)
    assert (legacy.logprobs, legacy.top_logprobs, legacy.upstream_options()["logprobs"]) == (True, 5, 5)
    zero = parse(orjson.dumps({"model": "m", "prompt": "a", "logprobs": 0}), chat=False)
    assert (zero.logprobs, zero.top_logprobs) == (True, 0)
    for wrong in (6, -1, True, 2.0, "2"):
        completion = orjson.dumps({"model": "m", "prompt": "a", "logprobs": wrong})
        assert refused(completion, is_chat=False) == (400, "logprobs", "invalid_value"), wrong
    completion = orjson.dumps({"model": "m", "prompt": "a", "logprobs": 2, "top_logprobs": 2})
    assert refused(completion, is_chat=False) == (400, "top_logprobs", "unknown_parameter")
    assert parse_generate(b'{"text_input": "a"}', "ep", stream=False).logprobs is False


# --- Triton's generate extension: a completion in Triton's words ---------------------------------------
def test_a_generate_body_is_the_completion_it_stands_for():
    req = parse_generate(b'{"text_input": "hello", "max_tokens": 8, "temperature": 0.5}', "ep", stream=False)
    assert (req.generate, req.chat, req.model, req.prompt, req.max_tokens, req.temperature) == (
        True, False, "ep", "hello", 8, 0.5,
    )  # fmt: skip
    assert not req.stream
    # genai-perf sends the prompt as an array of one string; Triton's clients put options in `parameters`
    req = parse_generate(
        b'{"text_input": ["hi"], "parameters": {"max_tokens": 4, "ignore_eos": true}}', "ep", stream=True
    )
    assert (req.prompt, req.max_tokens, req.ignore_eos, req.stream) == ("hi", 4, True, True)
    assert parse_generate(b'{"text_input": "hi", "stream": true}', "ep", stream=True).stream
    # genai-perf's --endpoint-type generate --streaming posts "stream": true to /generate
    assert parse_generate(b'{"text_input": "hi", "stream": true}', "ep", stream=False).stream
    assert not parse_generate(b'{"text_input": "hi", "stream": false}', "ep", stream=False).stream


@pytest.mark.parametrize(
    "raw, stream, param, code",
    [
        (b'{"text_input": 3}', False, "text_input", "invalid_value"),
        (b'{"max_tokens": 3}', False, "text_input", "invalid_value"),
        (b'{"text_input": "x", "stream": "yes"}', True, "stream", "invalid_value"),
        (b'{"text_input": "x", "messages": []}', False, "messages", "unknown_parameter"),
        (b'{"text_input": "x", "model": "other"}', False, "model", "unknown_parameter"),
        (b'{"text_input": "x", "n": 2}', False, "n", "unknown_parameter"),
        (b'{"text_input": "x", "parameters": []}', False, "parameters", "invalid_value"),
        (b'{"text_input": "x", "parameters": {"logprobs": 1}}', False, "parameters.logprobs", "unknown_parameter"),
        (
            b'{"text_input": "x", "parameters": {"text_input": "y"}}',
            False,
            "parameters.text_input",
            "unknown_parameter",
        ),
        (b'{"text_input": "x", "top_p": 1, "parameters": {"top_p": 1}}', False, "top_p", "invalid_value"),
        (b'{"text_input": "x", "max_tokens": 0}', False, "max_tokens", "invalid_value"),
        (b"[1]", False, None, "invalid_json"),
        (b"{", False, None, "invalid_json"),
    ],
)
def test_a_generate_body_is_refused_naming_what_is_wrong(raw, stream, param, code):
    with pytest.raises(LlmError) as caught:
        parse_generate(raw, "ep", stream=stream)
    assert (caught.value.status, caught.value.param, caught.value.code) == (400, param, code)


def test_a_generate_prompt_past_the_context_names_text_input():
    req = parse_generate(b'{"text_input": "' + b"x" * 400 + b'", "max_tokens": 8}', "ep", stream=False)
    with pytest.raises(LlmError) as caught:
        fit_context(req, 64, 16)
    assert (caught.value.code, caught.value.param) == ("context_length_exceeded", "text_input")


@pytest.mark.parametrize(
    "document, read",
    [
        (
            {
                "model": "m",
                "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}], "name": "a"}],
                "max_tokens": 4,
                "stop": ["x"],
                "stream": True,
                "stream_options": {"include_usage": True},
                "user": "u",
                "seed": 1,
            },
            lambda raw: parse(raw, chat=True),
        ),
        ({"model": "m", "prompt": ["hi"], "temperature": 0.5, "ignore_eos": True}, lambda raw: parse(raw, chat=False)),
        (
            {"text_input": ["hi"], "parameters": {"max_tokens": 4, "stop": ["x"]}},
            lambda raw: parse_generate(raw, "m", stream=True),
        ),
    ],
)
def test_any_json_value_anywhere_is_a_400_or_a_request_never_an_exception(document, read):
    """Each place of a valid body given each kind of JSON value: a 400 naming it, or a request."""
    for path, value, raw in variants(document):
        try:
            read(raw)
        except LlmError as exc:
            assert exc.status == 400, (path, value, exc.status)
