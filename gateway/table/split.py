"""The traffic split every endpoint kind shares (tensor endpoints, routes.py; LLM endpoints,
gateway/table/llm.py): a weighted split without a sticky key, weighted rendezvous hashing
with one. A class using it has `live` (variants with `name` and `weight_bp`), `_bounds`
(cumulative weights), `_x` (the recurrence's state) and `_hash_prefix` (endpoint and salt)."""

from __future__ import annotations

import math
from hashlib import blake2b

GOLDEN = 0.6180339887498949  # additive recurrence: low-discrepancy split without randomness
BP = 10000


class Split:
    def choose(self, sticky_key: str | None = None):
        """The variant for one request: sticky (rendezvous) with a key, weighted split without."""
        live = self.live
        if len(live) == 1:
            return live[0]
        if sticky_key:
            return self.sticky(sticky_key)
        # Additive recurrence on the golden ratio: over any N requests each variant's
        # share is within ~1/N of its weight, and successive requests interleave.
        self._x = x = (self._x + GOLDEN) % 1.0
        point = x * BP
        for variant, bound in zip(live, self._bounds):
            if point < bound:
                return variant
        return live[-1]

    def sticky(self, key: str):
        """Weighted rendezvous hashing: the arm is a pure function of (key, endpoint, salt)
        and the variants' names and weights. Each variant gets weight/10000 of the keys,
        and changing weights only moves keys to the variants whose weight grew (the
        fewest possible)."""
        prefix = self._hash_prefix + key.encode("utf-8", "surrogatepass") + b"\x1f"
        best = None
        best_score = math.inf
        for variant in self.live:
            digest = blake2b(prefix + variant.name.encode(), digest_size=8).digest()
            u = (int.from_bytes(digest, "big") + 0.5) / 18446744073709551616.0
            score = -math.log(u) / variant.weight_bp
            if score < best_score:
                best, best_score = variant, score
        return best
