"""The statistics the canary judge and the store share: Prometheus' histogram_quantile on
bucket counts, prediction-score bins and the Population Stability Index. Pure functions;
the scraper (collect.py) only uses them to derive what it stores."""

from __future__ import annotations

import math

SCORE_BINS = 10  # equal-width bins over [0, 1] for prediction scores (CTR/probabilities)


def bucket_le(value: str) -> float:
    """A bucket's upper bound as exposition text writes it ("+Inf" included)."""
    return math.inf if value in ("+Inf", "Inf", "inf") else float(value)


def parse_bucket_metric(metric: str) -> tuple[str, float]:
    """A stored per-bucket sample's name (`<histogram>_bucket:<le>`, written by the collector) as
    (prefix, upper bound): the one key format the collector writes and the windows read."""
    prefix, _, le = metric.partition(":")
    return prefix, bucket_le(le)


def histogram_quantile(q: float, buckets: dict[float, float]) -> float | None:
    """Prometheus' histogram_quantile on non-cumulative bucket counts {le: count}.

    Linear interpolation inside the bucket; the +Inf bucket answers its lower bound.
    """
    total = sum(buckets.values())
    if total <= 0:
        return None
    rank = q * total
    seen, lower = 0.0, 0.0
    for le in sorted(buckets):
        count = buckets[le]
        if count and seen + count >= rank:
            if math.isinf(le):
                return lower
            return lower + (le - lower) * (rank - seen) / count
        seen += count
        lower = le if not math.isinf(le) else lower
    return lower


def score_bins(scores, bins: int = SCORE_BINS) -> list[int]:
    """Counts of scores in equal-width bins over [0, 1] (out-of-range scores are clipped)."""
    counts = [0] * bins
    for score in scores:
        score = float(score)
        if math.isnan(score):
            continue
        index = min(max(int(score * bins), 0), bins - 1)
        counts[index] += 1
    return counts


def psi(expected: list[float], actual: list[float], *, floor: float = 1e-4) -> float:
    """Population Stability Index of `actual` (candidate) against `expected` (stable).

    Sum over bins of (a - e) * ln(a / e) on proportions; empty bins get `floor`.
    Rule of thumb: < 0.1 stable, 0.1-0.25 moderate shift, > 0.25 large shift.
    """
    if len(expected) != len(actual):
        raise ValueError("expected and actual need the same bins")
    e_total, a_total = sum(expected), sum(actual)
    if e_total <= 0 or a_total <= 0:
        raise ValueError("both distributions need at least one observation")
    value = 0.0
    for e, a in zip(expected, actual):
        pe, pa = max(e / e_total, floor), max(a / a_total, floor)
        value += (pa - pe) * math.log(pa / pe)
    return value
