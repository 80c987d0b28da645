"""An LLM canary judged on time to first token, end to end with real processes: the
project's tiny LLM served by a real tritonserver (the decoupled python-backend model,
generate extension), the real gateway (`python -m gateway`) streaming chat completions to
OpenAI clients, the collector scraping the gateway's /metrics into the store, and the
canary loop (`judge_rollout`: the judge, then deployments' services) acting on a real
rollout of an LLM endpoint:

1. a candidate whose model waits 300 ms before its first token (`delay_first_token_ms`)
   is rolled back on TTFT, the alert naming TTFT p99 against the stable's;
2. a healthy candidate (the same model, no delay) passes each step and is promoted.

The route table the gateway reads is the control plane's (`deployments.routes.route_table`:
the LLM endpoint's entry with the rollout's split, its variants' Triton backends on the
pool's ready replica), written to the gateway's routes file after every tick (the file
source polls it, as the HTTP source polls the live server in the tensor closed loop).
The judge's minimum samples are scaled to this CPU's LLM throughput (a few streams a
second instead of the hundreds a ranker serves): the statistics are the same.
"""

import json
import threading
import time
from dataclasses import replace

import pytest
import requests

from deployments.models import Endpoint, PoolModel, PoolModelState, PoolReplica, Rollout
from deployments.rollout_machine import State
from deployments.routes import route_table
from deployments.services import rollouts as rollout_services
from deployments.services.route_changes import route_changed
from harness import factories
from harness.gateway import METRICS_TOKEN, start_gateway, stop_gateway
from harness.llm import TritonLLM, sse_data, tiny_llm_dir
from monitoring.collection.targets import ScrapeTarget
from monitoring.models import Alert, Verdict
from monitoring.services import canary
from monitoring.services.collector import metrics_collect
from registry.names import variant_name
from tests.gateway.conftest import require_triton

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

CHAT = [{"role": "user", "content": "what is the canary?"}]


class Chats:
    """`threads` OpenAI-style clients streaming chat completions through the gateway."""

    def __init__(self, url: str, threads: int = 3):
        self.url, self.threads, self.stop = url, threads, threading.Event()
        self.records: list[tuple[int, str]] = []  # (status, X-Model-Variant)
        self.workers = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]

    def _run(self, worker: int) -> None:
        with requests.Session() as session:
            i = worker
            while not self.stop.is_set():
                body = {"model": "chat", "messages": CHAT, "max_tokens": 6, "stream": True, "user": f"u{i}"}
                try:
                    with session.post(f"{self.url}/v1/chat/completions", json=body, stream=True, timeout=10) as r:
                        for _ in sse_data(r):
                            pass
                        self.records.append((r.status_code, r.headers.get("X-Model-Variant", "")))
                except requests.RequestException:
                    self.records.append((0, ""))
                i += self.threads

    def __enter__(self):
        for w in self.workers:
            w.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for w in self.workers:
            w.join(15)


@pytest.fixture(scope="module")
def triton(tmp_path_factory):
    require_triton()
    with TritonLLM(tmp_path_factory.mktemp("triton-llm"), tiny_llm_dir(), name="chat__v1__llm") as server:
        server.add_model("chat__v2__llm", delay_first_token_ms=300)  # the slower canary
        server.add_model("chat__v3__llm")  # a healthy one
        yield server


@pytest.fixture
def loop(triton, tmp_path, team_a, deployer, monkeypatch):
    """An LLM endpoint `chat` (v1 stable) on the Triton server, the gateway on the control
    plane's route table, and `tick()`: collect, judge, write the new table."""
    pool = factories.pool(team_a, "llm-pool", ready_replicas=1)
    PoolReplica.objects.filter(pool=pool).update(http_url=triton.url)  # the one replica is the real server
    route_changed()  # a bulk update bypasses the signal the cached route table waits for
    versions = [factories.llm_artifact(team_a, model_name="chat") for _ in range(3)]  # chat__v{1,2,3}__llm
    factories.pool_model_ready(pool, versions[0])
    endpoint = factories.endpoint(
        pool, versions[0], name="chat", kind="llm", public=True, ttft_slo_ms=2000, itl_slo_ms=500
    )
    routes = tmp_path / "routes.json"

    def publish():
        routes.write_text(json.dumps(route_table()))

    publish()
    proc, port = start_gateway(routes, tmp_path, GATEWAY_POLL_INTERVAL_MS="100")
    target = ScrapeTarget.from_dict(
        {"kind": "gateway", "url": f"http://127.0.0.1:{port}/metrics", "endpoint_teams": {"chat": team_a.pk}}
    )
    monkeypatch.setenv("GATEWAY_METRICS_TOKEN", METRICS_TOKEN)
    scaled = canary.judge_config_for

    def config_for(ep):
        return replace(scaled(ep), min_requests=60, min_latency_samples=40, min_guardrail_requests=30)

    monkeypatch.setattr(canary, "judge_config_for", config_for)

    def start(candidate, steps_bp):
        rollout = rollout_services.rollout_start(
            user=deployer,
            endpoint=Endpoint.objects.get(pk=endpoint.pk),
            candidate=candidate,
            steps_bp=steps_bp,
            step_min_seconds=3,
            step_min_requests=20,
            step_deadline_seconds=120,
            fair_baseline=False,
            promote_grace_seconds=1,
        )
        PoolModel.objects.filter(pool=pool).update(state=PoolModelState.READY, replica_ready={"r0": True})
        route_changed()
        rollout = rollout_services.rollout_reconcile(rollout_id=rollout.pk)
        assert rollout.state == State.CANARY, rollout.reason
        publish()
        return rollout

    def tick(rollout):
        metrics_collect(targets=[target])
        rollout = Rollout.objects.select_related("endpoint").get(pk=rollout.pk)
        if rollout.state == State.CANARY and rollout.traffic_started_at:
            canary.judge_rollout(rollout)
        publish()
        return Rollout.objects.get(pk=rollout.pk)

    metrics_collect(targets=[target])
    yield {"url": f"http://127.0.0.1:{port}", "start": start, "tick": tick, "versions": versions}
    stop_gateway(proc)


def run_until(loop, rollout, done, seconds: float):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(1.0)
        rollout = loop["tick"](rollout)
        if done(rollout):
            return rollout
    return rollout


def test_slower_llm_canary_is_rolled_back_on_ttft_and_a_healthy_one_promoted(loop):
    stable, slow, healthy = loop["versions"]
    with Chats(loop["url"]) as chats:
        # 1. the slower first token is rolled back -------------------------------------------
        rollout = loop["start"](slow, [5000, 10000])
        rollout = run_until(loop, rollout, lambda r: r.state != State.CANARY, 90)
        verdict = Verdict.objects.filter(rollout_id=rollout.pk).latest("id")
        assert rollout.state in (State.ROLLING_BACK, State.ROLLED_BACK), verdict.reason
        checks = {c["name"]: c for c in verdict.checks}
        assert checks["ttft"]["outcome"] == "fail", verdict.reason
        q = checks["ttft"]["quantiles_ms"]
        assert q["candidate"]["p50"] > 250 > q["stable"]["p50"]  # the 300 ms delay, seen through the gateway
        alert = Alert.objects.get(rollout_id=rollout.pk, kind="rollout_rolled_back")
        assert "TTFT slower than stable" in alert.reason and "p50" in alert.reason and "windows" in alert.reason, (
            alert.reason
        )
        # the gateway stops sending the candidate traffic once the table says so
        served_slow = len([r for r in chats.records if r[1] == variant_name(slow)])
        loop["tick"](rollout)
        time.sleep(1.5)
        recent = chats.records[-20:]
        assert not [r for r in recent if r[1] == variant_name(slow)], recent
        assert served_slow > 0
        Rollout.objects.filter(pk=rollout.pk).update(state=State.ROLLED_BACK)

        # 2. a healthy candidate is promoted ---------------------------------------------------
        rollout = loop["start"](healthy, [5000, 10000])
        rollout = run_until(loop, rollout, lambda r: r.state not in (State.CANARY,), 150)
        last = Verdict.objects.filter(rollout_id=rollout.pk).latest("id")
        assert rollout.state in (State.PROMOTING, State.SUCCEEDED), (rollout.state, rollout.reason, last.reason)
        assert not Alert.objects.filter(rollout_id=rollout.pk).exists()
    statuses = [s for s, _ in chats.records]
    assert statuses.count(200) > 0.98 * len(statuses), {s: statuses.count(s) for s in set(statuses)}
