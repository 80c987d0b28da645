"""Triton python-backend adapter that streams a Hugging Face causal LM's tokens (decoupled).

Copied into `<model dir>/1/model.py` by registry/llm/triton.py, next to the model directory
itself (`1/model/`). Served through Triton's generate extension:
`POST /v2/models/{name}/generate_stream` answers with server-sent events, one per response:
one response per generated token carrying `text_output` (the new text of that step) and
`generated_tokens` (the tokens generated so far, by the model's tokenizer; the first response
also `prompt_tokens`), then a final one with `finish_reason` ("stop" | "length"),
`prompt_tokens` and `completion_tokens` (and `text_output` "" or the text held back until
then). The running count lets the gateway charge a stream cut before its end (a client that
hung up) the tokens it really generated. `/generate` with `"stream": false`
answers with one JSON holding the whole text and the counts.

Inputs (all but one of text_input / messages_json optional):
  text_input     the prompt, as is (/v1/completions)
  messages_json  an OpenAI messages array as JSON, rendered with the tokenizer's chat template (chat)
  max_tokens     new tokens at most (default: parameter max_tokens_default; capped by the context)
  temperature    0 (default): greedy; > 0: sampling from softmax(logits / temperature)
  top_p          with sampling: from the smallest set of tokens whose probability reaches top_p (1: all)
  seed           with sampling: the generator's seed (the same seed and prompt give the same text)
  presence_penalty, frequency_penalty  -2..2, OpenAI's rule: each token's logit less
                 presence_penalty if it was generated already and frequency_penalty x its count
  stop           strings that end the completion (not included in it)
  stream         true (default): a response per token; false: one response with the whole text
                 (what `/generate` needs: it accepts exactly one response)
  ignore_eos     true: the end-of-sequence token is never chosen (max_tokens are generated; vLLM's
                 option, which benchmark tools send with a fixed output length)
  min_tokens     the end-of-sequence token is not chosen before this many tokens (vLLM's); 0 default
  logprobs       true: each response also carries `logprobs`, a JSON array with an entry per token
                 its text covers (the tokens generated since the last response), OpenAI's chat
                 shape {token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}: the
                 log_softmax of the logits the token was chosen from, after the adapter's bans
                 and penalties, before temperature and top_p (as vLLM reports them)
  top_logprobs   0..20 (only with logprobs): that many most likely tokens in each entry
A bad request gets one error response naming the input and what is wrong.

Each request runs in a thread of its own (up to `max_streams` at once, the rest queue), so
streams interleave; a request the client has cancelled (Triton cancels it when the HTTP client
goes away) stops at the next token. Greedy decoding with the model's KV cache.

Config parameters (config.pbtxt `parameters`): `hf_dir` (default "model", relative to the
version directory), `max_tokens_default` (64), `max_streams` (8), `torch_threads` (1),
`delay_first_token_ms` and `delay_per_token_ms` (0): a deliberately slower model for
canary tests, the delay added before the first token and before each later one.
"""

import inspect
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
from transformers import AutoModelForCausalLM, AutoTokenizer

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
MAX_STOP_STRINGS = 4
MAX_MESSAGES_JSON = 1 << 20
MAX_TOP_LOGPROBS = 20
LOGPROB_FLOOR = -9999.0  # a banned token's -inf, as JSON can carry it (vLLM's floor)


class BadRequest(ValueError):
    pass


def _param(config: dict, key: str, default: str) -> str:
    return config.get("parameters", {}).get(key, {}).get("string_value", default) or default


def _input(request, name: str):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy().reshape(-1)


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _string(name: str, value: str):
    return pb_utils.Tensor(name, np.array([value.encode("utf-8")], dtype=np.object_))


def _int32(name: str, value: int):
    return pb_utils.Tensor(name, np.array([value], dtype=np.int32))


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        torch.set_num_threads(int(_param(config, "torch_threads", "1")))
        hf_dir = os.path.join(version_dir, _param(config, "hf_dir", "model"))
        self.tokenizer = AutoTokenizer.from_pretrained(hf_dir)
        self.model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
        eos = self.model.generation_config.eos_token_id
        self.stop_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        # transformers 5.24 renamed the KV cache argument (past_key_values -> cache)
        self.cache_arg = "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"
        self.context_length = int(getattr(self.model.config, "max_position_embeddings", 0) or 2048)
        self.max_tokens_default = int(_param(config, "max_tokens_default", "64"))
        self.delay_first_s = float(_param(config, "delay_first_token_ms", "0")) / 1000.0
        self.delay_token_s = float(_param(config, "delay_per_token_ms", "0")) / 1000.0
        self.streams = ThreadPoolExecutor(max_workers=int(_param(config, "max_streams", "8")))
        # Warm: the first live request does not pay the first forward pass's allocations.
        with torch.inference_mode():
            self.model(input_ids=torch.tensor([[0, 1]]), use_cache=True)

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                job = self._parse(request)
            except BadRequest as error:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(error))), flags=FINAL)
                continue
            self.streams.submit(self._run, job, sender)
        return None

    def finalize(self):
        self.streams.shutdown(wait=True, cancel_futures=True)

    # --- one request -----------------------------------------------------------------------
    def _parse(self, request) -> dict:
        text = _input(request, "text_input")
        messages = _input(request, "messages_json")
        if (text is None) == (messages is None):
            raise BadRequest("send exactly one of text_input (a prompt) and messages_json (chat messages)")
        if messages is not None:
            prompt_ids = self._chat_ids(_text(messages[0]))
        else:
            prompt_ids = self.tokenizer(_text(text[0]), add_special_tokens=False)["input_ids"]
        if not prompt_ids:
            raise BadRequest("text_input is empty")
        if len(prompt_ids) >= self.context_length:
            raise BadRequest(f"the prompt is {len(prompt_ids)} tokens; the context length is {self.context_length}")
        max_tokens = _input(request, "max_tokens")
        max_tokens = self.max_tokens_default if max_tokens is None else int(max_tokens[0])
        if max_tokens < 1:
            raise BadRequest(f"max_tokens must be at least 1, not {max_tokens}")
        temperature = _input(request, "temperature")
        temperature = 0.0 if temperature is None else float(temperature[0])
        if not 0.0 <= temperature <= 2.0:
            raise BadRequest(f"temperature must be between 0 and 2, not {temperature}")
        top_p = _input(request, "top_p")
        top_p = 1.0 if top_p is None else float(top_p[0])
        if not 0.0 < top_p <= 1.0:
            raise BadRequest(f"top_p must be above 0 and at most 1, not {top_p}")
        penalties = []
        for name in ("presence_penalty", "frequency_penalty"):
            value = _input(request, name)
            value = 0.0 if value is None else float(value[0])
            if not -2.0 <= value <= 2.0:
                raise BadRequest(f"{name} must be between -2 and 2, not {value}")
            penalties.append(value)
        seed = _input(request, "seed")
        seed = None if seed is None else int(seed[0]) & 0xFFFFFFFFFFFFFFFF
        stop = _input(request, "stop")
        stop = [] if stop is None else [s for s in (_text(v) for v in stop) if s]
        if len(stop) > MAX_STOP_STRINGS:
            raise BadRequest(f"stop holds {len(stop)} strings; at most {MAX_STOP_STRINGS}")
        stream = _input(request, "stream")
        ignore_eos = _input(request, "ignore_eos")
        min_tokens = _input(request, "min_tokens")
        min_tokens = 0 if min_tokens is None else int(min_tokens[0])
        if min_tokens < 0:
            raise BadRequest(f"min_tokens must be at least 0, not {min_tokens}")
        logprobs = _input(request, "logprobs")
        logprobs = logprobs is not None and bool(logprobs[0])
        top_logprobs = _input(request, "top_logprobs")
        top_logprobs = 0 if top_logprobs is None else int(top_logprobs[0])
        if not 0 <= top_logprobs <= MAX_TOP_LOGPROBS:
            raise BadRequest(f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}, not {top_logprobs}")
        if top_logprobs and not logprobs:
            raise BadRequest("top_logprobs needs logprobs true")
        return {
            "logprobs": logprobs,
            "top_logprobs": top_logprobs,
            "ignore_eos": ignore_eos is not None and bool(ignore_eos[0]),
            "min_tokens": min_tokens,
            "stream": True if stream is None else bool(stream[0]),
            "prompt_ids": prompt_ids,
            "max_tokens": min(max_tokens, self.context_length - len(prompt_ids)),
            "temperature": temperature,
            "top_p": top_p,
            "presence_penalty": penalties[0],
            "frequency_penalty": penalties[1],
            "seed": seed,
            "stop": stop,
        }

    def _chat_ids(self, raw: str) -> list:
        if len(raw) > MAX_MESSAGES_JSON:
            raise BadRequest(f"messages_json is longer than {MAX_MESSAGES_JSON} characters")
        try:
            messages = json.loads(raw)
        except json.JSONDecodeError as error:
            raise BadRequest(f"messages_json is not valid JSON: {error}") from None
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages_json must be a non-empty JSON array of messages")
        for n, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise BadRequest(f"messages_json[{n}] must be an object with a string role")
            if not isinstance(message.get("content"), (str, list)):
                raise BadRequest(f"messages_json[{n}].content must be a string or a list of parts")
        try:
            rendered = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        except Exception as error:  # the template's own complaint (jinja) about these messages
            raise BadRequest(f"messages_json cannot be rendered with the model's chat template: {error}") from None
        return self.tokenizer(rendered, add_special_tokens=False)["input_ids"]

    def _run(self, job: dict, sender) -> None:
        try:
            self._stream(job, sender)
        except Exception as error:  # a failure inside generation ends this stream only
            sender.send(
                pb_utils.InferenceResponse(error=pb_utils.TritonError(f"generation failed: {error}")), flags=FINAL
            )

    def _next_token(self, logits, job: dict, counts: dict, generator, step: int = 0) -> tuple:
        """(the chosen token, the logits it was chosen from before temperature and top_p)."""
        if self.stop_ids and (job["ignore_eos"] or step < job["min_tokens"]):  # the end may not be chosen
            logits = logits.clone()
            logits[list(self.stop_ids)] = float("-inf")
        if counts and (job["presence_penalty"] or job["frequency_penalty"]):
            logits = logits.clone()
            ids = torch.tensor(list(counts))
            seen = torch.tensor(list(counts.values()), dtype=logits.dtype)
            logits[ids] -= job["presence_penalty"] + job["frequency_penalty"] * seen
        if job["temperature"] <= 0.0:
            return int(torch.argmax(logits)), logits
        probs = torch.softmax(logits / job["temperature"], dim=-1)
        if job["top_p"] < 1.0:  # nucleus: the most probable tokens up to top_p of the mass, renormalized
            ordered, order = torch.sort(probs, descending=True)
            keep = torch.cumsum(ordered, dim=-1) - ordered < job["top_p"]
            probs = torch.zeros_like(probs).scatter(0, order[keep], ordered[keep])
        return int(torch.multinomial(probs, 1, generator=generator)), logits

    def _logprob(self, token: int, logprob: float) -> dict:
        text = self.tokenizer.decode([token])
        return {"token": text, "logprob": max(float(logprob), LOGPROB_FLOOR), "bytes": list(text.encode("utf-8"))}

    def _entry(self, token: int, logits, top: int) -> dict:
        """The token's log-probability entry (OpenAI's chat shape) from the logits it was chosen from."""
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        entry = self._logprob(token, logprobs[token])
        best = torch.topk(logprobs, top) if top else None
        entry["top_logprobs"] = [] if best is None else [self._logprob(int(i), v) for v, i in zip(*best, strict=True)]
        return entry

    def _stream(self, job: dict, sender) -> None:
        if sender.is_cancelled():
            return _cancelled(sender)  # the client left while this request waited for a stream slot
        seed = job["seed"] if job["seed"] is not None else int.from_bytes(os.urandom(4), "little")
        generator = torch.Generator().manual_seed(seed)
        generated, sent, finish, counts, entries = [], "", "length", {}, []
        past, step_ids = None, torch.tensor([job["prompt_ids"]])
        with torch.inference_mode():
            for step in range(job["max_tokens"]):
                out = self.model(input_ids=step_ids, use_cache=True, **{self.cache_arg: past})
                past = out.past_key_values
                token, logits = self._next_token(out.logits[0, -1], job, counts, generator, step)
                if token in self.stop_ids:
                    finish = "stop"
                    break
                generated.append(token)
                if job["logprobs"]:
                    entries.append(self._entry(token, logits, job["top_logprobs"]))
                counts[token] = counts.get(token, 0) + 1
                step_ids = torch.tensor([[token]])
                text, stopped = _cut_at_stop(self.tokenizer.decode(generated, skip_special_tokens=True), job["stop"])
                if stopped:
                    finish = "stop"  # the text before the stop string goes out with the final response
                    break
                time.sleep(self.delay_first_s if step == 0 else self.delay_token_s)
                if sender.is_cancelled():
                    return _cancelled(sender)  # the client went away: stop generating
                ready = _releasable(text, job["stop"])
                if job["stream"] and len(ready) > len(sent):
                    outputs = [_string("text_output", ready[len(sent) :]), _int32("generated_tokens", len(generated))]
                    if not sent:
                        outputs.append(_int32("prompt_tokens", len(job["prompt_ids"])))
                    if job["logprobs"]:
                        outputs.append(_string("logprobs", json.dumps(entries)))
                        entries = []
                    sender.send(pb_utils.InferenceResponse(output_tensors=outputs))
                    sent = ready
        text, _ = _cut_at_stop(self.tokenizer.decode(generated, skip_special_tokens=True), job["stop"])
        outputs = [
            _string("text_output", text[len(sent) :]),
            _string("finish_reason", finish),
            _int32("prompt_tokens", len(job["prompt_ids"])),
            _int32("completion_tokens", len(generated)),
        ]
        if job["logprobs"]:
            outputs.append(_string("logprobs", json.dumps(entries)))
        sender.send(pb_utils.InferenceResponse(output_tensors=outputs), flags=FINAL)


def _cancelled(sender) -> None:
    """End a cancelled request: without its final flag Triton counts it in flight for ever
    (and waits for it when shutting down)."""
    error = pb_utils.TritonError("the request was cancelled", pb_utils.TritonError.CANCELLED)
    sender.send(pb_utils.InferenceResponse(error=error), flags=FINAL)


def _cut_at_stop(text: str, stop: list) -> tuple:
    """(text before the first stop string, whether one was found)."""
    cut = min((text.find(s) for s in stop if s in text), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def _releasable(text: str, stop: list) -> str:
    """The part of `text` that can be sent now: without an incomplete UTF-8 character at the
    end, nor a tail that may be the start of a stop string."""
    text = text.rstrip("\ufffd")
    hold = 0
    for s in stop:
        for n in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:n]):
                hold = max(hold, n)
                break
    return text[: len(text) - hold] if hold else text
