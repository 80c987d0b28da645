"""A SASRec-style baseline (Kang & McAuley, 2018): item-id embeddings, a causal transformer,
next-item scores by a dot product with every item's embedding, full-softmax cross-entropy.
The benchmark trains it on the same world and sequences as the generative recommender and
compares their HR@10 with the oracle's."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class SASRec(nn.Module):
    def __init__(
        self,
        items: int,
        *,
        d_model: int = 64,
        heads: int = 2,
        layers: int = 2,
        max_history: int = 50,
        dropout: float = 0.1,
    ):
        super().__init__()
        self.items = nn.Embedding(items + 1, d_model, padding_idx=0)  # row 0 pads; item row r is r + 1
        self.positions = nn.Embedding(max_history, d_model)
        layer = nn.TransformerEncoderLayer(
            d_model, heads, dim_feedforward=2 * d_model, dropout=dropout, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.max_history = max_history

    def forward(self, rows):
        """rows int64 [B, T] (item row + 1, 0 pads) -> scores [B, T, items] for the next item."""
        length = rows.shape[1]
        x = self.items(rows) + self.positions(torch.arange(length))
        mask = nn.Transformer.generate_square_subsequent_mask(length)
        h = self.norm(self.encoder(x, mask=mask, is_causal=True))
        return h @ self.items.weight[1:].T


def train_sasrec(
    sequences: list[np.ndarray],
    items: int,
    *,
    epochs: int = 8,
    batch_size: int = 64,
    lr: float = 3e-3,
    max_history: int = 50,
    seed: int = 0,
    threads: int = 1,
) -> SASRec:
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    rng = np.random.default_rng(seed)
    model = SASRec(items, max_history=max_history)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    width = min(max(len(s) for s in sequences), max_history + 1)
    rows = np.zeros((len(sequences), width), dtype=np.int64)
    for u, s in enumerate(sequences):
        s = s[-width:]
        rows[u, : len(s)] = s + 1
    data = torch.from_numpy(rows)
    for _ in range(epochs):
        model.train()
        order = torch.from_numpy(rng.permutation(len(sequences)))
        for start in range(0, len(sequences), batch_size):
            batch = data[order[start : start + batch_size]]
            scores = model(batch[:, :-1])
            targets = batch[:, 1:] - 1
            valid = targets >= 0
            loss = F.cross_entropy(scores[valid], targets[valid])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.eval()


def recommend_sasrec(model: SASRec, histories: list[np.ndarray], k: int = 10) -> list[np.ndarray]:
    """The top-k item rows after each history (its last max_history items)."""
    out = []
    with torch.no_grad():
        for history in histories:
            rows = torch.from_numpy(np.asarray(history[-model.max_history :], dtype=np.int64) + 1)[None]
            scores = model(rows)[0, -1]
            out.append(torch.topk(scores, k).indices.numpy())
    return out
