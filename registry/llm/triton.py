"""The Triton model directory that serves an LLM model directory in a pool (the one owner of
its layout and config): a decoupled python-backend model (platform/triton/llm_adapter/model.py)
reached through Triton's generate extension, `POST /v2/models/{name}/generate_stream` (SSE,
one event per token) and `/generate` (one JSON).

    {repo}/{triton_name}/config.pbtxt      written from Triton's protobuf (model_config_pb2)
    {repo}/{triton_name}/1/model.py        the adapter
    {repo}/{triton_name}/1/model/          the Hugging Face model directory (hard links where possible)

Inputs: text_input | messages_json (TYPE_STRING [1]), max_tokens (TYPE_INT32 [1]),
temperature, top_p, presence_penalty, frequency_penalty (TYPE_FP32 [1]), seed (TYPE_INT64 [1]),
stop (TYPE_STRING [-1]), stream (TYPE_BOOL [1], false for
`/generate`: one response with the whole text), ignore_eos (TYPE_BOOL [1]) and min_tokens
(TYPE_INT32 [1]) (vLLM's options: the end-of-sequence token is never chosen, or not before
min_tokens tokens), logprobs (TYPE_BOOL [1]) and top_logprobs (TYPE_INT32 [1], 0..20);
all optional in the config, the adapter wants exactly one of the first two. Outputs: text_output (TYPE_STRING [1]) and
generated_tokens (TYPE_INT32 [1], the count so far) on every streamed response, prompt_tokens
on the first; finish_reason (TYPE_STRING [1]), prompt_tokens and completion_tokens
(TYPE_INT32 [1]) on the final one; with logprobs true, logprobs (TYPE_STRING [1], a JSON
array: the log-probabilities of the tokens that response's text covers) on each.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

ADAPTER = Path(__file__).resolve().parents[2] / "platform" / "triton" / "llm_adapter" / "model.py"
HF_SUBDIR = "model"
INPUTS = (
    ("text_input", mc.TYPE_STRING, [1]),
    ("messages_json", mc.TYPE_STRING, [1]),
    ("max_tokens", mc.TYPE_INT32, [1]),
    ("temperature", mc.TYPE_FP32, [1]),
    ("top_p", mc.TYPE_FP32, [1]),
    ("presence_penalty", mc.TYPE_FP32, [1]),
    ("frequency_penalty", mc.TYPE_FP32, [1]),
    ("seed", mc.TYPE_INT64, [1]),
    ("stop", mc.TYPE_STRING, [-1]),
    ("stream", mc.TYPE_BOOL, [1]),
    ("ignore_eos", mc.TYPE_BOOL, [1]),
    ("min_tokens", mc.TYPE_INT32, [1]),
    ("logprobs", mc.TYPE_BOOL, [1]),
    ("top_logprobs", mc.TYPE_INT32, [1]),
)
OUTPUTS = (
    ("text_output", mc.TYPE_STRING, [1]),
    ("finish_reason", mc.TYPE_STRING, [1]),
    ("prompt_tokens", mc.TYPE_INT32, [1]),
    ("completion_tokens", mc.TYPE_INT32, [1]),
    ("generated_tokens", mc.TYPE_INT32, [1]),
    ("logprobs", mc.TYPE_STRING, [1]),
)


def llm_config(
    name: str,
    *,
    delay_first_token_ms: int = 0,
    delay_per_token_ms: int = 0,
    max_tokens_default: int = 64,
    max_streams: int = 8,
    torch_threads: int = 1,
) -> mc.ModelConfig:
    """The ModelConfig of an LLM served by the adapter (see the module docstring)."""
    config = mc.ModelConfig(name=name, backend="python", max_batch_size=0)
    config.model_transaction_policy.decoupled = True
    for input_name, data_type, dims in INPUTS:
        config.input.add(name=input_name, data_type=data_type, dims=dims, optional=True)
    for output_name, data_type, dims in OUTPUTS:
        config.output.add(name=output_name, data_type=data_type, dims=dims)
    # One instance: its threads run the streams (max_streams at once), sharing the weights.
    config.instance_group.add(count=1, kind=mc.ModelInstanceGroup.KIND_CPU)
    parameters = {
        "hf_dir": HF_SUBDIR,
        "delay_first_token_ms": delay_first_token_ms,
        "delay_per_token_ms": delay_per_token_ms,
        "max_tokens_default": max_tokens_default,
        "max_streams": max_streams,
        "torch_threads": torch_threads,
    }
    for key, value in parameters.items():
        config.parameters[key].string_value = str(value)
    return config


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another filesystem, or links not allowed
        shutil.copy2(source, target)


def write_llm_model(
    repo_dir: str | Path,
    triton_name: str,
    hf_dir: str | Path,
    *,
    delay_first_token_ms: int = 0,
    delay_per_token_ms: int = 0,
    max_tokens_default: int = 64,
    max_streams: int = 8,
) -> Path:
    """Write `{repo_dir}/{triton_name}` serving the model directory `hf_dir`; returns its path.
    An existing directory of that name is replaced whole."""
    path = Path(repo_dir) / triton_name
    if path.exists():
        shutil.rmtree(path)
    version = path / "1"
    version.mkdir(parents=True)
    shutil.copytree(hf_dir, version / HF_SUBDIR, copy_function=_link_or_copy)
    shutil.copy2(ADAPTER, version / "model.py")
    config = llm_config(
        triton_name,
        delay_first_token_ms=delay_first_token_ms,
        delay_per_token_ms=delay_per_token_ms,
        max_tokens_default=max_tokens_default,
        max_streams=max_streams,
    )
    (path / "config.pbtxt").write_text(text_format.MessageToString(config))
    return path
