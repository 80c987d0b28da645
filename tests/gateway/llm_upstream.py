"""A stand-in LLM backend for the gateway's LLM tests: one aiohttp server (in a thread of the
test process, real HTTP to the gateway process) that speaks both backend protocols the
gateway calls, Triton's generate extension (POST /v2/models/{m}/generate_stream, SSE) and
the OpenAI API (POST /v1/chat/completions and /v1/completions with stream: true, usage in the
last chunk, optional bearer key as an external provider would require).

This is a fake, on purpose: the same behaviours are checked against the real servers
(tritonserver with the project's tiny model, `transformers serve`, the provider stand-in of
harness/llm.py) in tests/llm/test_backends.py, which takes ~80 s to start them; this one
starts in milliseconds, writes exact, known tokens (so quotas and usage are checked to the
token) and fails in ways a real server cannot be made to on cue (a connection dropped after
the n-th token). What the gateway must do with a backend is observable here: the server
records each request, and counts per model the streams whose client went away before the
end (`cancelled`). What a model does is in its name (the route table's backend `model`):

  fail-<status>  answers that status before any token;
  stall-<ms>     waits that long before the first token;
  slow-<ms>      waits that long between tokens;
  die-<n>        drops the connection after n tokens (a backend that dies mid-stream);
  json-<n>       answers 200 with a JSON body, not an event stream (a server that ignored
                 `stream: true`);
  flood-<kib>[-<ms>]  a hostile provider: each token's text is <kib> KiB (a reply that fills
                 memory), a token every <ms> (default: at once);
  leak-<status>  answers that status with a long body of internal details (a page whose words
                 must not reach the client; `LEAK` is a phrase in it);
  redirect       answers 307 to `redirect_to` (where a secret must not follow);
  strict         (Triton) refuses an input other than the adapter's first ones (text_input,
                 messages_json, max_tokens, sampling options, stop, stream) in Triton's words, as
                 a model without an ignore_eos or min_tokens input does;
  relay          forwards the request, headers included, to `relay_to` + its path (a backend that
                 leads back to the gateway: a loop) and answers what that answered;
  anything else  streams at once.

The "model" writes the words `w0 w1 w2 ...` (one per token), max_tokens of them; prompt
tokens are the prompt's whitespace-separated words. Asked for logprobs, each token's entry is
`fake_logprob(i, top)` (token `wi `, logprob -i/10, `top` alternatives `ai.j`): on Triton in
the adapter's `logprobs` output (a JSON string), on the OpenAI API in `choices[0].logprobs`.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter

import aiohttp
from aiohttp import web

from serving.tritonserver import free_port

LEAK = "internal-db-password=hunter2"
STRICT_INPUTS = frozenset(
    ("text_input", "messages_json", "max_tokens", "temperature", "top_p", "seed", "stop", "stream")
    + ("presence_penalty", "frequency_penalty")
)


def fake_logprob(i: int, top: int) -> dict:
    """The stand-in's log-probability entry of its i-th token."""
    entry = {"token": f"w{i} ", "logprob": -i / 10, "bytes": list(f"w{i} ".encode())}
    entry["top_logprobs"] = [{"token": f"a{i}.{j}", "logprob": -j - 0.5, "bytes": None} for j in range(top)]
    return entry


LEAK_BODY = (
    "<html><body><h1>Internal Server Error</h1><pre>\r\n" + f"{LEAK}\r\n" * 2000 + "</pre></body></html>"
).encode()


class LlmUpstream:
    def __init__(self, *, api_key: str | None = None, twin_of: LlmUpstream | None = None):
        """`twin_of`: another stand-in whose records this one shares (one list of requests in
        arrival order): a provider (kind openai) on a port of its own beside a "pool" (kind
        triton), since a pool's address is never a tenant backend's (gateway/llm/guard.py)."""
        self.port = free_port()
        self.api_key = api_key
        self.requests: list[dict] = [] if twin_of is None else twin_of.requests
        # model -> streams whose client left before the end
        self.cancelled: Counter = Counter() if twin_of is None else twin_of.cancelled
        self.completed: Counter = Counter() if twin_of is None else twin_of.completed
        self.provider: LlmUpstream | None = None  # the twin serving kind openai, when the test made one
        self.redirect_to: str = ""
        self.relay_to: str = ""
        self.loop = None
        self.runner = None
        self.thread = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- server --------------------------------------------------------------------------
    def start(self) -> LlmUpstream:
        ready = threading.Event()

        def run():
            self.loop = asyncio.new_event_loop()
            app = web.Application()
            app.router.add_post("/v2/models/{model}/generate_stream", self._triton)
            app.router.add_post("/v1/chat/completions", self._openai)
            app.router.add_post("/v1/completions", self._openai)
            self.runner = web.AppRunner(app)
            self.loop.run_until_complete(self.runner.setup())
            self.loop.run_until_complete(web.TCPSite(self.runner, "127.0.0.1", self.port).start())
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        if self.loop is None:
            return
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop = None

    # --- protocols -----------------------------------------------------------------------
    async def _stream(self, request, events, body: dict, model: str):
        self.requests.append({"path": request.path, "headers": dict(request.headers), "body": body})
        kind, _, number = model.partition("-")
        number, _, pause_ms = number.partition("-")
        number = int(number) if number.isdigit() else 0
        pause_s = int(pause_ms) / 1000 if kind == "flood" and pause_ms.isdigit() else 0.0
        if kind == "fail":
            return web.json_response({"error": f"failing on purpose ({number})"}, status=number)
        if kind == "json":
            return web.json_response({"text_output": "not a stream", "completion_tokens": 3})
        if kind == "leak":
            return web.Response(status=number, body=LEAK_BODY, content_type="text/html")
        if kind == "redirect":
            raise web.HTTPTemporaryRedirect(self.redirect_to)
        if kind == "relay":
            return await self._relay(request, body)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            if kind == "stall":
                await asyncio.sleep(number / 1000)
            for i, event in enumerate(events):
                if kind == "die" and i == number:
                    request.transport.close()
                    return response
                data = event.encode() if type(event) is str else json.dumps(event).encode()
                await response.write(b"data: " + data + b"\n\n")
                if kind == "slow":
                    await asyncio.sleep(number / 1000)
                elif pause_s:
                    await asyncio.sleep(pause_s)
            await response.write_eof()
            self.completed[model] += 1
        except (asyncio.CancelledError, ConnectionResetError):
            self.cancelled[model] += 1
            raise
        return response

    async def _relay(self, request, body: dict):
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        async with aiohttp.ClientSession() as session:
            async with session.post(self.relay_to + request.path, json=body, headers=headers) as answer:
                payload = await answer.read()
                return web.Response(status=answer.status, body=payload, content_type=answer.content_type)

    async def _triton(self, request):
        body = await request.json()
        model = request.match_info["model"]
        unexpected = sorted(set(body) - STRICT_INPUTS) if model == "strict" else []
        if unexpected:
            self.requests.append({"path": request.path, "headers": dict(request.headers), "body": body})
            message = f"[request id: <id_unknown>] unexpected inference input '{unexpected[0]}' for model '{model}'"
            return web.json_response({"error": message}, status=400)
        text = body.get("text_input") or " ".join(m["content"] for m in json.loads(body.get("messages_json", "[]")))
        n = int(body.get("max_tokens", 16))
        prompt = len(text.split())
        events = [{"model_name": request.match_info["model"], "text_output": f"w{i} "} for i in range(n)]
        if body.get("logprobs"):
            for i, event in enumerate(events):
                event["logprobs"] = json.dumps([fake_logprob(i, body.get("top_logprobs", 0))])
        events.append({"text_output": "", "prompt_tokens": prompt, "completion_tokens": n, "finish_reason": "length"})
        return await self._stream(request, events, body, request.match_info["model"])

    async def _openai(self, request):
        if self.api_key and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return web.json_response({"error": {"message": "bad key", "type": "authentication_error"}}, status=401)
        body = await request.json()
        chat = request.path.endswith("/chat/completions")
        text = " ".join(m["content"] for m in body["messages"]) if chat else body["prompt"]
        n = int(body.get("max_tokens", 16))
        kind, _, size = body["model"].partition("-")
        blob = (
            "x" * (int(size.partition("-")[0]) * 1024) if kind == "flood" else ""
        )  # one string for every token: no copy per token
        word = (lambda i: blob) if kind == "flood" else (lambda i: f"w{i} ")
        events = []
        choices = int(body.get("n", 1))  # n > 1: choice k's tokens are `wi ` too, in turn with the others'
        for i in range(n):
            for k in range(choices):
                choice = {"index": k, "delta": {"content": word(i)}} if chat else {"index": k, "text": word(i)}
                if body.get("logprobs") is not None and chat and body["logprobs"]:
                    choice["logprobs"] = {"content": [fake_logprob(i, body.get("top_logprobs", 0))]}
                elif body.get("logprobs") is not None and not chat:  # the legacy shape
                    entry = fake_logprob(i, body["logprobs"])
                    top = {t["token"]: t["logprob"] for t in entry["top_logprobs"]}
                    choice["logprobs"] = {"tokens": [entry["token"]], "token_logprobs": [entry["logprob"]]}
                    choice["logprobs"] |= {"top_logprobs": [top], "text_offset": [0]}
                events.append({"id": "x", "model": body["model"], "choices": [{**choice, "finish_reason": None}]})
        for k in range(choices):
            last = {"index": k, "delta": {}} if chat else {"index": k, "text": ""}
            events.append({"id": "x", "model": body["model"], "choices": [{**last, "finish_reason": "length"}]})
        n *= choices
        usage = {"prompt_tokens": len(text.split()), "completion_tokens": n, "total_tokens": len(text.split()) + n}
        events.append({"id": "x", "model": body["model"], "choices": [], "usage": usage})
        events.append("[DONE]")
        return await self._stream(request, events, body, body["model"])


if __name__ == "__main__":  # a stand-in in a process of its own: `python -m tests.gateway.llm_upstream PORT`
    import sys
    import time

    server = LlmUpstream()
    server.port = int(sys.argv[1])
    server.start()
    print(f"llm stand-in on {server.url}", flush=True)
    while True:
        time.sleep(3600)
