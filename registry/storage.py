"""Content-addressed artifact store under ARTIFACT_ROOT: every storage path is made here.

Files land in `sha256/<2 hex>/<sha256><suffix>`; directories (Triton model dirs) in
`dirs/<2 hex>/<sha256>/`. Writes go to `tmp/` first and become visible with one
os.replace, so a crash leaves nothing half-visible. An Artifact's `path` is its
directory relative to the root; artifact_model_dir() finds the Triton model in it.
"""

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from django.conf import settings

from kernel.errors import InvalidInput
from registry.names import triton_name

CHUNK = 1 << 20


def root() -> Path:
    path = Path(settings.ARTIFACT_ROOT)
    path.mkdir(parents=True, exist_ok=True)
    return path


def tmp_dir() -> Path:
    path = root() / "tmp"
    path.mkdir(parents=True, exist_ok=True)
    return path


def absolute(rel_path: str) -> Path:
    """The absolute path of a stored object; refuses anything outside the store."""
    base = root().resolve()
    path = (base / rel_path).resolve()
    if base != path and base not in path.parents:
        raise ValueError(f"{rel_path!r} is outside the artifact store")
    return path


def stream_to_tmp(chunks, *, limit_bytes: int | None = None) -> tuple[Path, str, int]:
    """Write chunks to a temp file; return (path, sha256, size). Raises OverflowError past limit."""
    digest = hashlib.sha256()
    size = 0
    fd, name = tempfile.mkstemp(dir=tmp_dir(), prefix="upload-")
    try:
        with os.fdopen(fd, "wb") as fh:
            for chunk in chunks:
                size += len(chunk)
                if limit_bytes is not None and size > limit_bytes:
                    raise OverflowError(size)
                digest.update(chunk)
                fh.write(chunk)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name), digest.hexdigest(), size


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def put_file(tmp_path: Path, sha256: str, suffix: str = "") -> str:
    """Move a finished temp file into the store; idempotent for equal content."""
    rel = f"sha256/{sha256[:2]}/{sha256}{suffix}"
    dest = root() / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        tmp_path.unlink(missing_ok=True)
    else:
        os.replace(tmp_path, dest)
    return rel


def tree_sha256(directory: Path) -> str:
    """A digest of a directory's relative paths and file contents."""
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(directory)).encode() + b"\0")
        digest.update(sha256_of(path).encode())
    return digest.hexdigest()


def put_dir(staged: Path) -> tuple[str, str]:
    """Publish a staged directory content-addressed; returns (rel_path, sha256)."""
    sha = tree_sha256(staged)
    rel = f"dirs/{sha[:2]}/{sha}"
    dest = root() / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        shutil.rmtree(staged, ignore_errors=True)
    else:
        os.replace(staged, dest)
    return rel, sha


def delete_if_unreferenced(rel_path: str, still_referenced: bool) -> None:
    if still_referenced or not rel_path:
        return
    path = absolute(rel_path)
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def artifact_model_dir(artifact) -> Path:
    """The Triton model directory of an artifact: its stored path itself, or the
    `{triton name}/` directory inside it."""
    if not artifact.path:
        raise InvalidInput(
            f"artifact: artifact {artifact.pk} has no stored files.", code="artifact_missing_files", field="artifact"
        )
    try:
        base = absolute(artifact.path)
    except ValueError as exc:
        raise InvalidInput(f"artifact: {exc}", code="artifact_missing_files", field="artifact") from None
    for candidate in (base, base / triton_name(artifact)):
        if (candidate / "config.pbtxt").is_file():
            return candidate
    raise InvalidInput(
        f"artifact: {artifact.path} holds no Triton model directory (config.pbtxt).",
        code="artifact_missing_files",
        field="artifact",
    )
