"""An item catalog version's files (ItemCatalogVersion.path, content-addressed), written and
checked here only:

    items.npz   item_id int64 [n] (unique), semantic_id int64 [n, levels] (unique rows,
                each code in [0, codes_per_level))
    trie.npz    the trie compiled from them (registry/gr/trie.py), checked against them

`check_items` refuses what cannot be a catalog with InvalidInput naming the problem; the
caller stores the directory `write_catalog` made.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kernel.errors import InvalidInput
from registry.gr import trie as tries
from registry.gr.runtime import ItemMap, Trie

ITEMS = "items.npz"
TRIE = "trie.npz"


def _bad(message: str, code: str = "catalog_invalid") -> InvalidInput:
    return InvalidInput(f"file: {message}", code=code, field="file")


def check_items(
    item_id, semantic_id, *, levels: int, codes_per_level: int, max_items: int
) -> tuple[np.ndarray, np.ndarray]:
    """(item ids int64 [n], semantic ids int64 [n, levels]) checked: shapes, ranges, uniqueness."""
    item_id, semantic_id = np.asarray(item_id), np.asarray(semantic_id)
    if item_id.ndim != 1 or item_id.dtype.kind not in "iu":
        raise _bad("item_id must be a one-dimensional integer array")
    if not 1 <= len(item_id) <= max_items:
        raise _bad(
            f"{len(item_id)} items; a catalog version holds 1..{max_items} (GR_CATALOG_MAX_ITEMS)", "catalog_too_large"
        )
    if item_id.dtype.kind == "u" and item_id.size and int(item_id.max()) > np.iinfo(np.int64).max:
        raise _bad("item ids must fit a signed 64-bit integer")
    item_id = item_id.astype(np.int64)
    if (item_id < 0).any():
        raise _bad("item ids are non-negative")
    if semantic_id.shape != (len(item_id), levels) or semantic_id.dtype.kind not in "iu":
        raise _bad(f"semantic_id must be an integer array [{len(item_id)}, {levels}] (one code per level)")
    semantic_id = semantic_id.astype(np.int64)
    if (semantic_id < 0).any() or (semantic_id >= codes_per_level).any():
        raise _bad(f"every code is in 0..{codes_per_level - 1}", "catalog_code_range")
    if len(np.unique(item_id)) != len(item_id):
        raise _bad("item ids repeat; each item appears once", "catalog_duplicate_item")
    if len(np.unique(semantic_id, axis=0)) != len(semantic_id):
        raise _bad(
            "two items share a semantic id; resolve collisions before upload (or send embeddings)", "catalog_collision"
        )
    return item_id, semantic_id


def write_catalog(dest: Path, item_id: np.ndarray, semantic_id: np.ndarray, *, codes_per_level: int) -> Path:
    """items.npz and its compiled, checked trie.npz in `dest` (created)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    np.savez(dest / ITEMS, item_id=item_id, semantic_id=semantic_id)
    trie = tries.compile_trie(semantic_id, codes_per_level=codes_per_level)
    tries.check_trie(trie, ItemMap(item_id, semantic_id))
    tries.save_trie(trie, dest / TRIE)
    return dest


def read_items(root: Path) -> ItemMap:
    return ItemMap.load(Path(root) / ITEMS)


def read_trie(root: Path) -> Trie:
    return Trie.load(Path(root) / TRIE)
