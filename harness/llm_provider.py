"""A stand-in for an external LLM provider (backend kind (c)): python -m harness.llm_provider.

A fake, and allowed as one: the real providers are on the internet, which these machines
cannot reach. It speaks the part of the OpenAI API the gateway uses, as a provider does:
`Authorization: Bearer <key>` required (401 otherwise), POST /v1/chat/completions and
/v1/completions (stream or not; `usage` in replies, and in a last chunk when
`stream_options.include_usage`), GET /v1/models, errors in OpenAI's shape, an argument OpenAI's API does not know refused (400 naming it). The tokens are
real: the project's tiny model (a Hugging Face model dir) generates them, greedily, token
by token, in a thread per request.

It can be told to misbehave, for fallback tests, on a second (admin) port:
  POST /control {"status": 200|429|500|503, "first_token_delay_ms": N, "token_delay_ms": N,
                 "listening": true|false}
    status       what every API request gets (429 with Retry-After: 1; 5xx in OpenAI's shape)
    first_token_delay_ms  a slow first token; token_delay_ms: a slow stream (before each later token)
    listening    false closes the API port (connect refused) until set true again
  GET /stats -> {"requests", "in_flight", "completed", "disconnected"}: a client that went
    away mid-stream shows as disconnected once its generation stopped.

Run: python -m harness.llm_provider --model-dir DIR --key KEY --port P --admin-port A
(harness/llm.py's ProviderStandIn starts it and waits until it answers).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import threading
import time
import uuid

from aiohttp import web

MAX_BODY = 1 << 20
# the request arguments of OpenAI's chat and completions APIs; any other is refused, as OpenAI does
OPENAI_ARGUMENTS = frozenset(
    "model messages prompt max_tokens max_completion_tokens temperature top_p n stream stream_options stop seed "
    "presence_penalty frequency_penalty logit_bias logprobs top_logprobs user tools tool_choice response_format "
    "suffix echo best_of parallel_tool_calls store metadata modalities audio prediction reasoning_effort "
    "service_tier".split()
)


def _error(status: int, message: str, kind: str, code: str | None = None, headers: dict | None = None):
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return web.json_response(body, status=status, headers=headers)


class TinyGenerator:
    """Greedy decoding of a Hugging Face causal LM with its KV cache, one token at a time."""

    def __init__(self, model_dir: str):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(1)
        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        eos = self.model.generation_config.eos_token_id
        self.stop_ids = set(eos if isinstance(eos, list) else [eos])

    def prompt_ids(self, body: dict, chat: bool) -> list[int]:
        if chat:
            text = self.tokenizer.apply_chat_template(body["messages"], add_generation_prompt=True, tokenize=False)
        else:
            text = body["prompt"]
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def tokens(self, prompt_ids: list[int], max_tokens: int, cancelled: threading.Event):
        """Yield the text of each new token; stops at an end token, max_tokens or cancellation."""
        torch = self.torch
        generated, sent = [], ""
        step_ids, cache = torch.tensor([prompt_ids]), None
        with torch.inference_mode():
            for _ in range(max_tokens):
                if cancelled.is_set():
                    return
                out = self.model(input_ids=step_ids, cache=cache, use_cache=True)
                cache = out.past_key_values
                token = int(torch.argmax(out.logits[0, -1]))
                if token in self.stop_ids:
                    return
                generated.append(token)
                step_ids = torch.tensor([[token]])
                text = self.tokenizer.decode(generated, skip_special_tokens=True).rstrip("\ufffd")
                if len(text) > len(sent):
                    yield text[len(sent) :], len(generated)
                    sent = text


class Provider:
    def __init__(self, generator: TinyGenerator, key: str, model: str):
        self.generator, self.key, self.model = generator, key, model
        self.status = 200
        self.first_token_delay_s = 0.0
        self.token_delay_s = 0.0
        self.stats = {"requests": 0, "in_flight": 0, "completed": 0, "disconnected": 0}

    # --- the API -----------------------------------------------------------------------------
    def _refusal(self, request: web.Request):
        if request.headers.get("Authorization", "") != f"Bearer {self.key}":
            return _error(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key")
        if self.status == 429:
            return _error(429, "Rate limit reached.", "requests", "rate_limit_exceeded", {"Retry-After": "1"})
        if self.status >= 500:
            return _error(self.status, "The server had an error while processing your request.", "server_error")
        return None

    async def models(self, request: web.Request):
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        return web.json_response(
            {"object": "list", "data": [{"id": self.model, "object": "model", "created": 0, "owned_by": "stand-in"}]}
        )

    async def chat(self, request: web.Request):
        return await self._complete(request, chat=True)

    async def completions(self, request: web.Request):
        return await self._complete(request, chat=False)

    async def _complete(self, request: web.Request, *, chat: bool):
        self.stats["requests"] += 1
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        try:
            body = json.loads(await request.read())
            assert isinstance(body, dict)
            prompt_ids = self.generator.prompt_ids(body, chat)
            max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
            assert max_tokens > 0
        except Exception as error:  # noqa: BLE001 - any malformed body is the caller's 400
            return _error(400, f"invalid request body: {error!r}", "invalid_request_error")
        unknown = sorted(set(body) - OPENAI_ARGUMENTS)
        if unknown:  # as OpenAI's API answers an argument it does not know (vLLM's ignore_eos, ...)
            return _error(
                400,
                f"Unrecognized request argument supplied: {unknown[0]}",
                "invalid_request_error",
                "unknown_parameter",
            )
        if body.get("model") != self.model:
            return _error(
                404, f"The model `{body.get('model')}` does not exist.", "invalid_request_error", "model_not_found"
            )
        self.stats["in_flight"] += 1
        try:
            return await self._answer(request, body, prompt_ids, max_tokens, chat)
        finally:
            self.stats["in_flight"] -= 1

    async def _answer(self, request, body, prompt_ids, max_tokens, chat):
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        cancelled = threading.Event()

        def produce():
            count = 0
            try:
                for text, count in self.generator.tokens(prompt_ids, max_tokens, cancelled):
                    if count > 1 and self.token_delay_s:
                        time.sleep(self.token_delay_s)  # a slow stream, still stopped by `cancelled`
                    loop.call_soon_threadsafe(queue.put_nowait, text)
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, (count,))

        ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        stream = bool(body.get("stream"))
        if self.first_token_delay_s:
            await asyncio.sleep(self.first_token_delay_s)
        worker = loop.run_in_executor(None, produce)
        response = None
        if stream:
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await response.prepare(request)
        parts = []
        try:
            while True:
                item = await queue.get()
                if isinstance(item, tuple):
                    completion_tokens = item[0]
                    break
                parts.append(item)
                if stream:
                    await response.write(self._sse(self._chunk(ident, created, chat, item, None)))
        except (ConnectionResetError, asyncio.CancelledError):
            cancelled.set()
            self.stats["disconnected"] += 1
            raise
        finally:
            cancelled.set()
            await worker
        usage = {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": completion_tokens,
            "total_tokens": len(prompt_ids) + completion_tokens,
        }
        finish = "length" if completion_tokens >= max_tokens else "stop"
        self.stats["completed"] += 1
        if not stream:
            text = "".join(parts)
            choice = {"index": 0, "finish_reason": finish, "logprobs": None}
            choice.update({"message": {"role": "assistant", "content": text}} if chat else {"text": text})
            kind = "chat.completion" if chat else "text_completion"
            return web.json_response(
                {
                    "id": ident,
                    "object": kind,
                    "created": created,
                    "model": self.model,
                    "choices": [choice],
                    "usage": usage,
                }
            )
        await response.write(self._sse(self._chunk(ident, created, chat, "", finish)))
        if (body.get("stream_options") or {}).get("include_usage"):
            last = self._chunk(ident, created, chat, None, None)
            last["choices"], last["usage"] = [], usage
            await response.write(self._sse(last))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def _chunk(self, ident, created, chat, text, finish) -> dict:
        if chat:
            delta = {} if text is None or finish else {"content": text}
            choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
            return {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": self.model,
                "choices": [choice],
            }
        choice = {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}
        return {"id": ident, "object": "text_completion", "created": created, "model": self.model, "choices": [choice]}

    @staticmethod
    def _sse(payload: dict) -> bytes:
        return f"data: {json.dumps(payload)}\n\n".encode()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/v1/models", self.models)
        return app


async def serve(args) -> None:
    provider = Provider(TinyGenerator(args.model_dir), args.key, args.model)
    runner = web.AppRunner(provider.app(), handle_signals=False)
    await runner.setup()
    state = {"site": None}

    async def listen(on: bool) -> None:
        if on and state["site"] is None:
            state["site"] = web.TCPSite(runner, "127.0.0.1", args.port, reuse_address=True)
            await state["site"].start()
        elif not on and state["site"] is not None:
            await state["site"].stop()
            state["site"] = None
            for connection in runner.server.connections:  # kept-alive ones too: refused means refused
                connection.force_close()

    async def control(request: web.Request):
        change = await request.json()
        if "status" in change:
            provider.status = int(change["status"])
        if "first_token_delay_ms" in change:
            provider.first_token_delay_s = float(change["first_token_delay_ms"]) / 1000.0
        if "token_delay_ms" in change:
            provider.token_delay_s = float(change["token_delay_ms"]) / 1000.0
        if "listening" in change:
            await listen(bool(change["listening"]))
        return web.json_response({"status": provider.status, "listening": state["site"] is not None})

    async def stats(request: web.Request):
        return web.json_response(provider.stats)

    admin = web.Application()
    admin.router.add_post("/control", control)
    admin.router.add_get("/stats", stats)
    admin_runner = web.AppRunner(admin, handle_signals=False)
    await admin_runner.setup()
    await web.TCPSite(admin_runner, "127.0.0.1", args.admin_port).start()
    await listen(True)
    print(f"provider stand-in listening on 127.0.0.1:{args.port} (admin {args.admin_port})", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--model", default="provider-tiny", help="the model name the provider serves")
    parser.add_argument("--key", default=os.environ.get("PROVIDER_API_KEY", ""), help="the bearer key it requires")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--admin-port", type=int, required=True)
    args = parser.parse_args()
    if not args.key:
        parser.error("--key (or PROVIDER_API_KEY) is required: a provider without a key is not a stand-in for one")
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
