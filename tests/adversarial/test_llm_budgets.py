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
    stack.stop()  # the gateway first: tritonserver waits (up to 30 s) for the HTTP connections it keeps
    llm.stop()


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
    blue = BlueTraffic(stack.url, stack.work, stack.control.url)
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


# --- Triton's generate extension on an LLM endpoint: the same door, the same rules ---------------------
def _generate(base: str, name: str, body, *, key: str | None = RED_KEY, stream: bool = False, version: str = ""):
    route = "generate_stream" if stream else "generate"
    path = f"{base}/v2/models/{name}{f'/versions/{version}' if version else ''}/{route}"
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return requests.post(path, data=data, headers={**headers, "Content-Type": "application/json"}, timeout=30)


def test_generate_routes_serve_under_the_keys_budgets_and_rules_of_the_endpoint(stack):
    """POST /v2/models/{endpoint}/generate[_stream] on red's tiny model, beside blue's traffic:
    Triton's reply shapes; another team's endpoint, no key, a versioned path, a stream that is no
    boolean, unknown fields, a parameters object naming a field twice, a prompt past the
    context and a body past the endpoint's bound are refused in the v2 shape naming what is
    wrong (a stream asked of /generate streams, as genai-perf expects); and the key's token budget stops a generate_stream flood as it stops chats."""
    tokens_per_minute = 400
    stack.install(
        llm_endpoints=[llm_entry("red-tiny", "red", [backend("t", "triton", stack.tiny.url, TINY_NAME)], ["kr"])],
        keys=[key_doc("kr", RED_KEY, "red", tokens_per_minute=tokens_per_minute)],
    )
    blue = BlueTraffic(stack.url, stack.work, stack.control.url)
    try:
        blue.wait_warm()
        time.sleep(QUIET_S)
        started = time.time()
        one = _generate(stack.url, "red-tiny", {"text_input": "the canary", "max_tokens": 8})
        assert one.status_code == 200, one.text
        reply = one.json()
        assert reply["model_name"] == "red-tiny" and reply["model_version"] == "1" and reply["text_output"]
        assert one.headers["X-Model-Variant"] == "stable"
        listed = _generate(stack.url, "red-tiny", {"text_input": ["one prompt"], "parameters": {"max_tokens": 4}})
        assert listed.status_code == 200, listed.text
        with _generate(stack.url, "red-tiny", {"text_input": "go", "max_tokens": 8, "stream": True}, stream=True) as s:
            assert s.status_code == 200 and s.headers["Content-Type"].startswith("text/event-stream")
            events = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith(b"data: ")]
        assert events and all(set(e) == {"model_name", "model_version", "text_output"} for e in events)
        assert "".join(e["text_output"] for e in events)

        def refused(reply, status: int, words: str) -> None:
            assert reply.status_code == status, (reply.status_code, reply.text)
            body = reply.json()
            assert set(body) == {"error", "code"} and words in body["error"], body

        foreign = _generate(stack.url, "blue-chat", {"text_input": "hi"})  # blue's endpoint, red's key
        refused(foreign, 404, "does not exist or you do not have access")
        assert _generate(stack.url, "no-such-model", {"text_input": "hi"}).json() == {
            **foreign.json(),
            "error": foreign.json()["error"].replace("blue-chat", "no-such-model"),
        }  # the same words for a name that does not exist: no oracle
        refused(_generate(stack.url, "red-tiny", {"text_input": "hi"}, key=None), 404, "does not exist")
        refused(
            _generate(stack.url, "blue-ctr", {"text_input": "hi"}, key=None), 404, "does not exist"
        )  # a tensor endpoint
        refused(_generate(stack.url, "red-tiny", {"text_input": "hi"}, version="1"), 404, "without a version")
        asked = _generate(stack.url, "red-tiny", {"text_input": "hi", "max_tokens": 4, "stream": True})
        assert asked.status_code == 200 and asked.headers["Content-Type"].startswith(
            "text/event-stream"
        )  # genai-perf's way
        refused(_generate(stack.url, "red-tiny", {"text_input": "hi", "stream": "yes"}), 400, "stream")
        refused(_generate(stack.url, "red-tiny", {"text_input": "hi", "tools": []}), 400, "tools")
        refused(
            _generate(stack.url, "red-tiny", {"text_input": "hi", "max_tokens": 4, "parameters": {"max_tokens": 4}}),
            400,
            "twice",
        )
        refused(_generate(stack.url, "red-tiny", {"text_input": 7}), 400, "text_input")
        refused(_generate(stack.url, "red-tiny", b"{not json"), 400, "not valid JSON")
        long_prompt = {"text_input": "word " * 4000, "max_tokens": 8}  # past the tiny model's context
        refused(_generate(stack.url, "red-tiny", long_prompt), 400, "context length")
        huge = b'{"text_input": "' + b"x" * (8 << 20) + b'"}'  # past any LLM bound: refused before it is read
        assert _generate(stack.url, "red-tiny", huge).status_code == 413
        statuses = []
        # 64 tokens a stream (ignore_eos): the bucket (400) and its refill over the attack hold
        # fewer than 20, whatever the machine's pace; refused or not, the flood goes on for the
        # whole attack window (blue is measured over it)
        deadline = time.monotonic() + ATTACK_S
        while time.monotonic() < deadline or (len(statuses) < 20 and 429 not in statuses):
            with _generate(
                stack.url, "red-tiny", {"text_input": "go", "max_tokens": MAX_TOKENS, "ignore_eos": True}, stream=True
            ) as s:
                statuses.append(s.status_code)
                if s.status_code == 429:
                    refused(s, 429, "")
                    assert s.headers["Retry-After"]
                else:
                    _ = s.content  # read to the end: the tokens are charged
        ended = time.time()
    finally:
        records = blue.stop()
    assert 429 in statuses, f"the budget of {tokens_per_minute} tokens/min never stopped {len(statuses)} streams"
    assert_unharmed(records, (started - QUIET_S, started), (started, ended))


# --- logprobs: the options' bounds, a backend that cannot, and the replies they inflate ----------------
def test_logprobs_past_their_bounds_or_on_a_backend_that_cannot_are_refused_by_name(stack):
    """Beside blue's traffic, on red's tiny model: top_logprobs past 20, not an integer or without
    logprobs, logprobs not a boolean, the legacy completions' integer logprobs past 5, and logprobs on a
    model written before the adapter took them are refused naming the parameter; the largest
    reply the options allow (top_logprobs 20 on every token) is served whole, counted in the
    reply's buffer, and charged its tokens like any other."""
    older = stack.tiny.add_older_model("older__v1__llm")
    tiny = backend("t", "triton", stack.tiny.url, TINY_NAME)
    stack.install(
        llm_endpoints=[
            llm_entry("red-tiny", "red", [tiny], ["kr"]),
            llm_entry("red-older", "red", [backend("o", "triton", stack.tiny.url, older)], ["kr"]),
        ],
        keys=[key_doc("kr", RED_KEY, "red", tokens_per_minute=100_000)],
    )
    auth = {"Authorization": f"Bearer {RED_KEY}"}

    def post(path: str, **body):
        return requests.post(f"{stack.url}/v1/{path}", json=body, headers=auth, timeout=30)

    def refused(reply, param: str, code: str) -> None:
        assert reply.status_code == 400, (reply.status_code, reply.text)
        error = reply.json()["error"]
        assert (error["param"], error["code"]) == (param, code), error

    charged_before = stack.gateway.metric("gateway_llm_tokens_total", key="kr", kind="completion")
    blue = BlueTraffic(stack.url, stack.work, stack.control.url)
    try:
        blue.wait_warm()
        time.sleep(QUIET_S)
        started = time.time()
        chat = {"model": "red-tiny", "messages": CHAT, "max_tokens": 4}
        refused(post("chat/completions", **chat, logprobs=True, top_logprobs=21), "top_logprobs", "invalid_value")
        refused(post("chat/completions", **chat, logprobs=True, top_logprobs=1e9), "top_logprobs", "invalid_value")
        refused(post("chat/completions", **chat, logprobs=True, top_logprobs="20"), "top_logprobs", "invalid_value")
        refused(post("chat/completions", **chat, top_logprobs=5), "top_logprobs", "invalid_value")
        refused(post("chat/completions", **chat, logprobs="yes"), "logprobs", "invalid_value")
        refused(post("completions", model="red-tiny", prompt="go", logprobs=6), "logprobs", "invalid_value")
        refused(post("completions", model="red-tiny", prompt="go", logprobs=True), "logprobs", "invalid_value")
        older_chat = {**chat, "model": "red-older"}
        refused(post("chat/completions", **older_chat, logprobs=True), "logprobs", "backend_refused")
        widest = post("chat/completions", **{**chat, "max_tokens": MAX_TOKENS}, logprobs=True, top_logprobs=20)
        assert widest.status_code == 200, widest.text
        reply = widest.json()
        entries = reply["choices"][0]["logprobs"]["content"]
        assert len(entries) == reply["usage"]["completion_tokens"] and entries
        assert all(len(e["top_logprobs"]) == 20 and e["logprob"] <= 0 for e in entries)
        ended = time.time()
    finally:
        records = blue.stop()
    assert_unharmed(records, (started - QUIET_S, started), (started, ended))
    time.sleep(0.5)
    charged = stack.gateway.metric("gateway_llm_tokens_total", key="kr", kind="completion") - charged_before
    assert charged == reply["usage"]["completion_tokens"]  # the refusals cost nothing; the reply its tokens


def test_n_at_its_bound_is_reserved_and_charged_n_times_and_past_it_refused(stack):
    """Beside blue's traffic: n past 8 is refused naming n; n = 8 (eight generations on red's
    tiny model, every one to max_tokens) is served as eight indexed choices and charged its
    summed usage, so the next n = 8 (its reservation is 8 x the estimate) no longer fits the
    key's budget while one choice still does."""
    tokens_per_minute = 1000
    stack.install(
        llm_endpoints=[llm_entry("red-tiny", "red", [backend("t", "triton", stack.tiny.url, TINY_NAME)], ["kr"])],
        keys=[key_doc("kr", RED_KEY, "red", tokens_per_minute=tokens_per_minute)],
    )
    auth = {"Authorization": f"Bearer {RED_KEY}"}
    chat = {"model": "red-tiny", "messages": CHAT, "max_tokens": MAX_TOKENS, "ignore_eos": True}

    def post(**extra):
        return requests.post(f"{stack.url}/v1/chat/completions", json=chat | extra, headers=auth, timeout=60)

    charged_before = stack.gateway.metric("gateway_llm_tokens_total", key="kr")
    blue = BlueTraffic(stack.url, stack.work, stack.control.url)
    try:
        blue.wait_warm()
        time.sleep(QUIET_S)
        started = time.time()
        for wrong in (9, 1000, 0):
            past = post(n=wrong)
            assert past.status_code == 400 and past.json()["error"]["param"] == "n", past.text
        widest = post(n=8, seed=1)
        assert widest.status_code == 200, widest.text
        reply = widest.json()
        assert [c["index"] for c in reply["choices"]] == list(range(8))
        assert reply["usage"]["completion_tokens"] == 8 * MAX_TOKENS
        again = post(n=8)  # 8 x (prompt + 64) reserved: more than the ~470 tokens left
        assert again.status_code == 429 and again.json()["error"]["code"] == "tokens_per_minute", again.text
        assert post(n=1, max_tokens=8).status_code == 200
        ended = time.time()
    finally:
        records = blue.stop()
    assert_unharmed(records, (started - QUIET_S, started), (started, ended))
    time.sleep(0.5)
    charged = stack.gateway.metric("gateway_llm_tokens_total", key="kr") - charged_before
    assert charged >= reply["usage"]["total_tokens"] + 8, charged
