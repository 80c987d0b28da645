"""`make run`'s demo experiment (config/demo.py): demo-ctr v2, the reference model trained
briefly, against v1 (the random tiny ranker) on endpoint demo-ctr.

Offline: the candidate earns a clear true lift under simulate_traffic's show-and-click
logic. Fast: the step function is idempotent and says why it cannot go on. Integration:
tests/test_make_run.py (one platform start for both) sees `manage.py run_platform` prepare
it in the background and simulated traffic with clicks from the ground truth, through the
real gateway, give the candidate a positive lift and a ship decision."""

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from config import demo
from experiments.reference import data
from experiments.reference.model import ReferenceConfig
from experiments.reference.train import predict, train
from experiments.traffic import true_click_probability
from harness import factories
from harness.onnx import build

ROOT = Path(__file__).resolve().parents[2]


def expected_ctr(scores: np.ndarray, truth: np.ndarray, rows: np.ndarray) -> float:
    """simulate_traffic's show_and_click in expectation: the true CTR of each request's top item."""
    return float(np.mean(truth[rows][np.arange(len(rows)), np.argmax(scores[rows], axis=1)]))


def test_the_demo_candidate_earns_a_clear_true_lift():
    t = demo.TRAINING
    config = ReferenceConfig(
        vocab=t["vocab"],
        emb_dim=t["emb_dim"],
        cross_layers=t["cross_layers"],
        mlp=[int(x) for x in t["mlp"].split(",")],
    )
    result = train(
        config, rows=t["rows"], valid_rows=t["valid_rows"], epochs=t["epochs"], seed=t["seed"], threads=t["threads"]
    )
    pool = data.generate(20_000, seed=101)  # simulate_traffic's item pool (--seed 0)
    truth = true_click_probability(pool)
    rows = np.random.default_rng(0).integers(0, len(truth), (20_000, 10))  # 20k requests ranking k=10 items
    v1 = ort.InferenceSession(build().SerializeToString()).run(None, {"dense": pool.dense, "sparse": pool.sparse})[0]
    ctr = {
        "v1": expected_ctr(v1.reshape(-1), truth, rows),
        "v2": expected_ctr(predict(result.model, pool), truth, rows),
        "random": float(truth.mean()),
    }
    print(
        f"expected CTR: v1 {ctr['v1']:.3f}, v2 {ctr['v2']:.3f} (random pick {ctr['random']:.3f}); "
        f"v2 AUC {result.metrics['auc']:.3f}, trained in {result.metrics['train_seconds']:.1f} s"
    )
    assert result.metrics["auc"] > 0.8
    assert ctr["v2"] > 2 * ctr["v1"]  # the demo's lift is large: it decides within a few analysis ticks
    assert abs(ctr["v1"] - ctr["random"]) < 0.05  # v1 ranks no better than chance
    assert abs(ctr["v1"] - demo.PLAN["baseline_rate"]) < 0.05  # the plan's baseline is v1's real CTR


@pytest.mark.django_db
def test_step_says_why_it_cannot_go_on(admin_user):
    admin_user.username = demo.ADMIN
    admin_user.save()
    with pytest.raises(demo.DemoFailed, match="endpoint 'demo-ctr' is not seeded"):
        demo.demo_experiment_step()


@pytest.mark.django_db
def test_step_leaves_an_existing_demo_experiment_alone(team_a, deployer, artifact_factory):
    from experiments.services.online import experiment_create, experiment_stop

    deployer.username = demo.ADMIN
    deployer.save()
    endpoint = factories.endpoint(
        factories.pool(team_a, ready_replicas=1), artifact_factory(team_a), name=demo.ENDPOINT
    )
    experiment = experiment_create(
        user=deployer, endpoint=endpoint, name=demo.DEMO_EXPERIMENT, candidates=[artifact_factory(team_a)], **demo.PLAN
    )
    experiment_stop(user=deployer, experiment=experiment, reason="a person stopped it")
    assert demo.demo_experiment_step() is None  # no training, no build, no second experiment
    experiment.refresh_from_db()
    assert experiment.state == "stopped"
