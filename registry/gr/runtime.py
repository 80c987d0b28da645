"""What serves a generative recommender, in one self-contained module (numpy and ONNX Runtime
only): the catalog trie's lookups, the prefix cache arithmetic, and trie-constrained beam search
over semantic IDs. The factory's beam gates, the benchmark and the Triton model run this same
code: the packager copies this file next to the Triton model (`1/gr_runtime.py`), so a served
beam is the beam the gates measured.

Semantic IDs: an item is a tuple of `levels` codes, each in [0, codes_per_level). The decoder
emits one code per step; the trie (compiled by registry/gr/trie.py, stored with the catalog
version) says which codes may follow a prefix, and its leaves name the item.

Graphs (exported by experiments/gr/export.py; names are the contract):
- encode: codes int64 [N, levels] (a history's items, N >= 1) -> new_k, new_v float32
  [layers, N, d_model]: the prefix's cache, positions 0..N-1.
- extend: past_k, past_v [layers, P, d_model] (P >= 1: a cached prefix), codes [N, levels]
  -> new_k, new_v [layers, N, d_model] at positions P..P+N-1. A prefix's cache never
  changes when the history grows (causal attention), so a grown history encodes only its
  new items.
- decode: past_k, past_v [layers, P, d_model] (the whole prefix, P >= 1), tokens int64
  [B, s] (s = 1..levels: the generation token then the codes chosen so far, as decode
  tokens) -> logits float32 [B, codes_per_level] for level s-1.
No graph is ever run on an empty tensor (ONNX Runtime's kernels are not all safe on one):
a history has at least one item, and an empty past goes to encode, not extend.
Decode tokens: 0 is the generation token; code c of level l is 1 + l * codes_per_level + c.
"""

from __future__ import annotations

import numpy as np

GRAPH_FILES = {"encode": "encode.onnx", "extend": "extend.onnx", "decode": "decode.onnx"}
ENCODE_INPUTS = ("codes",)
ENCODE_OUTPUTS = ("new_k", "new_v")
EXTEND_INPUTS = ("past_k", "past_v", "codes")
EXTEND_OUTPUTS = ("new_k", "new_v")
DECODE_INPUTS = ("past_k", "past_v", "tokens")
DECODE_OUTPUTS = ("logits",)
GENERATION_TOKEN = 0


class Trie:
    """A catalog trie in CSR form: node n's children are codes[offsets[n]:offsets[n+1]] ->
    children[...]; leaf_item[n] is the item row a leaf stands for (-1 for inner nodes).
    Node 0 is the root; nodes are numbered level by level."""

    def __init__(self, offsets, codes, children, leaf_item, *, levels: int, codes_per_level: int):
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.codes = np.asarray(codes, dtype=np.int64)
        self.children = np.asarray(children, dtype=np.int64)
        self.leaf_item = np.asarray(leaf_item, dtype=np.int64)
        self.levels, self.codes_per_level = int(levels), int(codes_per_level)

    @classmethod
    def load(cls, path) -> Trie:
        with np.load(path, allow_pickle=False) as data:
            return cls(
                data["offsets"],
                data["codes"],
                data["children"],
                data["leaf_item"],
                levels=int(data["levels"]),
                codes_per_level=int(data["codes_per_level"]),
            )

    def allowed_mask(self, nodes: np.ndarray) -> np.ndarray:
        """bool [B, codes_per_level]: the codes each node may continue with."""
        starts, ends = self.offsets[nodes], self.offsets[nodes + 1]
        counts = ends - starts
        mask = np.zeros((len(nodes), self.codes_per_level), dtype=bool)
        if counts.sum() == 0:
            return mask
        rows = np.repeat(np.arange(len(nodes)), counts)
        before = np.cumsum(counts) - counts  # edges of the rows before each row
        edges = np.repeat(starts - before, counts) + np.arange(counts.sum())
        mask[rows, self.codes[edges]] = True
        return mask

    def step(self, nodes: np.ndarray, chosen: np.ndarray) -> np.ndarray:
        """The child of each node along its chosen code (-1 where the trie has none)."""
        out = np.full(len(nodes), -1, dtype=np.int64)
        for i, (node, code) in enumerate(zip(nodes.tolist(), chosen.tolist())):
            if node < 0:
                continue
            start, end = self.offsets[node], self.offsets[node + 1]
            hit = np.nonzero(self.codes[start:end] == code)[0]
            if hit.size:
                out[i] = self.children[start + hit[0]]
        return out


class ItemMap:
    """The catalog's item map: row i is item_ids[i] with semantic id semantic_ids[i]. Lookups
    by code tuple go through a dict built here, never through the trie, so a trie that
    disagrees with its item map shows as illegal ids instead of hiding them."""

    def __init__(self, item_ids, semantic_ids):
        self.item_ids = np.asarray(item_ids, dtype=np.int64)
        self.semantic_ids = np.asarray(semantic_ids, dtype=np.int64)
        self.row_of = {tuple(code): row for row, code in enumerate(self.semantic_ids.tolist())}
        self.row_of_item = {item: row for row, item in enumerate(self.item_ids.tolist())}

    @classmethod
    def load(cls, path) -> ItemMap:
        with np.load(path, allow_pickle=False) as data:
            return cls(data["item_id"], data["semantic_id"])

    def __len__(self) -> int:
        return len(self.item_ids)

    def codes_of(self, items) -> np.ndarray:
        """int64 [N, levels] codes of known item ids (KeyError names an unknown one)."""
        return self.semantic_ids[[self.row_of_item[int(item)] for item in items]]

    def items_of(self, tuples: np.ndarray) -> np.ndarray:
        """item id per code tuple, -1 for a tuple no item has (an illegal id)."""
        return np.array(
            [self.item_ids[r] if (r := self.row_of.get(tuple(t))) is not None else -1 for t in tuples.tolist()],
            dtype=np.int64,
        )


class Graphs:
    """The encode, extend and decode graphs (paths by role, GRAPH_FILES) in ONNX Runtime sessions."""

    def __init__(self, paths: dict, *, threads: int = 1, optimized: bool = True):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        if not optimized:
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        providers = ["CPUExecutionProvider"]
        self.sessions = {
            role: ort.InferenceSession(str(paths[role]), options, providers=providers) for role in GRAPH_FILES
        }

    def encode(self, past_k, past_v, codes) -> tuple[np.ndarray, np.ndarray]:
        """The cache of the whole prefix after appending `codes` [N >= 1, levels] to the cached
        one (past_k None: a fresh prefix)."""
        codes = np.ascontiguousarray(codes, dtype=np.int64)
        if past_k is None:
            return tuple(self.sessions["encode"].run(list(ENCODE_OUTPUTS), {"codes": codes}))
        new_k, new_v = self.sessions["extend"].run(
            list(EXTEND_OUTPUTS), {"past_k": past_k, "past_v": past_v, "codes": codes}
        )
        return np.concatenate([past_k, new_k], axis=1), np.concatenate([past_v, new_v], axis=1)

    def decode(self, past_k, past_v, tokens) -> np.ndarray:
        return self.sessions["decode"].run(
            list(DECODE_OUTPUTS), {"past_k": past_k, "past_v": past_v, "tokens": tokens}
        )[0]


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def beam_search(graphs: Graphs, past_k, past_v, *, width: int, levels: int, codes_per_level: int, trie: Trie | None):
    """(code tuples int64 [B, levels], scores float32 [B]) best first, B <= width: the sum of
    each level's log-probability. With a trie only continuations it holds are kept (a beam
    set smaller than `width` when the catalog is); without one every code is open."""
    tokens = np.zeros((1, 1), dtype=np.int64)  # the generation token
    scores = np.zeros(1, dtype=np.float64)
    nodes = np.zeros(1, dtype=np.int64)
    chosen = np.zeros((1, 0), dtype=np.int64)
    for level in range(levels):
        step = log_softmax(graphs.decode(past_k, past_v, tokens).astype(np.float64))
        if trie is not None:
            step = np.where(trie.allowed_mask(nodes), step, -np.inf)
        total = (scores[:, None] + step).reshape(-1)
        finite = int(np.isfinite(total).sum())
        keep = min(width, finite)
        if keep == 0:
            return np.zeros((0, levels), dtype=np.int64), np.zeros(0, dtype=np.float32)
        best = np.argpartition(-total, keep - 1)[:keep]
        best = best[np.argsort(-total[best], kind="stable")]
        parent, code = best // codes_per_level, best % codes_per_level
        scores = total[best]
        chosen = np.concatenate([chosen[parent], code[:, None]], axis=1)
        if trie is not None:
            nodes = trie.step(nodes[parent], code)
        tokens = np.concatenate([tokens[parent], (1 + level * codes_per_level + code)[:, None]], axis=1)
    return chosen, scores.astype(np.float32)


def recommend(graphs, past_k, past_v, *, width, top_k, levels, codes_per_level, trie, items: ItemMap):
    """Top `top_k` (item ids, scores, illegal count, duplicate count) of one beam search: an
    illegal beam (a tuple no item has) and a repeated item are counted and left out."""
    tuples, scores = beam_search(
        graphs, past_k, past_v, width=width, levels=levels, codes_per_level=codes_per_level, trie=trie
    )
    found = items.items_of(tuples)
    legal = found >= 0
    illegal = int((~legal).sum())
    _, first = np.unique(found[legal], return_index=True)
    keep = np.sort(np.nonzero(legal)[0][first])
    duplicates = int(legal.sum() - len(keep))
    keep = keep[:top_k]
    return found[keep], scores[keep], illegal, duplicates, tuples


# --- the prefix cache ---------------------------------------------------------------------------
def window_start(length: int, max_history: int) -> int:
    """Where a fresh encode of a history of `length` starts: its last max_history items."""
    return max(0, length - max_history)


def plan_prefix(cached: tuple | None, history: tuple, *, max_history: int, slack: int):
    """How to get the cache of `history` (item ids, oldest first) from a user's cached window
    `cached` (the items its cache holds): ("hit", start, 0): the cache is the window as is;
    ("grown", start, n): append the last n items; ("rebased" | "miss", start, 0): encode
    history[start:] afresh (the window moved on; no cached window matches).

    A fresh encode takes the history's last max_history items. When the cached window starts
    where that one would, the cache gives exactly the fresh answer (a history that grew). Else
    the window's latest place in the history is used (a client sliding its own window): it
    grows while it stays within max_history; past that it is re-encoded from
    `max_history - slack` items back, so a long history's next `slack` requests grow again."""
    fresh = window_start(len(history), max_history)
    if cached:
        size = len(cached)
        if history[fresh : fresh + size] == cached:
            new = len(history) - fresh - size
            return ("hit", fresh, 0) if new == 0 else ("grown", fresh, new)
        for start in range(len(history) - size, -1, -1):
            if history[start : start + size] == cached:
                new = len(history) - start - size
                if new == 0:
                    return "hit", start, 0
                if size + new <= max_history:
                    return "grown", start, new
                return "rebased", max(0, len(history) - (max_history - slack)), 0
    return "miss", fresh, 0


class PrefixCache:
    """Per-user prefix caches (the window of item ids a cache holds, its keys and values),
    least recently used first out, bounded in bytes: an entry that alone is over the bound is
    never kept. One per model instance: a replica holds its own users (user-affinity routing
    keeps a user on one replica)."""

    ENTRY_OVERHEAD = 256  # the dict slot, the tuple and the arrays' headers, roughly

    def __init__(self, max_bytes: int):
        from collections import OrderedDict

        self.max_bytes = int(max_bytes)
        self.entries: OrderedDict = OrderedDict()
        self.bytes = 0
        self.evictions = 0

    @staticmethod
    def size(user: str, window: tuple, past_k, past_v) -> int:
        return PrefixCache.ENTRY_OVERHEAD + len(user) + 8 * len(window) + past_k.nbytes + past_v.nbytes

    def get(self, user: str):
        entry = self.entries.get(user)
        if entry is not None:
            self.entries.move_to_end(user)
        return entry

    def put(self, user: str, window: tuple, past_k, past_v) -> None:
        self.drop(user)
        size = self.size(user, window, past_k, past_v)
        if size > self.max_bytes:
            return
        while self.entries and self.bytes + size > self.max_bytes:
            _, evicted = self.entries.popitem(last=False)
            self.bytes -= evicted[3]
            self.evictions += 1
        self.entries[user] = (window, past_k, past_v, size)
        self.bytes += size

    def drop(self, user: str) -> None:
        old = self.entries.pop(user, None)
        if old is not None:
            self.bytes -= old[3]


class Recommender:
    """One served variant: its graphs, the catalog's trie and item map, and (when serving) a
    prefix cache. `serve` is one request: the cache plan, the prefill it needs, the beam."""

    def __init__(
        self,
        graphs: Graphs,
        *,
        trie: Trie | None,
        items: ItemMap,
        levels: int,
        codes_per_level: int,
        max_history: int,
        cache: PrefixCache | None = None,
        slack: int | None = None,
    ):
        self.graphs, self.trie, self.items, self.cache = graphs, trie, items, cache
        self.levels, self.codes_per_level, self.max_history = levels, codes_per_level, max_history
        self.slack = max(1, max_history // 4) if slack is None else slack

    def prefix(self, user: str | None, history: tuple):
        """(past_k, past_v, cache result, items encoded) for `history` (item ids, oldest first)."""
        entry = self.cache.get(user) if (self.cache is not None and user is not None) else None
        result, start, new = plan_prefix(
            entry[0] if entry else None, history, max_history=self.max_history, slack=self.slack
        )
        if result == "hit":
            return entry[1], entry[2], result, 0
        if result == "grown":
            window = entry[0] + history[len(history) - new :]
            past_k, past_v = self.graphs.encode(entry[1], entry[2], self.items.codes_of(history[len(history) - new :]))
            encoded = new
        else:
            window = history[start:]
            past_k, past_v = self.graphs.encode(None, None, self.items.codes_of(window))
            encoded = len(window)
        if self.cache is not None and user is not None:
            self.cache.put(user, window, past_k, past_v)
        return past_k, past_v, result, encoded

    def serve(self, user: str | None, history: tuple, *, width: int, top_k: int) -> dict:
        import time

        started = time.perf_counter()
        past_k, past_v, result, encoded = self.prefix(user, tuple(history))
        prefilled = time.perf_counter()
        items, scores, illegal, duplicates, tuples = recommend(
            self.graphs,
            past_k,
            past_v,
            width=width,
            top_k=top_k,
            levels=self.levels,
            codes_per_level=self.codes_per_level,
            trie=self.trie,
            items=self.items,
        )
        return {
            "items": items,
            "scores": scores,
            "cache": result,
            "encoded": encoded,
            "beams": len(tuples),
            "illegal": illegal,
            "duplicates": duplicates,
            "prefill_s": prefilled - started,
            "decode_s": time.perf_counter() - prefilled,
        }
