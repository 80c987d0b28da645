"""An uploaded LLM model directory: a .tar.gz/.tgz/.tar or .zip of a Hugging Face format
directory (config.json, *.safetensors weights, tokenizer files), unpacked and checked
without running or unpickling anything in it.

- Paths: tar members go through the standard library's `tarfile.data_filter` (absolute
  paths, `..`, links leaving the directory, devices refused) and links are refused
  outright (a model directory needs none); zip members are checked the same way by name
  (zipfile has no filter) and symlink entries are refused.
- Sizes: at most LLM_MAX_FILES members and LLM_MAX_DIR_MB unpacked, counted from what is
  actually written (a zip member that inflates past its declared size is refused).
- Weights: safetensors only. Pickle-based formats (*.bin, *.pt, *.pth, *.pkl, *.ckpt, ...)
  are refused by name, whatever they hold; each *.safetensors header is parsed by the
  `safetensors` library (a bad header is a 400).
- config.json must be a JSON object; the tokenizer is recorded from its files
  (tokenizer.json, tokenizer.model, vocab.json, ...) and tokenizer_config.json's class and
  chat template; context_length from the config's max_position_embeddings (or n_positions,
  max_seq_len) unless given, and never above it.

`unpack(archive, filename, dest)` returns what it found (`LLMDir`); InvalidInput (400, a
code naming the problem) for everything refused.
"""

from __future__ import annotations

import json
import shutil
import stat
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from kernel.errors import InvalidInput
from registry import conf as registry_conf

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".joblib", ".npy", ".h5", ".msgpack")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "spiece.model",
    "tokenizer_config.json",
    "special_tokens_map.json",
)
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "n_ctx")
CONFIG_MAX_BYTES = 1 << 20
COPY_CHUNK = 1 << 20


@dataclass
class LLMDir:
    root: Path  # the directory holding config.json
    files: list[str] = field(default_factory=list)
    size: int = 0
    context_length: int | None = None  # from config.json, when it says
    tokenizer: dict = field(default_factory=dict)
    model_type: str = ""


def _limits() -> tuple[int, int]:
    return int(registry_conf.get("LLM_MAX_FILES")), int(registry_conf.get("LLM_MAX_DIR_MB")) * 1024 * 1024


def _bad(message: str, code: str) -> InvalidInput:
    return InvalidInput(f"archive: {message}", code=code, field="archive")


def _check_name(name: str) -> PurePosixPath:
    """The member's path inside the directory; `.` (what `tar -C dir .` writes first) is the
    directory itself, with no parts."""
    path = PurePosixPath(name)
    if (
        not name
        or "\\" in name
        or "\x00" in name
        or path.is_absolute()
        or ".." in path.parts
        or (path.parts and ":" in path.parts[0])
    ):
        raise _bad(f"member {name[:200]!r} has a path outside the model directory.", "archive_unsafe_path")
    return path


def _refuse_pickles(name: str) -> None:
    if name.lower().endswith(PICKLE_SUFFIXES):
        raise _bad(
            f"{name[:200]!r} is a pickle-based weight file; pickles can run code when loaded and are never "
            "opened here. Save the weights as safetensors (model.save_pretrained(dir, safe_serialization=True)).",
            "pickle_weights",
        )


def _unpack_tar(archive: Path, dest: Path) -> None:
    max_files, max_bytes = _limits()
    total = count = 0
    try:
        with tarfile.open(archive, mode="r:*") as tar:
            for member in tar:
                count += 1
                if count > max_files:
                    raise _bad(f"more than {max_files} members (LLM_MAX_FILES).", "archive_too_many_files")
                if member.issym() or member.islnk():
                    raise _bad(f"member {member.name[:200]!r} is a link; send the files themselves.", "archive_link")
                _check_name(member.name)
                try:
                    member = tarfile.data_filter(member, str(dest))
                except tarfile.FilterError as exc:
                    raise _bad(f"member {member.name[:200]!r} is refused: {exc}", "archive_unsafe_path") from None
                if member.isdir():
                    continue
                if not member.isfile():
                    raise _bad(f"member {member.name[:200]!r} is not a regular file.", "archive_special_file")
                _refuse_pickles(member.name)
                total += member.size
                if total > max_bytes:
                    raise _bad(f"unpacks to more than {max_bytes >> 20} MB (LLM_MAX_DIR_MB).", "archive_too_large")
                tar.extract(member, dest, filter="data")
    except tarfile.TarError as exc:
        raise _bad(f"not a readable tar archive: {exc}", "archive_unreadable") from None


def _unpack_zip(archive: Path, dest: Path) -> None:
    max_files, max_bytes = _limits()
    total = 0
    try:
        with zipfile.ZipFile(archive) as zf:
            infos = zf.infolist()
            if len(infos) > max_files:
                raise _bad(f"more than {max_files} members (LLM_MAX_FILES).", "archive_too_many_files")
            for info in infos:
                path = _check_name(info.filename)
                if stat.S_ISLNK(info.external_attr >> 16):
                    raise _bad(f"member {info.filename[:200]!r} is a link; send the files themselves.", "archive_link")
                if info.is_dir():
                    (dest / path).mkdir(parents=True, exist_ok=True)
                    continue
                _refuse_pickles(info.filename)
                target = dest / path
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(target, "wb") as out:
                    while chunk := src.read(COPY_CHUNK):
                        total += len(chunk)
                        if total > max_bytes:
                            raise _bad(
                                f"unpacks to more than {max_bytes >> 20} MB (LLM_MAX_DIR_MB).", "archive_too_large"
                            )
                        out.write(chunk)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError) as exc:
        raise _bad(f"not a readable zip archive: {exc}", "archive_unreadable") from None


def _model_root(dest: Path) -> Path:
    """The directory with config.json: the archive's top, or its one top-level directory."""
    if (dest / "config.json").is_file():
        return dest
    entries = [p for p in dest.iterdir() if not p.name.startswith(".")]
    if len(entries) == 1 and entries[0].is_dir() and (entries[0] / "config.json").is_file():
        return entries[0]
    raise _bad(
        "no config.json at the top of the archive (or of its one top-level directory); send a Hugging Face "
        "format model directory (config.json, *.safetensors, tokenizer files).",
        "not_a_model_dir",
    )


def _read_json(path: Path, what: str) -> dict:
    if path.stat().st_size > CONFIG_MAX_BYTES:
        raise _bad(f"{what} is over {CONFIG_MAX_BYTES >> 10} KB.", "bad_model_config")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise _bad(f"{what} is not valid JSON: {exc}", "bad_model_config") from None
    if not isinstance(doc, dict):
        raise _bad(f"{what} is not a JSON object.", "bad_model_config")
    return doc


def _check_weights(root: Path, files: list[str]) -> None:
    from safetensors import SafetensorError, safe_open

    weights = [name for name in files if name.endswith(".safetensors")]
    if not weights:
        raise _bad("no *.safetensors weights in the model directory.", "no_weights")
    for name in weights:
        try:
            with safe_open(str(root / name), framework="np") as handle:
                handle.keys()
        except (SafetensorError, OSError, ValueError) as exc:
            raise _bad(f"{name!r} is not a readable safetensors file: {exc}", "bad_weights") from None


def _tokenizer(root: Path, files: list[str]) -> dict:
    present = sorted(name for name in files if PurePosixPath(name).name in TOKENIZER_FILES)
    if not any(
        PurePosixPath(n).name in ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")
        for n in present
    ):
        raise _bad(
            "no tokenizer in the model directory (tokenizer.json, tokenizer.model, vocab.json or vocab.txt).",
            "no_tokenizer",
        )
    doc = {"files": present, "name": "", "chat_template": False}
    if (root / "tokenizer_config.json").is_file():
        config = _read_json(root / "tokenizer_config.json", "tokenizer_config.json")
        doc["name"] = str(config.get("tokenizer_class") or "")[:100]
        doc["chat_template"] = bool(config.get("chat_template"))
    if (root / "chat_template.jinja").is_file():
        doc["chat_template"] = True
    return doc


def unpack(archive: Path, filename: str, dest: Path) -> LLMDir:
    """Unpack `archive` (named `filename` by the client) into the empty directory `dest` and check it."""
    lower = (filename or "").lower()
    if lower.endswith((".tar.gz", ".tgz", ".tar")):
        _unpack_tar(archive, dest)
    elif lower.endswith(".zip"):
        _unpack_zip(archive, dest)
    else:
        raise _bad(f"{filename[:200]!r} is not a .tar.gz, .tgz, .tar or .zip archive.", "archive_format")
    root = _model_root(dest)
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    config = _read_json(root / "config.json", "config.json")
    _check_weights(root, files)
    found = LLMDir(
        root=root,
        files=files,
        size=sum((root / name).stat().st_size for name in files),
        tokenizer=_tokenizer(root, files),
        model_type=str(config.get("model_type") or "")[:64],
    )
    for key in CONTEXT_KEYS:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            found.context_length = value
            break
    return found


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
