"""The project's tiny generative model (run: python -m registry.llm.tiny OUT_DIR).

A causal transformer of the Llama architecture (2 layers, 64 wide, ~100k parameters) with a
byte-level BPE tokenizer, both trained here in a few seconds on a synthetic corpus of chat
turns about the platform's own domain (rankers, gateways, canaries). It answers every prompt
with a sentence or two and then its end-of-turn token, so a stream has tens of tokens and
ends by itself. Saved as a standard Hugging Face model directory that servers load as it is:

    config.json, generation_config.json, model.safetensors      (LlamaForCausalLM)
    tokenizer.json, tokenizer_config.json, chat_template.jinja  (PreTrainedTokenizerFast)

The chat template renders `<|role|>\\ncontent<|end|>\\n` per message and `<|assistant|>\\n` as the
generation prompt; `<|end|>` and `<|endoftext|>` both stop generation (generation_config).
Seeded: the same seed gives the same tokenizer and, on one machine, the same weights.
Slowness for a "slower LLM" canary is a serving setting (registry/llm/triton.py), not a
property of the weights.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

CONTEXT_LENGTH = 256
VOCAB_SIZE = 384
END_OF_TURN = "<|end|>"
END_OF_TEXT = "<|endoftext|>"
SPECIAL_TOKENS = [END_OF_TEXT, END_OF_TURN, "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "<|end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

TOPICS = {
    "ranker": "the ranker scores every candidate and the best ones go back to the page",
    "gateway": "the gateway splits traffic between variants and counts every reply",
    "canary": "a canary takes a small share of traffic and the judge compares it with the stable",
    "rollout": "a rollout moves traffic step by step and rolls back when a guardrail fails",
    "model": "a model has versions and each version is built into artifacts for the pools",
    "pool": "a pool runs triton replicas and loads the artifacts the endpoint needs",
    "judge": "the judge runs rank tests on latency and errors before each step",
    "experiment": "an experiment splits users into arms and waits for enough evidence",
    "latency": "latency is measured per variant and the judge reads its percentiles",
    "token": "a token is a piece of text and the stream sends them one by one",
    "search": "search ranks documents for a query and the best results come first",
    "ads": "ads are ranked by predicted clicks and the auction picks the winners",
}
QUESTIONS = [
    "what is the {t}?",
    "tell me about the {t}.",
    "explain the {t} please.",
    "how does the {t} work?",
    "describe the {t} in one line.",
]
SYSTEM = "you are the platform's tiny assistant."
TAILS = [
    "that is all it does.",
    "ask me about another part.",
    "the dashboard shows it too.",
]


def corpus(seed: int) -> list[list[dict]]:
    """Chat conversations (lists of messages) about TOPICS, shuffled by `seed`."""
    rng = random.Random(seed)
    conversations = []
    for topic, fact in TOPICS.items():
        for question in QUESTIONS:
            for tail in TAILS:
                messages = [{"role": "user", "content": question.format(t=topic)}]
                if rng.random() < 0.3:
                    messages.insert(0, {"role": "system", "content": SYSTEM})
                messages.append({"role": "assistant", "content": f"{fact}. {tail}"})
                conversations.append(messages)
    rng.shuffle(conversations)
    return conversations


def render(messages: list[dict]) -> str:
    """The chat template, in Python, for training text (the same rendering as CHAT_TEMPLATE)."""
    return "".join(f"<|{m['role']}|>\n{m['content']}{END_OF_TURN}\n" for m in messages)


def _tokenizer(texts: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def make_tiny_llm(path: str | Path, *, seed: int = 7, steps: int = 200, threads: int = 1) -> Path:
    """Train the tiny model and save it as a Hugging Face model directory at `path`
    (created; files in it are overwritten). Takes a few seconds on one CPU core."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    conversations = corpus(seed)
    texts = [render(c) for c in conversations]
    # Plain text too, so /v1/completions on a raw prompt continues it and stops.
    texts += [f"{c[-1]['content']}{END_OF_TEXT}" for c in conversations[: len(conversations) // 3]]
    backend = _tokenizer(texts)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=None,
        eos_token=END_OF_TURN,
        pad_token=END_OF_TEXT,
        unk_token=None,
        model_max_length=CONTEXT_LENGTH,
        chat_template=CHAT_TEMPLATE,
    )
    stop_ids = [backend.token_to_id(END_OF_TURN), backend.token_to_id(END_OF_TEXT)]
    config = LlamaConfig(
        vocab_size=backend.get_vocab_size(),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=CONTEXT_LENGTH,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=stop_ids,
        pad_token_id=stop_ids[1],
    )
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
        stream = torch.tensor([i for text in texts for i in backend.encode(text).ids], dtype=torch.long)
        _train(model, stream, steps=steps, seed=seed)
    finally:
        torch.set_num_threads(previous_threads)
    model.generation_config = GenerationConfig(
        eos_token_id=stop_ids, pad_token_id=stop_ids[1], do_sample=False, max_new_tokens=64
    )
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path


def cache_dir(var_dir: str | Path) -> Path:
    """Where the tiny model is kept: TINY_LLM_CACHE when set (one for a whole test run and the
    `make run` its tests start), else `llm-cache` under the data directory."""
    return Path(os.environ.get("TINY_LLM_CACHE") or Path(var_dir) / "llm-cache")


def tiny_llm_path(cache: str | Path, *, seed: int = 7) -> Path:
    """Where cached_tiny_llm keeps the model of this code version and seed under `cache`."""
    digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    return Path(cache) / f"tiny-s{seed}-{digest}"


def made(path: Path) -> bool:
    return (path / "model.safetensors").is_file()


def cached_tiny_llm(cache: str | Path, *, seed: int = 7) -> Path:
    """The tiny model's directory under `cache`, made on first use. Keyed by this module's hash
    (a change to how it is made makes a new one) and the seed; written aside and renamed into
    place, so processes sharing one cache (make run's seed, test workers) never see half a
    directory."""
    path = tiny_llm_path(cache, seed=seed)
    if made(path):
        return path
    cache = Path(cache)
    cache.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".tiny-", dir=cache))
    try:
        make_tiny_llm(scratch, seed=seed)
        os.rename(scratch, path)
    except OSError:
        if not made(path):  # not lost to another process's rename
            raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return path


def _train(model, stream, *, steps: int, seed: int, window: int = 96, batch: int = 16, lr: float = 1e-2) -> float:
    """Next-token prediction on random windows of the packed token stream; returns the last loss."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps, pct_start=0.1)
    model.train()
    loss = torch.tensor(0.0)
    for _ in range(steps):
        starts = torch.randint(0, len(stream) - window - 1, (batch,), generator=generator)
        ids = torch.stack([stream[s : s + window] for s in starts.tolist()])
        loss = model(input_ids=ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    model.eval()
    return float(loss.detach())


if __name__ == "__main__":
    started = time.monotonic()
    out = make_tiny_llm(sys.argv[1] if len(sys.argv) > 1 else "var/llm/tiny")
    print(f"wrote {out} in {time.monotonic() - started:.1f}s")
