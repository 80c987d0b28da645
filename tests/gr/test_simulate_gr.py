"""A/B tests of a generative recommender run on clicks (issue's item 6): `simulate_traffic --gr`
sends a simulated user's recent history and clicks when the item the user goes on to consume,
drawn from the synthetic world's true next-item distribution, is among those recommended
(experiments/traffic.GrUsers). A better recommender therefore earns more clicks — the oracle's
top ten against ten random items, here — and the command drives a real GR endpoint through the
real gateway."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
from django.core.management import call_command

from experiments.gr.train import TINY
from experiments.gr.world import World
from experiments.traffic import GrUsers
from harness import gr
from harness.gateway import TOKEN, GatewayProcess, RouteServer, start_triton
from tests.gateway.conftest import require_triton

MODEL = "recs__v1__gr-fp32-c1"


def _click_rate(pick, requests: int = 3000) -> float:
    world = World(TINY["world"])
    users = GrUsers(world, 200, seed=3)
    rng = np.random.default_rng(5)
    clicks = 0
    for _ in range(requests):
        user = int(rng.integers(0, 200))
        clicks += users.consume(user, pick(world, users, user, rng), rng)
    return clicks / requests


def test_a_better_recommender_earns_more_clicks():
    def oracle(world, users, user, rng):
        probs = world.next_probabilities(np.array([users.rows[user][-1]]), users.tastes[user : user + 1])[0]
        return [int(world.item_ids[row]) for row in np.argsort(probs)[-10:]]

    def random(world, users, user, rng):
        return [int(i) for i in rng.choice(world.item_ids, 10, replace=False)]

    best, chance = _click_rate(oracle), _click_rate(random)
    assert chance == pytest.approx(10 / TINY["world"].items, abs=0.03)
    assert best > 3 * chance, (best, chance)


@pytest.mark.integration
@pytest.mark.django_db
def test_simulated_users_drive_a_gr_endpoint_through_the_gateway(gr_source, tmp_path):
    require_triton()
    repo = tmp_path / "repo"
    gr.package(gr_source, repo, MODEL)
    triton = start_triton(tmp_path / "triton", repo, [MODEL])
    routes = RouteServer().start()
    gateway = None
    try:
        variant = {"name": "v1", "model_version": "1", "triton_model": MODEL, "role": "stable", "weight_bp": 10000}
        variant |= {"replicas": [triton.http_url], "signature": gr.kserve_signature(MODEL)}
        endpoint = {"name": "recs", "affinity": "user", "auth": {"public": True}, "timeout_ms": 5000}
        routes.set_table({"version": "sim-1", "endpoints": [{**endpoint, "variants": [variant]}]})
        gateway = GatewayProcess(tmp_path, {"GATEWAY_ROUTES_URL": routes.url, "GATEWAY_TOKEN": TOKEN}).start()
        out = io.StringIO()
        call_command(
            "simulate_traffic",
            endpoint="recs",
            gateway=gateway.url,
            seconds=3,
            users=40,
            k=10,
            gr="tiny",
            stdout=out,
            stderr=io.StringIO(),
        )
        done = out.getvalue().strip().splitlines()[-1]
        sent, errors, clicks = (int(n) for n in re.findall(r"(\d+) (?:requests|errors|clicks)", done))
        assert sent >= 20 and errors == 0 and 0 < clicks < sent, done
    finally:
        if gateway is not None:
            gateway.stop()
        routes.stop()
        triton.stop(timeout=0.05)
