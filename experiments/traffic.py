"""Traffic and clicks for the demo, drawn from the reference data generator's ground truth.

Each request is a user asking for one of `k` candidate items (rows of the reference click
log); the served model scores all `k` (one batched /infer call through the gateway, so
the user's sticky arm decides which model), the top-scored item is shown, and the user
clicks it with the item's *true* probability under the generator's hidden teacher. A
model that ranks better shows items with a higher true CTR: a better-trained candidate
earns a real lift, a copy of the control earns none.
"""

from __future__ import annotations

import numpy as np

from experiments.reference import data

MOD = data.HASH_SPACE


def true_click_probability(log: data.ClickLog, *, signal_seed: int = 1234, base_rate: float = -1.6) -> np.ndarray:
    """P(click) of each row under the teacher that generated it (categories recovered from
    the hashed ids: the hash multiplier is odd, so it is invertible modulo 2^40)."""
    teacher = data._teacher(signal_seed)
    mult = teacher["hash_mult"].astype(object)
    inv = np.array([pow(int(m), -1, MOD) for m in mult], dtype=object)
    offsets = (np.arange(data.N_SPARSE) * 7919).astype(object)
    sparse = log.sparse.astype(object)
    categories = (((sparse - offsets) % MOD) * inv % MOD - 1).astype(np.int64)
    dense = log.dense.astype(np.float64)
    logit = base_rate + dense @ teacher["dense_w"]
    logit += sum(teacher["cat_w"][f, categories[:, f]] for f in range(8))
    logit += 0.8 * dense[:, 0] * dense[:, 1]
    top = (categories[:, 0] < 50) & (categories[:, 1] < 50)
    logit[top] += teacher["cross_w"][categories[top, 0], categories[top, 1]]
    return 1 / (1 + np.exp(-logit))


def show_and_click(scores: np.ndarray, truth: np.ndarray, rng: np.random.Generator) -> tuple[int, bool]:
    """The top-scored item is shown; the click is drawn from its true probability."""
    shown = int(np.argmax(scores))
    return shown, bool(rng.random() < truth[shown])


class GrUsers:
    """Simulated users of a generative recommender (experiments/gr/world.py): each has a hidden
    taste and a history drawn from the world. Asked for `k` recommendations, the user then
    consumes its next item, drawn from the world's true next-item distribution, and clicks when
    that item is among the recommendations (a hit): a model with a higher HR@k earns
    proportionally more clicks, a copy of the control none more. The item consumed joins the
    history either way, as a session goes on."""

    def __init__(self, world, users: int, *, seed: int, history: int = 12, keep: int = 64):
        sequences, self.tastes = world.sequences(users, seed=seed, length=history)
        self.world = world
        self.rows = [list(map(int, s)) for s in sequences]
        self.keep = keep

    def history(self, user: int) -> list[int]:
        """The catalog item ids of the user's recent history, oldest first."""
        return [int(self.world.item_ids[row]) for row in self.rows[user][-self.keep :]]

    def consume(self, user: int, recommended: list[int], rng: np.random.Generator) -> bool:
        probs = self.world.next_probabilities(np.array([self.rows[user][-1]]), self.tastes[user : user + 1])[0]
        row = int(rng.choice(len(probs), p=probs / probs.sum()))  # computed in float32: sum to 1 again
        self.rows[user].append(row)
        del self.rows[user][: -self.keep]
        return int(self.world.item_ids[row]) in set(recommended)
