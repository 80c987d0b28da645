"""The tiny model's directory, the layout check an uploaded model dir goes through, and the
Triton model directory written for it (no server: tests/llm/test_backends.py serves them)."""

import json
import shutil

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from harness.llm import tiny_llm_dir
from registry.llm.model_dir import ModelDirError, inspect_model_dir
from registry.llm.tiny import CONTEXT_LENGTH
from registry.llm.triton import write_llm_model


@pytest.fixture(scope="module")
def hf_dir():
    return tiny_llm_dir()


def test_the_tiny_model_is_a_hugging_face_model_dir_that_answers(hf_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    facts = inspect_model_dir(hf_dir)
    assert facts["architecture"] == "LlamaForCausalLM"
    assert facts["context_length"] == CONTEXT_LENGTH
    assert facts["tokenizer"] == "tokenizer.json" and facts["chat_template"]
    assert facts["weights"] == ["model.safetensors"]
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    model = AutoModelForCausalLM.from_pretrained(hf_dir)
    messages = [{"role": "user", "content": "what is the canary?"}]
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**inputs, max_new_tokens=80)
    answer = tokenizer.decode(out[0][inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    # trained on its corpus: it answers about canaries and stops by itself, well before 80 tokens
    assert "canary" in answer and "traffic" in answer
    assert out.shape[1] - inputs["input_ids"].shape[1] < 80


@pytest.mark.parametrize(
    "spoil,message",
    [
        (lambda d: (d / "config.json").unlink(), "config.json is missing"),
        (lambda d: (d / "config.json").write_text("{not json"), "config.json is not valid JSON"),
        (lambda d: _edit_config(d, auto_map={"AutoModel": "x.Y"}), "remote code"),
        (lambda d: _edit_config(d, max_position_embeddings=0), "max_position_embeddings"),
        (lambda d: (d / "model.safetensors").unlink(), "no weights"),
        (lambda d: (d / "tokenizer.json").unlink(), "no tokenizer"),
    ],
)
def test_a_model_dir_that_cannot_be_served_is_refused_with_the_reason(hf_dir, tmp_path, spoil, message):
    copy = tmp_path / "model"
    shutil.copytree(hf_dir, copy)
    spoil(copy)
    with pytest.raises(ModelDirError, match=message):
        inspect_model_dir(copy)


def _edit_config(path, **changes):
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


def test_the_triton_model_dir_is_decoupled_with_the_generate_contract(hf_dir, tmp_path):
    path = write_llm_model(tmp_path, "tiny__v3__llm", hf_dir, delay_first_token_ms=250, delay_per_token_ms=5)
    config = text_format.Parse((path / "config.pbtxt").read_text(), mc.ModelConfig())
    assert config.name == "tiny__v3__llm" and config.backend == "python"
    assert config.model_transaction_policy.decoupled
    assert {i.name: i.data_type for i in config.input} == {
        "text_input": mc.TYPE_STRING,
        "messages_json": mc.TYPE_STRING,
        "max_tokens": mc.TYPE_INT32,
        "temperature": mc.TYPE_FP32,
        "top_p": mc.TYPE_FP32,
        "presence_penalty": mc.TYPE_FP32,
        "frequency_penalty": mc.TYPE_FP32,
        "seed": mc.TYPE_INT64,
        "stop": mc.TYPE_STRING,
        "stream": mc.TYPE_BOOL,
        "ignore_eos": mc.TYPE_BOOL,
        "min_tokens": mc.TYPE_INT32,
        "logprobs": mc.TYPE_BOOL,
        "top_logprobs": mc.TYPE_INT32,
    }
    assert all(i.optional for i in config.input)
    assert [o.name for o in config.output] == [
        "text_output",
        "finish_reason",
        "prompt_tokens",
        "completion_tokens",
        "generated_tokens",
        "logprobs",
    ]
    assert config.parameters["delay_first_token_ms"].string_value == "250"
    assert config.parameters["delay_per_token_ms"].string_value == "5"
    assert (path / "1" / "model.py").is_file()
    assert inspect_model_dir(path / "1" / "model")["context_length"] == CONTEXT_LENGTH
    # written again, the directory is replaced whole
    (path / "1" / "stale").write_text("x")
    write_llm_model(tmp_path, "tiny__v3__llm", hf_dir)
    assert not (path / "1" / "stale").exists()
