"""Sampled prediction scores, so the control plane can compare candidate and stable
prediction distributions (PSI) without a second data path: a sampled share of successful
JSON replies has its first output's values observed in a Prometheus histogram per
endpoint x variant, with 10 equal-width buckets over [0, 1] (the judge's score bins).

GATEWAY_SCORE_SAMPLE_RATE (default 0.05) is the share of the stable variant's replies
sampled; GATEWAY_CANDIDATE_SCORE_SAMPLE_RATE (default 1.0) that of canary, arm and shadow
replies (baseline included): a 5 % canary at 200 req/s would otherwise take minutes to
give the judge the 200 scores its PSI guardrail needs, and hold every step until its
deadline. While a rollout runs, the stable's rate is raised to at least the candidate's
weight over the stable's (the route's `stable_score_rate`), so both arms of the PSI
comparison fill at the same pace (at 5 % of 20 req/s the stable's 5 % never did). 0 turns
sampling off. Binary-tensor replies are not parsed. Never raises: a reply that is not
what this expects is simply not sampled.
"""

from __future__ import annotations

import os
import random
import zlib

from orjson import loads
from prometheus_client import Histogram

SCORE_BUCKETS = tuple(round(0.1 * i, 1) for i in range(1, 11))
MAX_VALUES = 256  # per reply: a batch reply of thousands of rows is sampled, not parsed whole
MAX_INFLATED = 1 << 20  # bytes of a compressed reply inflated at most
MAX_CHILDREN = 4096  # (endpoint, variant) histograms kept looked up; past it the cache starts again

PREDICTION_SCORE = Histogram(
    "gateway_prediction_score",
    "Sampled prediction scores (first output of JSON replies), per variant",
    ["endpoint", "variant"],
    buckets=SCORE_BUCKETS,
)


_children: dict[tuple[str, str], object] = {}


class ScoreSampler:
    def __init__(self, rate: float | None = None, candidate_rate: float | None = None):
        self.rate = float(os.environ.get("GATEWAY_SCORE_SAMPLE_RATE", "0.05")) if rate is None else rate
        self.candidate_rate = (
            float(os.environ.get("GATEWAY_CANDIDATE_SCORE_SAMPLE_RATE", "1.0"))
            if candidate_rate is None
            else candidate_rate
        )

    def sampled(self, *, candidate: bool = False, at_least: float = 0.0) -> bool:
        """Whether this reply's scores are observed (the draw at the variant's rate)."""
        rate = self.candidate_rate if candidate else self.rate
        if at_least > rate and rate > 0.0:
            rate = at_least
        return rate > 0.0 and random.random() < rate

    def maybe_observe(
        self, endpoint: str, variant: str, headers: dict, body: bytes, *, candidate: bool = False, at_least: float = 0.0
    ) -> int:
        """Observe the scores of a reply (upstream headers with lower-case names) with
        probability `rate`; returns how many. Gzip/deflate replies (clients that send
        Accept-Encoding get them from Triton) are inflated, only when sampled."""
        if not body or not self.sampled(candidate=candidate, at_least=at_least):
            return 0
        content_type = headers.get("content-type")
        if content_type and "json" not in content_type:
            return 0
        encoding = headers.get("content-encoding")
        if encoding:
            if encoding not in ("gzip", "deflate"):
                return 0
            try:
                body = zlib.decompressobj(47).decompress(body, MAX_INFLATED)  # 47: zlib or gzip header
            except zlib.error:
                return 0
        if body[:1] != b"{":
            return 0
        try:
            outputs = loads(body).get("outputs") or []
            values = outputs[0].get("data") or []
        except (ValueError, AttributeError, IndexError, TypeError):
            return 0
        return self.observe_values(endpoint, variant, values)

    @staticmethod
    def observe_values(endpoint: str, variant: str, values) -> int:
        """Observe up to MAX_VALUES scores in [0, 1] (the rest of the first output is not read)."""
        histogram = _children.get((endpoint, variant))
        if histogram is None:  # labels() costs a lock and a tuple build each time: looked up once
            if len(_children) >= MAX_CHILDREN:
                _children.clear()
            histogram = _children[(endpoint, variant)] = PREDICTION_SCORE.labels(endpoint, variant)
        observed = 0
        for value in values[:MAX_VALUES]:
            if isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0:
                histogram.observe(value)
                observed += 1
        return observed
