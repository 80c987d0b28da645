"""Semantic IDs from residual k-means: level 1 clusters the item embeddings, each next level
clusters what the levels before left over (the residual), so an item's tuple of codes
describes it coarse to fine and similar items share prefixes (TIGER's RQ, with k-means in
place of a learned quantizer: deterministic and dependency-light).

Two items may land on the same tuple. resolve_collisions moves all but one (the one nearest
its reconstruction, then the lower row) to the nearest free tuple: the nearest free last-level
code under the same prefix, else under the next-nearest code of the level above, and so on
up. Deterministic: the same embeddings, codebook and taken tuples give the same ids.
"""

from __future__ import annotations

import numpy as np


class CollisionError(ValueError):
    """No free tuple is left for an item (more items than the codebook can name)."""


def fit_codebook(embeddings: np.ndarray, *, levels: int, codes_per_level: int, seed: int = 0) -> np.ndarray:
    """float32 [levels, codes_per_level, dim] centroids by residual k-means."""
    from sklearn.cluster import KMeans

    data = np.asarray(embeddings, dtype=np.float64)
    if len(data) < codes_per_level:
        raise ValueError(f"{len(data)} items cannot make {codes_per_level} codes per level")
    residual = data.copy()
    codebook = np.zeros((levels, codes_per_level, data.shape[1]), dtype=np.float64)
    for level in range(levels):
        km = KMeans(n_clusters=codes_per_level, n_init=3, random_state=seed + level).fit(residual)
        codebook[level] = km.cluster_centers_
        residual = residual - codebook[level][km.labels_]
    return codebook.astype(np.float32)


def _distances(residual: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    return ((residual[:, None, :] - centroids[None, :, :]) ** 2).sum(axis=2)


def assign(embeddings: np.ndarray, codebook: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes int64 [n, levels], residual distance [n, levels, codes]) greedily level by level."""
    residual = np.asarray(embeddings, dtype=np.float64)
    levels, codes_per_level, _ = codebook.shape
    codes = np.zeros((len(residual), levels), dtype=np.int64)
    distances = np.zeros((len(residual), levels, codes_per_level))
    for level in range(levels):
        distances[:, level] = _distances(residual, codebook[level].astype(np.float64))
        codes[:, level] = distances[:, level].argmin(axis=1)
        residual = residual - codebook[level][codes[:, level]]
    return codes, distances


def _free_tuple(prefix: tuple, distances: np.ndarray, taken: set, depth: int) -> tuple | None:
    """The nearest free tuple extending `prefix` at levels depth.., by this item's distances."""
    levels = distances.shape[0]
    if depth == levels:
        return None if prefix in taken else prefix
    for code in np.argsort(distances[depth], kind="stable").tolist():
        found = _free_tuple((*prefix, code), distances, taken, depth + 1)
        if found is not None:
            return found
    return None


def resolve_collisions(codes: np.ndarray, distances: np.ndarray, *, taken: set | None = None) -> np.ndarray:
    """Unique tuples for every row (see the module docstring); `taken` tuples (a catalog's
    existing items) are never handed out."""
    codes = np.asarray(codes, dtype=np.int64).copy()
    levels = codes.shape[1]
    taken = set(taken or ())
    error = np.array([sum(distances[i, level, codes[i, level]] for level in range(levels)) for i in range(len(codes))])
    order = np.lexsort((np.arange(len(codes)), error))  # nearest to its reconstruction first
    for row in order.tolist():
        wanted = tuple(codes[row].tolist())
        if wanted not in taken:
            taken.add(wanted)
            continue
        found = None
        for depth in range(levels - 1, -1, -1):  # re-choose the last level first, then higher ones
            found = _free_tuple(wanted[:depth], distances[row], taken, depth)
            if found is not None:
                break
        if found is None:
            raise CollisionError(f"no free semantic id is left for row {row}: the codebook names too few items")
        codes[row] = found
        taken.add(found)
    return codes


def semantic_ids(embeddings: np.ndarray, codebook: np.ndarray, *, taken: set | None = None) -> np.ndarray:
    """Unique semantic ids for `embeddings` under `codebook`, avoiding `taken` tuples."""
    codes, distances = assign(embeddings, codebook)
    return resolve_collisions(codes, distances, taken=taken)
