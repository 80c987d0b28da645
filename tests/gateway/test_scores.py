"""Prediction-score sampling in the gateway, read back by the collector as the judge's
score bins (the feed of the PSI guardrail)."""

import gzip
import json

import pytest
from prometheus_client import generate_latest

from gateway.telemetry.scores import PREDICTION_SCORE, ScoreSampler
from monitoring.collection import collect, gateway_samples


def reply(values):
    return json.dumps(
        {"model_name": "m", "outputs": [{"name": "ctr", "datatype": "FP32", "shape": [len(values), 1], "data": values}]}
    ).encode()


def test_sampled_scores_become_the_judges_score_bins():
    before = gateway_samples.gateway_snapshot(generate_latest().decode())
    sampler = ScoreSampler(rate=1.0)
    json_ct = {"content-type": "application/json"}
    assert sampler.maybe_observe("psi-ep", "v7", json_ct, reply([0.05, 0.15, 0.95])) == 3
    gzipped = gzip.compress(reply([0.15, 1.0]))  # Triton compresses when the client accepts gzip
    assert sampler.maybe_observe("psi-ep", "v7", {**json_ct, "content-encoding": "gzip"}, gzipped) == 2
    assert sampler.maybe_observe("psi-ep", "v7", json_ct, reply([2.5, "x", None])) == 0  # not scores: skipped
    assert sampler.maybe_observe("psi-ep", "v7", {"content-type": "application/octet-stream"}, b"\x00binary") == 0
    assert sampler.maybe_observe("psi-ep", "v7", {**json_ct, "content-encoding": "br"}, b"\x00") == 0
    assert sampler.maybe_observe("psi-ep", "v7", json_ct, b"{not json") == 0
    after = gateway_samples.gateway_snapshot(generate_latest().decode())
    derived = collect.derive(gateway_samples.gateway_deltas(before, after, seconds=1.0)[("psi-ep", "v7")])
    bins = {k: v for k, v in derived.items() if k.startswith("score_bin:")}
    assert bins == {"score_bin:0": 1, "score_bin:1": 2, "score_bin:9": 2}


def test_sampling_rate_is_respected():
    sampler = ScoreSampler(rate=0.0)
    assert sampler.maybe_observe("psi-ep", "v8", {"content-type": "application/json"}, reply([0.5])) == 0
    sampler = ScoreSampler(rate=0.25)
    observed = sum(sampler.maybe_observe("psi-ep", "v8", {}, reply([0.5])) for _ in range(4000))
    assert 800 < observed < 1200
    assert PREDICTION_SCORE.labels("psi-ep", "v8")._sum.get() == pytest.approx(observed * 0.5)


def test_candidates_are_sampled_at_their_own_rate():
    sampler = ScoreSampler(rate=0.0, candidate_rate=1.0)
    assert sampler.maybe_observe("psi-ep", "v9", {}, reply([0.5])) == 0
    assert sampler.maybe_observe("psi-ep", "v9", {}, reply([0.5]), candidate=True) == 1
