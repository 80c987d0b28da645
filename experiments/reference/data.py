"""Synthetic click logs with a learnable signal.

Each categorical feature draws a category from a Zipf-like distribution and emits its
hashed id (a large int64, as a production feature hasher would); the label is drawn
from a hidden teacher: dense weights, per-category weights on a few features, one
dense x dense and one category x category interaction. `signal_seed` fixes the teacher,
`seed` the sample, so train and validation sets share one world.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

N_DENSE = 13
N_SPARSE = 26
CATEGORIES = 2000  # distinct raw values per categorical feature
HASH_SPACE = 1 << 40


@dataclass
class ClickLog:
    dense: np.ndarray  # float32 [n, 13]
    sparse: np.ndarray  # int64 [n, 26] hashed ids
    label: np.ndarray  # float32 [n]

    def __len__(self):
        return len(self.label)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"dense": self.dense, "sparse": self.sparse, "label": self.label}


def _teacher(signal_seed: int):
    rng = np.random.default_rng(signal_seed)
    return {
        "dense_w": rng.normal(0, 0.5, N_DENSE),
        "cat_w": rng.normal(0, 1.0, (8, CATEGORIES)),  # the first 8 features carry signal
        "cross_w": rng.normal(0, 1.0, (50, 50)),  # feature 0 x feature 1 on their top categories
        "hash_mult": rng.integers(1 << 20, 1 << 30, N_SPARSE) * 2 + 1,
    }


def generate(rows: int, *, seed: int = 0, signal_seed: int = 1234, base_rate: float = -1.6) -> ClickLog:
    teacher = _teacher(signal_seed)
    rng = np.random.default_rng(seed)
    dense = rng.standard_normal((rows, N_DENSE)).astype(np.float32)
    # Zipf-like categories: a few head values, a long tail.
    categories = np.minimum(rng.zipf(1.3, size=(rows, N_SPARSE)) - 1, CATEGORIES - 1)
    categories = (categories + rng.integers(0, 3, size=(rows, N_SPARSE)) * (categories > 20)) % CATEGORIES
    sparse = ((categories.astype(np.int64) + 1) * teacher["hash_mult"] + np.arange(N_SPARSE) * 7919) % HASH_SPACE
    logit = base_rate + dense.astype(np.float64) @ teacher["dense_w"]
    logit += sum(teacher["cat_w"][f, categories[:, f]] for f in range(8))
    logit += 0.8 * dense[:, 0] * dense[:, 1]
    top = (categories[:, 0] < 50) & (categories[:, 1] < 50)
    logit[top] += teacher["cross_w"][categories[top, 0], categories[top, 1]]
    label = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    return ClickLog(dense=dense, sparse=sparse.astype(np.int64), label=label)
