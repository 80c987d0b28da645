"""Model-quality metrics of a binary classifier's scores against labels, one definition for
the factory's validation (AUC and logloss deltas of each variant) and the reference
model's training in experiments."""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC by the rank-sum (Mann-Whitney) formula, ties averaged; NaN without both classes."""
    labels = labels.astype(bool)
    pos, neg = int(labels.sum()), int((~labels).sum())
    if pos == 0 or neg == 0:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[labels].sum() - pos * (pos + 1) / 2) / (pos * neg))


def logloss(labels: np.ndarray, scores: np.ndarray) -> float:
    """Mean binary cross-entropy, scores clipped to [1e-7, 1 - 1e-7]."""
    p = np.clip(scores.astype(np.float64), 1e-7, 1 - 1e-7)
    return float(-np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p)))
