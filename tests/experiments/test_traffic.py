"""The demo's click simulator: ground truth recovered exactly, and a better ranker earns a real lift."""

import numpy as np

from experiments.reference import data
from experiments.traffic import show_and_click, true_click_probability


def test_true_probability_matches_the_generators_labels():
    log = data.generate(60_000, seed=3)
    p = true_click_probability(log)
    assert 0 < p.min() and p.max() < 1
    # Labels were drawn from exactly these probabilities: calibration within noise per decile.
    order = np.argsort(p)
    for chunk in np.array_split(order, 10):
        assert abs(log.label[chunk].mean() - p[chunk].mean()) < 0.02


def test_a_better_ranker_earns_a_true_lift_and_a_copy_none():
    rng = np.random.default_rng(0)
    k, rounds = 10, 4000
    log = data.generate(k * rounds, seed=11)
    p = true_click_probability(log).reshape(rounds, k)
    noise = np.random.default_rng(1).normal(0, 3.0, p.shape)
    weak = np.log(p) + noise  # a poorly trained model: the signal buried in noise
    better = np.log(p) + 0.3 * noise
    ctr = {}
    for name, scores in (("weak", weak), ("weak-copy", weak), ("better", better)):
        ctr[name] = np.mean([show_and_click(scores[i], p[i], rng)[1] for i in range(rounds)])
    expected = {
        name: np.mean(p[np.arange(rounds), np.argmax(s, axis=1)]) for name, s in (("weak", weak), ("better", better))
    }
    assert expected["better"] > 1.2 * expected["weak"]
    assert ctr["better"] > ctr["weak"] and abs(ctr["weak"] - ctr["weak-copy"]) < 0.04
