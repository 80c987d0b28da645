"""LLM model directories as a client uploads them (a Hugging Face layout: config.json,
safetensors weights, tokenizer files), packed as .tar.gz or .zip, for the tests that
upload them (the registry's LLM versions, the adversarial archive cases, the path scan)."""

import io
import json
import tarfile
import zipfile

import numpy as np
from safetensors.numpy import save as safetensors_bytes

CONFIG = {"model_type": "gpt2", "n_positions": 128, "vocab_size": 16}
TOKENIZER_CONFIG = {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": "{{ messages }}"}


def hf_files(*, extra: dict | None = None, config: dict | None = None) -> dict[str, bytes]:
    files = {
        "config.json": json.dumps(config or CONFIG).encode(),
        "model.safetensors": safetensors_bytes({"wte": np.zeros((16, 4), dtype=np.float32)}),
        "tokenizer.json": b'{"version": "1.0", "model": {"type": "WordLevel", "vocab": {}}}',
        "tokenizer_config.json": json.dumps(TOKENIZER_CONFIG).encode(),
    }
    files.update(extra or {})
    return files


def tar_gz(files: dict[str, bytes], *, links: dict[str, str] | None = None, prefix: str = "") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(prefix + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return buffer.getvalue()


def zipped(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buffer.getvalue()
