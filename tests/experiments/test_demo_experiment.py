"""`make run`'s demo experiment (config/demo.py): demo-ctr v2, the reference model trained
briefly, against v1 (the random tiny ranker) on endpoint demo-ctr.

Offline: the candidate earns a clear true lift under simulate_traffic's show-and-click
logic. Fast: the step function is idempotent and says why it cannot go on. Integration:
`manage.py run_platform` prepares it in the background and simulated traffic with clicks
from the ground truth, through the real gateway, gives the candidate a positive lift."""

import io
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import requests
from django.core.management import call_command

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


def _login(base: str, password: str) -> requests.Session:
    session = requests.Session()
    page = session.get(f"{base}/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    session.post(
        f"{base}/login/",
        data={"username": "admin", "password": password, "csrfmiddlewaretoken": token},
        headers={"Referer": f"{base}/login/"},
    )
    return session


@pytest.mark.integration
def test_make_run_seeds_a_running_experiment_and_simulated_clicks_lift_the_candidate(tmp_path, settings):
    """run_platform as the README's demo section starts it: SQLite, and Redis as the broker
    (so also the exposure stream; the filesystem broker's 1 s ingest ticks expire under
    load). The demo experiment comes up by itself, and 20 s of simulate_traffic through the
    real gateway give v2 a positive lift over v1."""
    import redis

    from experiments.services import ingest
    from kernel.tritonserver import free_port
    from tests.conftest import require_service

    require_service("redis")
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    # A fresh control plane: no exposures or queued tasks left by earlier tests on this Redis db.
    assert settings.CELERY_BROKER_URL.startswith("redis://")
    broker.delete(
        ingest.EXPOSURE_STREAM, ingest.FEEDBACK_STREAM, "control", "build-cpu", "build-gpu", "unacked", "unacked_index"
    )
    port, gateway_port = free_port(), free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "EXPOSURE_STREAM_URL", "MLFLOW_TRACKING_URI", "ARTIFACT_ROOT", "POOLS_DIR"}
    }
    env.update(
        VAR_DIR=str(tmp_path / "var"),
        GATEWAY_PORT=str(gateway_port),
        PYTHONUNBUFFERED="1",
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
        BUILD_BENCH_SECONDS="0.05",
        BUILD_BENCH_BATCHES="1,8",
    )
    log_path = tmp_path / "run.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "run_platform", f"--port={port}"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base, gateway = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{gateway_port}"
    try:
        deadline = time.monotonic() + 240
        while "demo experiment ready" not in (output := log_path.read_text()):
            assert proc.poll() is None and "demo experiment not prepared" not in output, output[-4000:]
            assert time.monotonic() < deadline, "demo experiment not ready in 240 s\n" + output[-4000:]
            time.sleep(1)
        session = _login(base, re.search(r"login: admin / (\S+)", output).group(1))
        experiments = session.get(f"{base}/api/v1/experiments/?state=running").json()["results"]
        [experiment] = [e for e in experiments if e["name"] == demo.DEMO_EXPERIMENT]
        assert experiment["endpoint"] == "demo-ctr" and experiment["unit_header"] == "X-User-Id"
        assert [(a["name"], a["is_control"], a["allocation_bp"]) for a in experiment["arms"]] == [
            ("v1-onnx-fp32", True, 5000),
            ("v2-onnx-fp32", False, 5000),
        ]
        versions = {v["version"]: v for v in session.get(f"{base}/api/v1/models/demo-ctr/versions/").json()["results"]}
        assert versions[2]["source"] == "mlflow" and versions[2]["metrics"]["auc"] > 0.8  # the better-trained candidate

        out = io.StringIO()
        call_command("simulate_traffic", endpoint="demo-ctr", gateway=gateway, seconds=20, seed=0, stdout=out)
        platform_log = "\n".join(
            line for line in log_path.read_text().splitlines() if "GET /api/v1/experiments/" not in line
        )
        assert ", 0 errors" in out.getvalue(), out.getvalue() + platform_log[-4000:]
        assert "v1-onnx-fp32" in out.getvalue() and "v2-onnx-fp32" in out.getvalue()  # both arms answered the same body
        results_url = f"{base}/api/v1/experiments/{experiment['id']}/results/"
        deadline = time.monotonic() + 30
        while True:  # ingest drains the streams every second; feedback waits 2 s for its exposures
            results = session.get(results_url).json()
            candidate = results["candidates"]["v2-onnx-fp32"]
            if (candidate["lower"] or 0) > 0 or time.monotonic() > deadline:
                break
            time.sleep(2)
        arms = results["arms"]
        print(
            f"after 20 s of traffic: {arms}; v2 vs v1: {candidate}; state {results['state']}; feedback {results['feedback']}"
        )
        tail = "\n".join(line for line in log_path.read_text().splitlines() if "GET /api/v1/experiments/" not in line)[
            -4000:
        ]
        # Users are Zipf-distributed (a few heavy users make most requests), so one arm may get far
        # more exposures than the other; the units (the randomization unit) split evenly.
        assert all(a["units"] >= 20 and a["exposures"] >= 50 for a in arms.values()), tail
        assert sum(a["exposures"] for a in arms.values()) > 400, tail
        assert candidate["lift"] > 0.5 and candidate["lower"] > 0, results
        assert not results["srm"]["flagged"]
        # The analysis ticks (every 15 s) decide: ship v2, its machine guardrails passing or pending
        # (PSI is shown, not judged: v2 is meant to score differently from the random v1).
        deadline = time.monotonic() + 45
        while results["state"] == "running" and time.monotonic() < deadline:
            time.sleep(3)
            results = session.get(results_url).json()
        guards = results["guardrails"].get("v2-onnx-fp32", {})
        print(f"decision: {results['state']} {results['decision']} winner {results['winner']}; guardrails {guards}")
        assert (results["state"], results["decision"], results["winner"]) == ("decided", "ship", "v2-onnx-fp32"), (
            results
        )
        assert guards.get("status") in ("pass", "pending"), guards
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
