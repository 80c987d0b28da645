"""The layout of an LLM model directory (a Hugging Face model dir), checked before it is
stored or served: `inspect_model_dir(path)` returns what the registry keeps about it
(architecture, context length, tokenizer, chat template) or raises ModelDirError naming
the file and what is wrong. Reads JSON only: no weights are loaded and no code is run
(a config asking for remote code is refused)."""

from __future__ import annotations

import json
from pathlib import Path

MAX_JSON_BYTES = 8 << 20  # tokenizer.json of a real vocabulary is a few MB
WEIGHT_SUFFIXES = (".safetensors",)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model")


class ModelDirError(ValueError):
    """The directory is not a model directory the platform can serve; the message says why."""


def _json(path: Path) -> dict:
    if path.stat().st_size > MAX_JSON_BYTES:
        raise ModelDirError(f"{path.name} is larger than {MAX_JSON_BYTES} bytes")
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelDirError(f"{path.name} is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise ModelDirError(f"{path.name} must hold a JSON object")
    return value


def inspect_model_dir(path: str | Path) -> dict:
    """{architecture, model_type, context_length, vocab_size, tokenizer, chat_template, weights}
    of the model directory at `path`."""
    root = Path(path)
    if not (root / "config.json").is_file():
        raise ModelDirError("config.json is missing: a model directory holds a Hugging Face config.json")
    config = _json(root / "config.json")
    if config.get("auto_map"):
        raise ModelDirError("config.json asks for remote code (auto_map): only built-in architectures are served")
    architectures = config.get("architectures") or []
    if not (isinstance(architectures, list) and architectures and all(isinstance(a, str) for a in architectures)):
        raise ModelDirError("config.json has no `architectures` list naming the model class")
    context_length = config.get("max_position_embeddings") or config.get("n_positions")
    if not isinstance(context_length, int) or context_length <= 0:
        raise ModelDirError("config.json has no positive max_position_embeddings (the context length)")
    weights = sorted(p.name for p in root.iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES))
    if not weights:
        raise ModelDirError("no weights: a model directory holds *.safetensors files (pickled .bin is not loaded)")
    tokenizer = next((name for name in TOKENIZER_FILES if (root / name).is_file()), None)
    if tokenizer is None:
        raise ModelDirError(f"no tokenizer: one of {', '.join(TOKENIZER_FILES)} is needed")
    tokenizer_config = _json(root / "tokenizer_config.json") if (root / "tokenizer_config.json").is_file() else {}
    chat_template = (root / "chat_template.jinja").is_file() or bool(tokenizer_config.get("chat_template"))
    return {
        "architecture": architectures[0],
        "model_type": str(config.get("model_type", "")),
        "context_length": context_length,
        "vocab_size": config.get("vocab_size"),
        "tokenizer": tokenizer,
        "chat_template": chat_template,
        "weights": weights,
    }
