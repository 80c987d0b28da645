"""The reference CTR ranker (PyTorch): per-feature embeddings over hashed ids, a DCN-v2
cross network or a DeepFM factorization machine, and an MLP; outputs click probability.

Inputs: dense float32 [B, 13], sparse int64 [B, 26] (raw hashed ids; the model buckets
them with a remainder). Output: ctr float32 [B, 1].
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from experiments.reference.data import N_DENSE, N_SPARSE


@dataclass
class ReferenceConfig:
    vocab: int = 10_000  # hash buckets per categorical feature
    emb_dim: int = 16
    interaction: str = "dcn"  # "dcn" (DCN-v2 cross layers) or "deepfm"
    cross_layers: int = 2
    mlp: list[int] = field(default_factory=lambda: [256, 128])
    sparse_grad: bool = True  # sparse embedding gradients: fast training with big tables

    def as_dict(self) -> dict:
        return asdict(self)


class ReferenceCTR(nn.Module):
    def __init__(self, config: ReferenceConfig | None = None):
        super().__init__()
        self.config = config = config or ReferenceConfig()
        if config.interaction not in ("dcn", "deepfm"):
            raise ValueError(f"interaction must be dcn or deepfm, not {config.interaction!r}")
        self.vocab = config.vocab
        self.tables = nn.ModuleList(
            nn.Embedding(config.vocab, config.emb_dim, sparse=config.sparse_grad) for _ in range(N_SPARSE)
        )
        for table in self.tables:
            nn.init.normal_(table.weight, 0, 0.01)
        width = N_DENSE + N_SPARSE * config.emb_dim
        self.cross = nn.ModuleList(
            nn.Linear(width, width) for _ in range(config.cross_layers if config.interaction == "dcn" else 0)
        )
        layers, previous = [], width
        for size in config.mlp:
            layers += [nn.Linear(previous, size), nn.ReLU()]
            previous = size
        layers.append(nn.Linear(previous, 1))
        self.mlp = nn.Sequential(*layers)
        if config.interaction == "deepfm":
            self.fm_linear = nn.Linear(N_DENSE, 1)

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        ids = torch.remainder(sparse, self.vocab)
        emb = torch.stack([table(ids[:, i]) for i, table in enumerate(self.tables)], dim=1)  # [B, 26, D]
        x0 = torch.cat([dense, emb.flatten(1)], dim=1)
        x = x0
        for layer in self.cross:  # DCN-v2: x_{l+1} = x0 * (W x_l + b) + x_l
            x = x0 * layer(x) + x
        logit = self.mlp(x)
        if self.config.interaction == "deepfm":
            square_of_sum = emb.sum(dim=1).pow(2)
            sum_of_square = emb.pow(2).sum(dim=1)
            logit = logit + 0.5 * (square_of_sum - sum_of_square).sum(dim=1, keepdim=True) + self.fm_linear(dense)
        return torch.sigmoid(logit)

    def dense_parameters(self):
        return [p for name, p in self.named_parameters() if not name.startswith("tables.")]
