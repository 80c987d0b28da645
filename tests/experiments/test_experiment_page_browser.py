"""The experiment page in a real browser (Debian's Chromium via Playwright) while
`simulate_traffic` drives a real gateway in front of a real tritonserver, exposures and
feedback flow through Redis Streams into PostgreSQL, and the analysis ticks: the page
updates without a reload, Ship is pressed on the page (confirmation and reason), and the
state goes shipping -> shipped once the rollout succeeded.

What stands in for a part that is not started here: the ingest and analysis ticks are the
services Celery beat's tasks call (`ingest_once`, `experiments_analyze_all`), run by the
test on the same schedule; the pool supervisor is not started, so when the ship's rollout
asks for its models the test marks the pool's models ready, as the pool's reconcile does
once tritonserver loaded them (the test's tritonserver serves both arms already). The
clicks that make the candidate win are sent by the test as the client application would
(POST /api/v1/feedback/ with the team's key), on top of the simulator's own."""

import hashlib
import json
import threading
import time

import pytest
import redis
from django.conf import settings
from django.core.management import call_command

from deployments.models import PoolModel, Rollout
from deployments.services.keys import inference_key_create
from deployments.services.rollouts import rollout_promote, rollout_reconcile
from deployments.services.route_changes import route_changed
from experiments.models import Experiment, Exposure
from experiments.services import ingest, ticks
from experiments.services import online as services
from harness import factories
from harness.gateway import start_gateway, start_triton, stop_gateway
from harness.triton_models import SIGNATURE, ctr_model
from tests.browser import login, wait_until
from tests.conftest import require_service
from tests.gateway.conftest import require_triton

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _routes(path, experiment, triton_url, key_sha):
    arms = list(experiment.arms.all())
    path.write_text(
        json.dumps(
            {
                "version": "b1",
                "keys": [{"id": "k1", "prefix": "mpk_brow", "sha256": key_sha, "team": "team-a"}],
                "endpoints": [
                    {
                        "name": experiment.endpoint.name,
                        "timeout_ms": 3000,
                        "salt": experiment.salt,
                        "experiment": experiment.public_id,
                        "exposure_token_key": experiment.token_key,
                        "auth": {"public": True, "keys": ["k1"]},
                        "variants": [
                            {
                                "name": arm.name,
                                "model_version": "1",
                                "triton_model": model,
                                "role": "stable" if arm.is_control else "arm",
                                "weight_bp": arm.allocation_bp,
                                "replicas": [triton_url],
                                "signature": SIGNATURE,
                            }
                            for arm, model in zip(arms, ("m1", "m2"))
                        ],
                    }
                ],
            }
        )
    )


def test_page_updates_live_ship_from_the_page_then_shipped(
    live_server, browser_page, tmp_path, team_a, deployer, artifact_factory, client
):
    require_service("redis")
    require_triton()
    pool = factories.pool(team_a, ready_replicas=1)
    stable, candidate = artifact_factory(team_a), artifact_factory(team_a)
    endpoint = factories.endpoint(pool, stable, name="shop", public=True)
    exp = services.experiment_create(
        user=deployer, endpoint=endpoint, name="live", candidates=[candidate], feedback_tokens=True, mde=0.2
    )
    services.experiment_start(user=deployer, experiment=exp)
    _, secret = inference_key_create(user=deployer, team=team_a, name="app")
    stream = redis.Redis.from_url(settings.EXPOSURE_STREAM_URL)
    ingest.streams_delete(stream)

    repo = tmp_path / "repo"
    ctr_model(repo, "m1", seed=7)
    ctr_model(repo, "m2", seed=8)
    triton = start_triton(tmp_path / "triton", repo, ["m1", "m2"])
    routes = tmp_path / "routes.json"
    _routes(routes, exp, triton.http_url, hashlib.sha256(secret.encode()).hexdigest())
    proc, port = start_gateway(routes, tmp_path, GATEWAY_EXPOSURE_STREAM_URL=settings.EXPOSURE_STREAM_URL)
    traffic = threading.Thread(
        target=call_command,
        args=("simulate_traffic",),
        kwargs={"endpoint": "shop", "gateway": f"http://127.0.0.1:{port}", "seconds": 30, "users": 300, "k": 5},
        daemon=True,
    )
    try:
        page = browser_page
        login(page, live_server.url, deployer.username)
        page.goto(f"{live_server.url}/experiments/{exp.pk}/")
        page.evaluate("() => { window.notReloaded = true; }")
        assert page.inner_text("#experiment-state") == "running"
        traffic.start()

        def tick():
            ingest.ingest_once(stream)
            ticks.experiments_analyze_all()

        # the page's counts move while the traffic runs, without a reload
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            tick()
            units = page.eval_on_selector_all("#arms td.units", "tds => tds.map(t => Number(t.textContent))")
            if sum(units) > 50:
                break
            time.sleep(2)
        wait_until(
            page,
            "() => window.notReloaded && [...document.querySelectorAll('#arms td.units')]"
            ".reduce((s, t) => s + Number(t.textContent), 0) > 0",
            timeout=10_000,
        )
        assert page.evaluate("() => Number(document.getElementById('lift-chart').dataset.points)") >= 1
        # the application's clicks: users shown the candidate click (the candidate wins)
        cand = exp.arms.get(is_control=False)
        seen = set()
        while time.monotonic() < deadline + 60 and not page.query_selector("#ship-button"):
            rids = list(
                Exposure.objects.filter(arm=cand)
                .exclude(request_id__in=seen)
                .values_list("request_id", flat=True)[:2000]
            )
            if rids:
                seen.update(rids)
                events = [{"event_id": f"app-{r}", "type": "click", "request_id": r} for r in rids]
                assert (
                    client.post(
                        "/api/v1/feedback/",
                        json.dumps({"endpoint": "shop", "events": events}),
                        content_type="application/json",
                        HTTP_AUTHORIZATION=f"Bearer {secret}",
                    ).status_code
                    == 202
                )
            tick()
            time.sleep(2)
        page.wait_for_selector("#ship-button", timeout=10_000)  # came with a live swap
        assert page.evaluate("() => window.notReloaded") and page.inner_text("#experiment-state") == "decided"

        page.click("#ship-button")
        page.fill("#reason", "v2 wins on clicks")
        page.click("#confirm-ship")
        page.wait_for_url(f"**/experiments/{exp.pk}/")
        assert page.inner_text("#experiment-state") == "shipping"
        assert "rollout #" in page.inner_text("#ship-status")
        page.evaluate("() => { window.notReloaded = true; }")

        # the rollout runs: its models load (as the pool's reconcile marks them), it is promoted and succeeds
        exp.refresh_from_db()
        rollout_id = exp.rollout_id
        for _ in range(3):
            rollout_reconcile(rollout_id=rollout_id)
            PoolModel.objects.filter(pool=pool).update(
                state="ready", replica_ready={r.name: True for r in pool.replica_set.all()}
            )
            route_changed()  # a bulk update bypasses the signal the cached route table waits for
        rollout_reconcile(rollout_id=rollout_id)
        rollout = Rollout.objects.get(pk=rollout_id)
        assert rollout.state == "canary", (rollout.state, rollout.reason)
        Rollout.objects.filter(pk=rollout_id).update(promote_grace_seconds=0)
        rollout_promote(user=deployer, rollout=rollout, reason="the experiment decided")
        rollout_reconcile(rollout_id=rollout_id)
        assert Rollout.objects.get(pk=rollout_id).state == "succeeded"
        assert page.inner_text("#experiment-state") == "shipping"  # not before the tick saw it
        tick()
        wait_until(page, "() => document.getElementById('experiment-state').textContent === 'shipped'", timeout=15_000)
        assert page.evaluate("() => window.notReloaded")
        assert "succeeded" in page.inner_text("#ship-status")
        assert Experiment.objects.get(pk=exp.pk).state == "shipped"
    finally:
        traffic.join(timeout=40)
        stop_gateway(proc)
        triton.stop()
