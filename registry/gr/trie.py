"""The catalog trie: compiled from an item map (item id -> semantic id), checked against it,
and stored as NPZ arrays (never a pickle). The runtime side (lookups during beam search) is
registry/gr/runtime.py's Trie, which the Triton model carries as it is.

compile_trie sorts the code tuples, numbers nodes level by level (node 0 the root) and
writes each node's children as a CSR row: one pass, O(items x levels), so a catalog of a
million items compiles in seconds. check_trie walks every root-to-leaf path and compares it
with the item map: a trie that admits a tuple no item has, or misses one, is refused.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from registry.gr.runtime import ItemMap, Trie


class TrieError(ValueError):
    """The trie and the item map disagree (the message says how)."""


def compile_trie(semantic_ids: np.ndarray, *, codes_per_level: int) -> Trie:
    """The trie of `semantic_ids` (int [n, levels], unique rows): leaf_item names the row."""
    codes = np.asarray(semantic_ids, dtype=np.int64)
    n, levels = codes.shape
    order = np.lexsort(codes.T[::-1])
    codes = codes[order]
    # A node per distinct prefix of each length; node ids level by level, in sorted order.
    level_nodes = [np.zeros(n, dtype=np.int64)]  # every row's node at depth 0: the root
    next_id = 1
    parents, edge_codes, child_ids = [], [], []
    leaf_rows = {}
    for depth in range(1, levels + 1):
        prefix = codes[:, :depth]
        new_prefix = np.ones(n, dtype=bool)
        new_prefix[1:] = np.any(prefix[1:] != prefix[:-1], axis=1)
        ids = np.cumsum(new_prefix) - 1 + next_id
        starts = np.nonzero(new_prefix)[0]
        parents.append(level_nodes[-1][starts])
        edge_codes.append(codes[starts, depth - 1])
        child_ids.append(ids[starts])
        next_id = int(ids[-1]) + 1
        level_nodes.append(ids)
        if depth == levels:
            leaf_rows = dict(zip(ids[starts].tolist(), order[starts].tolist()))
    parent = np.concatenate(parents)
    edge_code = np.concatenate(edge_codes)
    child = np.concatenate(child_ids)
    by_parent = np.lexsort((edge_code, parent))
    parent, edge_code, child = parent[by_parent], edge_code[by_parent], child[by_parent]
    offsets = np.zeros(next_id + 1, dtype=np.int64)
    np.add.at(offsets, parent + 1, 1)
    offsets = np.cumsum(offsets)
    leaf_item = np.full(next_id, -1, dtype=np.int64)
    for node, row in leaf_rows.items():
        leaf_item[node] = row
    return Trie(offsets, edge_code, child, leaf_item, levels=levels, codes_per_level=codes_per_level)


def leaves(trie: Trie) -> dict[tuple, int]:
    """Every root-to-leaf code tuple of the trie -> its leaf_item."""
    found: dict[tuple, int] = {}
    frontier = [(0, ())]
    for _ in range(trie.levels):
        step = []
        for node, path in frontier:
            for edge in range(trie.offsets[node], trie.offsets[node + 1]):
                step.append((int(trie.children[edge]), (*path, int(trie.codes[edge]))))
        frontier = step
    for node, path in frontier:
        found[path] = int(trie.leaf_item[node])
    return found


def check_trie(trie: Trie, items: ItemMap) -> None:
    """Raise TrieError when a path of the trie is no item's id, an item's id is not a path, or
    a leaf names another row than the item map's."""
    paths = leaves(trie)
    extra = [p for p in paths if p not in items.row_of]
    missing = [t for t in items.row_of if t not in paths]
    wrong = [p for p, row in paths.items() if p in items.row_of and items.row_of[p] != row]
    if extra or missing or wrong:
        raise TrieError(
            f"the trie does not match the item map: {len(extra)} path(s) no item has"
            + (f" (e.g. {list(extra[0])})" if extra else "")
            + f", {len(missing)} item id(s) with no path, {len(wrong)} leaf(s) naming another item"
        )


def save_trie(trie: Trie, path: Path) -> None:
    np.savez(
        path,
        offsets=trie.offsets,
        codes=trie.codes,
        children=trie.children,
        leaf_item=trie.leaf_item,
        levels=np.int64(trie.levels),
        codes_per_level=np.int64(trie.codes_per_level),
    )
