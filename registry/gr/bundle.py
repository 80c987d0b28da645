"""The bundle a generative recommender version holds (its file_path, a content-addressed
directory), checked before it is stored and again before a build reads it. Nothing in it is
executed or unpickled: graphs are ONNX protobufs (registry/onnx_files.py), arrays are NPZ read
with allow_pickle=False, the manifest is JSON.

    manifest.json   {"format": "modelplane-gr/1", "levels", "codes_per_level", "layers",
                     "d_model", "max_history"}
    encode.onnx     codes [N, levels] -> new_k, new_v [layers, N, d_model]
    extend.onnx     past_k, past_v [layers, P, d_model], codes -> new_k, new_v
    decode.onnx     past_k, past_v, tokens [B, s] -> logits [B, codes_per_level]
    codebook.npz    centroids float32 [levels, codes_per_level, dim] (residual k-means):
                    encodes new items' embeddings into semantic ids for a new catalog version
    holdout.npz     history int64 [U, H] (item ids, -1 padded on the right), length int64 [U],
                    next_item int64 [U]: users the build's beam gates judge on

The catalog (item map and trie) is not in the bundle: it is its own versioned object
(ItemCatalogVersion) that the version names.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kernel.errors import InvalidInput
from registry.gr.runtime import (
    DECODE_INPUTS,
    DECODE_OUTPUTS,
    ENCODE_INPUTS,
    ENCODE_OUTPUTS,
    EXTEND_INPUTS,
    EXTEND_OUTPUTS,
    GRAPH_FILES,
)

FORMAT = "modelplane-gr/1"
MANIFEST = "manifest.json"
CODEBOOK = "codebook.npz"
HOLDOUT = "holdout.npz"
FILES = (MANIFEST, *GRAPH_FILES.values(), CODEBOOK, HOLDOUT)
MANIFEST_MAX_BYTES = 64 << 10
BOUNDS = {
    "levels": (1, 8),
    "codes_per_level": (2, 4096),
    "layers": (1, 64),
    "d_model": (1, 8192),
    "max_history": (1, 4096),
}
MAX_HOLDOUT_USERS = 100_000
GRAPH_IO = {
    "encode": (ENCODE_INPUTS, ENCODE_OUTPUTS),
    "extend": (EXTEND_INPUTS, EXTEND_OUTPUTS),
    "decode": (DECODE_INPUTS, DECODE_OUTPUTS),
}


@dataclass(frozen=True)
class BundleInfo:
    levels: int
    codes_per_level: int
    layers: int
    d_model: int
    max_history: int
    codebook_sha256: str
    holdout_users: int
    size: int
    signatures: dict  # graph role -> registry signature (registry/onnx_files.signature_of)

    def manifest(self) -> dict:
        return {
            "format": FORMAT,
            **{k: getattr(self, k) for k in ("levels", "codes_per_level", "layers", "d_model", "max_history")},
        }


def _bad(message: str, code: str = "bundle_invalid") -> InvalidInput:
    return InvalidInput(f"bundle: {message}", code=code, field="bundle")


def _manifest(root: Path) -> dict:
    path = root / MANIFEST
    if path.stat().st_size > MANIFEST_MAX_BYTES:
        raise _bad(f"{MANIFEST} is over {MANIFEST_MAX_BYTES} bytes")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _bad(f"{MANIFEST} is not JSON: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise _bad(f'{MANIFEST} must be a JSON object with "format": "{FORMAT}"')
    for key, (low, high) in BOUNDS.items():
        value = manifest.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise _bad(f"{MANIFEST}: {key} must be a whole number in {low}..{high}, got {str(value)[:40]!r}")
    return manifest


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an NPZ file, never unpickling (an object array is refused)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except ValueError as exc:
        raise _bad(f"{path.name} holds an array that needs pickle to load ({exc}); save plain arrays") from None
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise _bad(f"{path.name} does not read as NPZ: {exc}") from None


def _graphs(root: Path, manifest: dict) -> dict:
    from registry import onnx_files

    signatures = {}
    for role, filename in GRAPH_FILES.items():
        signature = onnx_files.inspect(root / filename, field="bundle")
        inputs, outputs = GRAPH_IO[role]
        names_in = [s["name"] for s in signature["inputs"]]
        names_out = [s["name"] for s in signature["outputs"]]
        if names_in != list(inputs) or names_out != list(outputs):
            raise _bad(
                f"{filename} takes {names_in} and gives {names_out}; the contract is {list(inputs)} -> {list(outputs)}",
                "bundle_signature",
            )
        for spec in signature["inputs"] + signature["outputs"]:
            if spec["name"] in ("past_k", "past_v", "new_k", "new_v"):
                layers, _, width = ([*spec["shape"], -1, -1, -1])[:3]
                wanted = (manifest["layers"], manifest["d_model"])
                known = spec["name"].startswith("past")  # an exporter may leave output sizes symbolic
                if len(spec["shape"]) != 3 or any(
                    have != want and (known or have != -1) for have, want in zip((layers, width), wanted)
                ):
                    raise _bad(
                        f"{filename}: {spec['name']} has shape {spec['shape']}; the manifest says "
                        f"[{manifest['layers']}, -1, {manifest['d_model']}]",
                        "bundle_signature",
                    )
        signatures[role] = signature
    return signatures


def _codebook(root: Path, manifest: dict) -> np.ndarray:
    arrays = read_npz(root / CODEBOOK)
    centroids = arrays.get("centroids")
    shape = (manifest["levels"], manifest["codes_per_level"])
    if centroids is None or centroids.ndim != 3 or centroids.shape[:2] != shape or centroids.dtype.kind != "f":
        raise _bad(f"{CODEBOOK} needs centroids, float [{shape[0]}, {shape[1]}, dim]")
    if not np.isfinite(centroids).all():
        raise _bad(f"{CODEBOOK}: centroids hold NaN or infinity")
    return centroids


def read_holdout(root: Path) -> dict[str, np.ndarray]:
    arrays = read_npz(Path(root) / HOLDOUT)
    history, length, next_item = (arrays.get(k) for k in ("history", "length", "next_item"))
    if history is None or length is None or next_item is None:
        raise _bad(f"{HOLDOUT} needs history [U, H], length [U] and next_item [U]")
    if history.ndim != 2 or length.shape != (len(history),) or next_item.shape != (len(history),):
        raise _bad(f"{HOLDOUT}: history is [U, H], length and next_item are [U]")
    if not all(a.dtype.kind in "iu" for a in (history, length, next_item)):
        raise _bad(f"{HOLDOUT}: history, length and next_item are integer arrays")
    if not 1 <= len(history) <= MAX_HOLDOUT_USERS:
        raise _bad(f"{HOLDOUT}: 1..{MAX_HOLDOUT_USERS} users")
    if (length < 1).any() or (length > history.shape[1]).any():
        raise _bad(f"{HOLDOUT}: every length is 1..{history.shape[1]} (the history's width)")
    return {
        "history": history.astype(np.int64),
        "length": length.astype(np.int64),
        "next_item": next_item.astype(np.int64),
    }


def inspect_bundle(root: Path) -> BundleInfo:
    """What the registry keeps about the bundle at `root`, or InvalidInput naming the problem."""
    root = Path(root)
    present = sorted(p.name for p in root.iterdir())
    missing = [name for name in FILES if name not in present]
    extra = [name for name in present if name not in FILES]
    if missing or extra:
        raise _bad(
            (f"missing {', '.join(missing)}" if missing else "")
            + ("; " if missing and extra else "")
            + (f"unexpected {', '.join(extra[:5])}" if extra else "")
            + f" (a bundle holds exactly {', '.join(FILES)})"
        )
    if any(not (root / name).is_file() or (root / name).is_symlink() for name in FILES):
        raise _bad("every bundle entry is a regular file (no directories or links)")
    manifest = _manifest(root)
    signatures = _graphs(root, manifest)
    _codebook(root, manifest)
    holdout = read_holdout(root)
    from registry import storage

    return BundleInfo(
        **{k: manifest[k] for k in BOUNDS},
        codebook_sha256=storage.sha256_of(root / CODEBOOK),
        holdout_users=len(holdout["history"]),
        size=sum((root / name).stat().st_size for name in FILES),
        signatures=signatures,
    )


def codebook_of(root: Path) -> np.ndarray:
    return read_npz(Path(root) / CODEBOOK)["centroids"]
