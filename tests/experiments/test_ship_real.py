"""Ship finishes at 100 % with and without traffic, on real processes: the web app (live server),
a Celery worker and beat (ingest, analysis, rollout reconcile and the canary judge on their own
schedules), the local pool supervisor with one real tritonserver, the gateway polling the live
route table and writing exposures to the real Redis stream. One stack, two endpoints on its one
pool, each running an experiment of its stable against a twin of it:

- users (the sticky X-User-Id) are served by both endpoints' arms and click what the candidate
  shows more often (the client application's feedback, POST /api/v1/feedback/ with the team's
  key) until each analysis tick decides `ship` (a failing guardrail would stop it for harm: the
  judge is at its defaults);
- `busy` ships with traffic flowing: its one step at 100 % is judged by the SLO guardrails, the
  checks that need a control say "no control at 100 %", and it finishes: the experiment is
  `shipped`, the winner is the endpoint's stable and the gateway serves it;
- `quiet` ships with no traffic: the endpoint page, the experiment page, `modelplane rollout
  watch` and `modelplane experiment watch` say the step waits for traffic, and per the rollout
  machine's rule (NO_TRAFFIC_WAIT_S: a step whose plan needs no requests is done after 30 s
  without one) it finishes all the same.

Slow (about three minutes of real rollouts on a loaded 2-core host: 30 s step, 30 s promotion
grace, 15 s analysis ticks): it runs in `make test-slow`, not in `make test` (marker `slow`).
"""

import json

import numpy as np
import pytest
import redis
import requests
from django.conf import settings
from django.test import Client
from rest_framework.authtoken.models import Token

from deployments.models import Endpoint, PoolModel, PoolModelState, Rollout
from deployments.rollout_machine import WAITING_FOR_TRAFFIC, State
from deployments.routes import route_table
from deployments.services import endpoints as endpoint_services
from deployments.services.keys import inference_key_create
from experiments.models import Experiment, Exposure
from experiments.services import ingest
from experiments.services import online as services
from harness.artifacts import package_artifact
from harness.closed_loop import ClosedLoop
from harness.processes import wait_for
from monitoring.judge.guardrails import NO_CONTROL
from monitoring.models import Verdict
from serving import tritonserver
from tests.cli.conftest import cli_env, popen_cli
from tests.conftest import require_service
from tests.deployments.conftest import pools_dir  # noqa: F401  (autouse: settings.POOLS_DIR, its servers killed)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CLICK_P = {False: 0.1, True: 0.5}  # control, candidate: the candidate's CTR is five times the control's


def _experiment(deployer, endpoint, candidate):
    experiment = services.experiment_create(
        user=deployer,
        endpoint=endpoint,
        name=f"{endpoint.name}-exp",
        candidates=[candidate],
        baseline_rate=0.1,
        mde=0.3,
    )
    return services.experiment_start(user=deployer, experiment=experiment)


def _clicks(url: str, key: str, endpoint: str, pending: list, candidate: str, rng) -> list:
    """The client application's clicks on the replies in `pending` [(request id, variant)] whose
    exposure is ingested (a click comes after its impression); returns the ones still pending."""
    ingested = set(
        Exposure.objects.filter(request_id__in=[rid for rid, _ in pending]).values_list("request_id", flat=True)
    )
    events = [
        {"event_id": f"c-{rid}", "type": "click", "request_id": rid}
        for rid, variant in pending
        if rid in ingested and rng.random() < CLICK_P[variant == candidate]
    ]
    if events:
        sent = requests.post(
            f"{url}/api/v1/feedback/",
            data=json.dumps({"endpoint": endpoint, "events": events}),
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
            timeout=30,
        )
        assert sent.status_code == 202, sent.text
    return [(rid, variant) for rid, variant in pending if rid not in ingested]


def test_ship_finishes_at_100_percent_with_and_without_traffic(
    live_server, subprocess_env, tmp_path, team_a, deployer, onnx_path
):
    require_service("postgres", "redis")
    tritonserver.find_binary()
    stream = redis.Redis.from_url(settings.EXPOSURE_STREAM_URL)
    ingest.streams_delete(stream)
    gateway_env = {"GATEWAY_EXPOSURE_STREAM_URL": settings.EXPOSURE_STREAM_URL}
    with ClosedLoop(live_server.url, subprocess_env, tmp_path, settings.POOLS_DIR, gateway_env=gateway_env) as loop:
        _, pool, busy = loop.serve(team_a, deployer, onnx_path, pool="shared", name="busy")
        quiet = endpoint_services.endpoint_create(
            user=deployer,
            name="quiet",
            pool=pool,
            stable_artifact=package_artifact(team_a, onnx_path, tmp_path),
            slo_p99_ms=500,
            public=True,
        )
        candidates = {e.name: package_artifact(team_a, onnx_path, tmp_path) for e in (busy, quiet)}
        experiments = {e.name: _experiment(deployer, e, candidates[e.name]) for e in (busy, quiet)}
        wait_for(
            lambda: PoolModel.objects.filter(artifact__in=candidates.values(), state=PoolModelState.READY).count() == 2,
            timeout=120,
            what="both candidates READY",
        )
        arms = {name: e.arms.get(is_control=False).name for name, e in experiments.items()}
        _, key = inference_key_create(user=deployer, team=team_a, name="app")

        # users on both endpoints, the candidates clicked more: each analysis tick reads it -----------
        loads = {name: loop.load(name, rate=15, threads=2, warm=20, users=400) for name in experiments}
        wait_for(
            lambda: all(arms[n] in {v for _, v in loads[n].exposed} for n in loads), timeout=30, what="arms served"
        )
        rng, seen, pending = np.random.default_rng(0), dict.fromkeys(loads, 0), {name: [] for name in loads}

        def decided():
            for name, load in loads.items():
                fresh = load.exposed[seen[name] :]
                seen[name] += len(fresh)
                pending[name] = _clicks(live_server.url, key, name, pending[name] + fresh, arms[name], rng)
            states = dict(
                Experiment.objects.filter(pk__in=[e.pk for e in experiments.values()]).values_list("name", "state")
            )
            return all(s != "running" for s in states.values()) and states

        wait_for(decided, timeout=180, what="both experiments decided", interval=1.0)
        for name, experiment in experiments.items():
            experiment.refresh_from_db()
            assert (experiment.state, experiment.decision, experiment.winner.name) == ("decided", "ship", arms[name]), (
                experiment.state,
                experiment.decision,
                experiment.evidence.get("guardrails"),
            )
        for load in loads.values():
            load.stop()
        busy_load = loop.load("busy", rate=20, threads=2, warm=20)  # the busy endpoint's traffic goes on

        # Ship both: busy with traffic, quiet without -------------------------------------------------
        for experiment in experiments.values():
            services.experiment_ship(user=deployer, experiment=experiment, reason="clear win")
            experiment.refresh_from_db()
        ship = {name: Rollout.objects.get(pk=e.rollout_id) for name, e in experiments.items()}
        (tmp_path / "home").mkdir()
        token = Token.objects.create(user=deployer).key
        cli = cli_env(tmp_path / "home", MODELPLANE_URL=live_server.url, MODELPLANE_TOKEN=token)
        quiet_exp = experiments["quiet"]
        watches = {
            "rollout": popen_cli(
                "rollout", "watch", ship["quiet"].pk, "--interval", "0.5", env=cli, log=tmp_path / "rw.log"
            ),
            "experiment": popen_cli(
                "experiment", "watch", quiet_exp.public_id, "--interval", "0.5", env=cli, log=tmp_path / "ew.log"
            ),
        }
        try:
            client = Client()
            client.force_login(deployer)
            endpoint_page = f"/deployments/endpoints/quiet/?rollout={ship['quiet'].pk}"
            try:
                wait_for(
                    lambda: WAITING_FOR_TRAFFIC in client.get(endpoint_page).content.decode(),
                    timeout=90,
                    what="the endpoint page saying the quiet ship waits for traffic",
                )
            except TimeoutError:
                quiet = Rollout.objects.get(pk=ship["quiet"].pk)
                verdicts = list(Verdict.objects.filter(rollout=quiet).order_by("-pk").values("outcome", "reason")[:3])
                raise AssertionError((quiet.state, quiet.reason, verdicts)) from None
            page = client.get(f"/experiments/{quiet_exp.pk}/").content.decode()
            assert f'id="ship-waiting">The rollout is {WAITING_FOR_TRAFFIC}' in page, page
            finished = {}
            for name, rollout in ship.items():
                finished[name] = wait_for(
                    lambda r=rollout: (
                        (x := Rollout.objects.get(pk=r.pk)).state in (State.SUCCEEDED, State.ROLLED_BACK, State.FAILED)
                        and x
                    ),
                    timeout=180,
                    what=f"{name}'s ship rollout finished",
                )
                assert finished[name].state == State.SUCCEEDED, finished[name].reason
            for name, experiment in experiments.items():
                wait_for(
                    lambda e=experiment: Experiment.objects.get(pk=e.pk).state == "shipped",
                    timeout=40,
                    what=f"{name}'s experiment shipped",
                )
            codes = {what: proc.wait(30) for what, proc in watches.items()}
        finally:
            for proc in watches.values():
                if proc.poll() is None:
                    proc.kill()
        logs = {what: (tmp_path / f"{what[0]}w.log").read_text() for what in watches}
        assert codes == {"rollout": 0, "experiment": 0}, logs
        assert WAITING_FOR_TRAFFIC in logs["rollout"] and f"rollout #{ship['quiet'].pk} succeeded" in logs["rollout"], (
            logs
        )
        assert "→ promoting  last step done: no request in " in logs["rollout"], logs["rollout"]  # why it went on
        assert (
            f"rollout #{ship['quiet'].pk} {WAITING_FOR_TRAFFIC}" in logs["experiment"]
            and "· shipped" in logs["experiment"]
        ), logs

        # both finished: the winner is stable, the route table and the gateway serve it ------------------
        table = {e["name"]: e for e in route_table()["endpoints"]}
        for name in experiments:
            assert Endpoint.objects.get(name=name).stable_artifact_id == candidates[name].pk
            stable = [v["name"] for v in table[name]["variants"] if v["role"] == "stable"]
            assert stable == [arms[name]], table[name]["variants"]
        wait_for(lambda: busy_load.variants[-1] == arms["busy"], timeout=10, what="the gateway serving busy's winner")
        busy_verdicts = Verdict.objects.filter(rollout_id=ship["busy"].pk)
        assert not busy_verdicts.filter(outcome="fail").exists()
        assert busy_verdicts.filter(outcome="pass").exists(), [
            v.reason for v in busy_verdicts
        ]  # judged, not waited out
        needs_control = [c for v in busy_verdicts for c in v.checks if (c.get("why") or "").startswith(NO_CONTROL)]
        assert needs_control, [v.checks for v in busy_verdicts]  # what needs a control said so instead of waiting
        quiet_verdicts = Verdict.objects.filter(rollout_id=ship["quiet"].pk)
        assert quiet_verdicts.exists() and all(v.reason.startswith(WAITING_FOR_TRAFFIC) for v in quiet_verdicts)
