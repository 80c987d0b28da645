"""A small HSTU-style generative recommender over semantic ids (PyTorch).

The history is a sequence of item tokens (an item's embedding is the sum of its codes'
embeddings, plus a position). Each layer is HSTU's: one projection gives U, V, Q, K through a
SiLU; attention is pointwise, SiLU(QK^T + rab) over a constant (no softmax), so attention over
a cached prefix and over new tokens simply add up; rab is HSTU's relative attention bias, by
how far back a key is (it lifted the reference world's HR@10 from 0.20 to 0.31: recency is
what absolute positions in a variable-length window cannot say); the output is Norm(AV) gated
by U, with a residual.
 After the history the model generates an item as its semantic id, one code per
step: a generation token, then the codes chosen so far, each attending to the whole prefix's
keys and values (the KV cache) and causally to each other.

`forward_train` computes every next-item prediction of a batch of histories at once (the
decode tokens of position t see the prefix up to t), `encode` and `decode` are the two
inference graphs (registry/gr/runtime.py's contract, exported by experiments/gr/export.py).
Both paths run the same layers, so the exported graphs compute what was trained.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class GRConfig:
    levels: int = 3
    codes_per_level: int = 64
    d_model: int = 64
    heads: int = 2
    layers: int = 2
    max_history: int = 50
    dropout: float = 0.1

    def as_dict(self) -> dict:
        return asdict(self)


class HSTULayer(nn.Module):
    def __init__(self, config: GRConfig):
        super().__init__()
        d = config.d_model
        self.heads, self.head_dim = config.heads, d // config.heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.norm_in = nn.LayerNorm(d)
        self.uvqk = nn.Linear(d, 4 * d)
        self.norm_out = nn.LayerNorm(d)
        self.out = nn.Linear(d, d)
        self.dropout = nn.Dropout(config.dropout)
        self.divisor = float(config.max_history)
        # HSTU's relative attention bias: a learned bias per head for how far back a key is
        # (0 = itself or the newest item), clipped at max_history. Recency is what a first-order
        # process needs and what absolute positions in a variable-length window cannot say.
        self.rab = nn.Parameter(torch.zeros(config.heads, config.max_history + 1))
        self.max_distance = config.max_history

    def project(self, x):
        return F.silu(self.uvqk(self.norm_in(x))).chunk(4, dim=-1)  # u, v, q, k

    def finish(self, x, u, attended):
        return x + self.dropout(self.out(self.norm_out(attended) * u))

    def split(self, x):
        # explicit sizes, no -1: an empty cache (0 positions) must reshape too
        return x.unflatten(-1, (self.heads, self.head_dim))

    def scores(self, q, k, equation: str, distance=None):
        """SiLU(QK^T / sqrt(d) + rab[distance]) / max_history; `distance` (int64, the scores'
        query and key axes) indexes the bias, broadcast over the batch and level axes."""
        logits = torch.einsum(equation, self.split(q), self.split(k)) * self.scale
        if distance is not None:
            logits = logits + self.rab[:, distance.clamp(0, self.max_distance)]
        return F.silu(logits) / self.divisor


class GenerativeRecommender(nn.Module):
    def __init__(self, config: GRConfig | None = None):
        super().__init__()
        self.config = c = config or GRConfig()
        self.tokens = nn.Embedding(1 + c.levels * c.codes_per_level, c.d_model)
        self.positions = nn.Embedding(c.max_history, c.d_model)
        self.decode_positions = nn.Embedding(c.levels, c.d_model)
        self.layers = nn.ModuleList(HSTULayer(c) for _ in range(c.layers))
        self.norm = nn.LayerNorm(c.d_model)
        self.head = nn.Parameter(torch.randn(c.levels, c.d_model, c.codes_per_level) * 0.02)
        self.head_bias = nn.Parameter(torch.zeros(c.levels, c.codes_per_level))
        self.register_buffer("level_offsets", 1 + torch.arange(c.levels) * c.codes_per_level, persistent=False)
        for table in (self.tokens, self.positions, self.decode_positions):
            nn.init.normal_(table.weight, 0, 0.05)

    def item_embedding(self, codes):
        return self.tokens(codes + self.level_offsets).sum(dim=-2)

    def decode_tokens(self, codes):
        """The decode tokens that predict `codes` [..., levels]: generation token, then all but the last code."""
        shifted = codes[..., :-1] + self.level_offsets[:-1]
        return torch.cat([torch.zeros_like(codes[..., :1]), shifted], dim=-1)

    # --- training: every position of a batch at once -------------------------------------------
    def forward_train(self, codes):
        """codes int64 [B, T, levels] (padding anywhere after a history's end) -> logits
        [B, T-1, levels, codes_per_level]: position t predicts item t+1 from items 0..t."""
        _, length, levels = codes.shape
        positions = torch.arange(length, device=codes.device)
        x = self.item_embedding(codes) + self.positions(positions)
        y = self.tokens(self.decode_tokens(codes[:, 1:])) + self.decode_positions.weight
        causal = torch.ones(length, length, device=codes.device).tril()
        seen = causal[:-1]  # decode tokens of position t see prefix items 0..t
        own = torch.ones(levels, levels, device=codes.device).tril()
        back = positions[:, None] - positions[None, :]  # how far back key s is from query t
        back_decoded = back[1:]  # decode tokens of position t sit just after item t: t + 1 - s
        for layer in self.layers:
            u, v, q, k = layer.project(x)
            a = torch.einsum("bhts,bshd->bthd", layer.scores(q, k, "bthd,bshd->bhts", back) * causal, layer.split(v))
            ud, vd, qd, kd = layer.project(y)
            prefix_scores = layer.scores(qd, k, "bplhd,bshd->bhpls", back_decoded[:, None, :])
            a_prefix = torch.einsum("bhpls,bshd->bplhd", prefix_scores * seen[None, None, :, None, :], layer.split(v))
            a_own = torch.einsum(
                "bhplm,bpmhd->bplhd", layer.scores(qd, kd, "bplhd,bpmhd->bhplm") * own, layer.split(vd)
            )
            x = layer.finish(x, u, a.flatten(-2))
            y = layer.finish(y, ud, (a_prefix + a_own).flatten(-2))
        return torch.einsum("bpld,ldk->bplk", self.norm(y), self.head) + self.head_bias

    # --- inference: the two exported graphs ----------------------------------------------------
    def encode(self, past_k, past_v, codes):
        """The cache of N new history items: past_k, past_v [layers, P, d] (None for a fresh
        prefix: positions from 0), codes [N, levels] -> new_k, new_v [layers, N, d]."""
        start = 0 if past_k is None else past_k.shape[1]
        count = codes.shape[0]
        positions = torch.arange(count) + start
        x = self.item_embedding(codes) + self.positions(positions)
        own = torch.ones(count, count).tril()
        back_own = positions[:, None] - positions[None, :]
        back_past = None if past_k is None else positions[:, None] - torch.arange(start)[None, :]
        new_k, new_v = [], []
        for i, layer in enumerate(self.layers):
            u, v, q, k = layer.project(x)
            scores = layer.scores(q, k, "nhd,mhd->hnm", back_own) * own
            a = torch.einsum("hnm,mhd->nhd", scores, layer.split(v))
            if past_k is not None:
                scores = layer.scores(q, past_k[i], "nhd,shd->hns", back_past)
                a = a + torch.einsum("hns,shd->nhd", scores, layer.split(past_v[i]))
            x = layer.finish(x, u, a.flatten(-2))
            new_k.append(k)
            new_v.append(v)
        return torch.stack(new_k), torch.stack(new_v)

    def decode(self, past_k, past_v, tokens):
        """past_k, past_v [layers, P, d]; tokens [B, s] -> logits [B, codes] of level s-1."""
        steps = tokens.shape[1]
        y = self.tokens(tokens) + self.decode_positions(torch.arange(steps))
        own = torch.ones(steps, steps).tril()
        length = past_k.shape[1]
        back = (length - torch.arange(length))[None, :]  # decode tokens sit just after the last item
        for i, layer in enumerate(self.layers):
            ud, vd, qd, kd = layer.project(y)
            scores = layer.scores(qd, past_k[i], "bnhd,shd->bhns", back)
            a = torch.einsum("bhns,shd->bnhd", scores, layer.split(past_v[i]))
            a = a + torch.einsum("bhnm,bmhd->bnhd", layer.scores(qd, kd, "bnhd,bmhd->bhnm") * own, layer.split(vd))
            y = layer.finish(y, ud, a.flatten(-2))
        level = steps - 1
        return self.norm(y[:, -1]) @ self.head[level] + self.head_bias[level]


def loss(model: GenerativeRecommender, codes, lengths):
    """Mean cross-entropy of every level of every next item inside a history."""
    logits = model.forward_train(codes)
    targets = codes[:, 1:]
    valid = torch.arange(codes.shape[1] - 1, device=codes.device)[None, :] < (lengths[:, None] - 1)
    per = F.cross_entropy(logits.flatten(0, 2), targets.flatten(), reduction="none").view(targets.shape)
    return (per.sum(-1) * valid).sum() / valid.sum().clamp(min=1)
