"""A synthetic recommendation world whose next-item distribution is known.

Items have content vectors (what a text or image encoder would give): `topics` cluster
centres on the unit sphere, each item one centre plus noise, and a popularity. A user has a
hidden taste (a mix of two topics). Each next event is drawn from

    p(j | previous item i, taste t) = softmax_j( affinity <z_i, z_j> + taste_weight <t, z_j> + pop_j )

a first-order chain under a user-level taste: a model must read the whole history to infer the
taste and the last item to follow the chain. The oracle knows both, so its HR@10 for a
history is exactly the probability mass of its ten most likely items; any model's expected
HR@10 is the mass of the ten items it returns (`expected_hit_rate`), with no sampling noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class WorldConfig:
    items: int = 1000
    dim: int = 16
    topics: int = 24
    affinity: float = 6.0  # weight of the previous item's similarity
    taste_weight: float = 4.0  # weight of the user's hidden taste
    popularity: float = 0.5  # spread of item popularity (log scale)
    item_noise: float = 0.45  # how far items scatter around their topic
    min_length: int = 8
    max_length: int = 40
    seed: int = 11


class World:
    def __init__(self, config: WorldConfig | None = None):
        self.config = config = config or WorldConfig()
        rng = np.random.default_rng(config.seed)
        centres = _unit(rng.standard_normal((config.topics, config.dim)))
        self.item_topic = rng.integers(0, config.topics, config.items)
        self.item_vectors = _unit(
            centres[self.item_topic] + config.item_noise * rng.standard_normal((config.items, config.dim))
        )
        self.popularity = config.popularity * rng.standard_normal(config.items)
        self.centres = centres
        self.item_ids = np.arange(1, config.items + 1, dtype=np.int64) * 7 + 100_000  # ids are not row numbers

    def tastes(self, users: int, rng: np.random.Generator) -> np.ndarray:
        pairs = rng.integers(0, self.config.topics, (users, 2))
        mix = rng.uniform(0.3, 0.7, (users, 1))
        return _unit(mix * self.centres[pairs[:, 0]] + (1 - mix) * self.centres[pairs[:, 1]])

    def next_probabilities(self, previous_rows: np.ndarray, tastes: np.ndarray) -> np.ndarray:
        """float64 [U, items]: the true next-item distribution after each user's last item."""
        c = self.config
        vectors = self.item_vectors.astype(np.float32)
        logits = c.affinity * vectors[previous_rows] @ vectors.T
        logits += c.taste_weight * tastes.astype(np.float32) @ vectors.T + self.popularity.astype(np.float32)
        logits -= logits.max(axis=1, keepdims=True)
        probs = np.exp(logits, out=logits)
        probs /= probs.sum(axis=1, keepdims=True)
        return probs.astype(np.float64)

    def sequences(self, users: int, *, seed: int, length: int | None = None) -> tuple[list[np.ndarray], np.ndarray]:
        """(item rows per user, oldest first; tastes): lengths uniform in [min_length, max_length]
        unless `length` is given."""
        c = self.config
        rng = np.random.default_rng(seed)
        tastes = self.tastes(users, rng)
        lengths = np.full(users, length) if length else rng.integers(c.min_length, c.max_length + 1, users)
        rows = np.zeros((users, int(lengths.max())), dtype=np.int64)
        first = self.next_probabilities(rng.integers(0, c.items, users), tastes)
        rows[:, 0] = _draw(first, rng)
        for step in range(1, rows.shape[1]):
            rows[:, step] = _draw(self.next_probabilities(rows[:, step - 1], tastes), rng)
        return [rows[u, : lengths[u]] for u in range(users)], tastes

    def holdout(self, users: int, *, seed: int) -> dict[str, np.ndarray]:
        """Histories (rows, -1 padded on the right), their lengths, the sampled next item and the
        true next-item distribution: what the benchmark and the build's gates judge on."""
        sequences, tastes = self.sequences(users, seed=seed)
        width = max(len(s) for s in sequences) - 1
        history = np.full((users, width), -1, dtype=np.int64)
        for u, s in enumerate(sequences):
            history[u, : len(s) - 1] = s[:-1]
        lengths = np.array([len(s) - 1 for s in sequences], dtype=np.int64)
        last = history[np.arange(users), lengths - 1]
        return {
            "history": history,
            "length": lengths,
            "next_row": np.array([s[-1] for s in sequences], dtype=np.int64),
            "next_probs": self.next_probabilities(last, tastes),
        }


def oracle_hit_rate(next_probs: np.ndarray, k: int = 10) -> float:
    """The oracle's expected HR@k: the mass of each history's k most likely items, averaged."""
    top = np.partition(next_probs, -k, axis=1)[:, -k:]
    return float(top.sum(axis=1).mean())


def expected_hit_rate(next_probs: np.ndarray, recommended_rows: list[np.ndarray], k: int = 10) -> float:
    """A recommender's expected HR@k: the true mass of the (at most k) item rows it returned."""
    return float(
        np.mean([next_probs[u, rows[:k]].sum() if len(rows) else 0.0 for u, rows in enumerate(recommended_rows)])
    )


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _draw(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    cumulative = probs.cumsum(axis=1)
    return (cumulative < rng.random((len(probs), 1)) * cumulative[:, -1:]).sum(axis=1).clip(0, probs.shape[1] - 1)
