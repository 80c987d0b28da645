"""Per-arm guardrails from real metrics: a real gateway process serving an experiment's
arms (route role `arm`) from a real tritonserver, scraped by the real collector into the
metric store, judged by the analysis tick.

1. A/A: both arms are served by the one Triton model (the same process and queue), each
   under its own arm name. The gateway labels each arm's requests, latency and prediction
   scores; no check fails and the experiment runs on. (Two model copies are two python-backend
   processes: with four test workers on two cores one of them can run ~50 % slower for a
   whole run, a real difference the judge rightly calls, so it is no A/A here.)
2. A candidate arm whose model fails every request: the gateway fails each of its
   requests over to the control (clients see 200s), the collector counts each failover
   as the arm's error, and the analysis tick stops the experiment for harm, naming
   error_rate, with an alert."""

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from experiments.models import Experiment
from experiments.services import online as services
from harness import factories
from harness.gateway import METRICS_TOKEN, start_gateway, start_triton, stop_gateway
from harness.triton_models import SIGNATURE, behaviour_model, ctr_model, infer_body
from monitoring.collection.targets import ScrapeTarget
from monitoring.models import Alert, MetricSample
from monitoring.services.collector import metrics_collect
from registry.models import Event
from tests.gateway.conftest import require_triton

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

MODELS = {"m-control": "control", "m-broken": "broken"}


@pytest.fixture(scope="module")
def triton(tmp_path_factory):
    require_triton()
    work = tmp_path_factory.mktemp("guardrails-live")
    ctr_model(work / "repo", "m-control", seed=7)
    behaviour_model(work / "repo", "m-broken", fail=True)
    server = start_triton(work / "triton", work / "repo", list(MODELS))
    yield server
    server.stop()


def serve(experiment, models: dict[bool, str], triton, tmp_path, monkeypatch):
    """A gateway serving the experiment's arms (control, then the candidate) and its scrape target."""
    routes = tmp_path / f"routes-{experiment.pk}.json"
    arms = list(experiment.arms.all())
    variants = [
        {
            "name": a.name,
            "model_version": "1",
            "triton_model": models[a.is_control],
            "weight_bp": a.allocation_bp,
            "role": "stable" if a.is_control else "arm",
            "replicas": [triton.http_url],
            "signature": SIGNATURE,
        }
        for a in arms
    ]
    routes.write_text(
        json.dumps(
            {
                "version": f"g{experiment.pk}",
                "endpoints": [
                    {
                        "name": "gl-ep",
                        "timeout_ms": 3000,
                        "salt": experiment.salt,
                        "experiment": experiment.public_id,
                        "auth": {"public": True},
                        "variants": variants,
                    }
                ],
            }
        )
    )
    proc, port = start_gateway(routes, tmp_path, GATEWAY_CANDIDATE_SCORE_SAMPLE_RATE="1.0")
    monkeypatch.setenv("GATEWAY_METRICS_TOKEN", METRICS_TOKEN)  # what the collector sends
    target = ScrapeTarget.from_dict(
        {
            "kind": "gateway",
            "url": f"http://127.0.0.1:{port}/metrics",
            "endpoint_teams": {"gl-ep": experiment.endpoint.team_id},
        }
    )
    return proc, f"http://127.0.0.1:{port}", target


def drive(url: str, target, *, requests_total: int, seconds: float) -> dict:
    """Clients (4 threads, a user id per request batch) while the collector scrapes every
    second, as beat does every 2 s. Returns {variant header: replies} and statuses."""
    metrics_collect(targets=[target])  # the first scrape only records the counters
    seen: dict[str, int] = {}
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def client(worker: int):
        with requests.Session() as s:
            i = worker
            while i < requests_total and time.monotonic() < stop_at:
                r = s.post(
                    f"{url}/v2/models/gl-ep/infer",
                    data=infer_body(seed=i % 50),
                    headers={"X-User-Id": f"user-{i}"},
                    timeout=10,
                )
                with lock:
                    statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                    seen[r.headers.get("X-Model-Variant", "?")] = seen.get(r.headers.get("X-Model-Variant", "?"), 0) + 1
                i += 4

    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(client, w) for w in range(4)]
        while not all(f.done() for f in futures):
            time.sleep(1.0)
            metrics_collect(targets=[target])
        for f in futures:
            f.result()
    time.sleep(0.2)
    metrics_collect(targets=[target])
    return {"variants": seen, "statuses": statuses}


def stored(variant: str, metric: str) -> float:
    return sum(
        MetricSample.objects.filter(endpoint="gl-ep", variant=variant, metric=metric).values_list("value", flat=True)
    )


def test_arms_judged_from_real_gateway_metrics_aa_runs_on_and_a_failing_arm_stops_for_harm(
    triton, tmp_path, monkeypatch, team_a, deployer, artifact_factory
):
    pool = factories.pool(team_a, ready_replicas=1)
    stable, copy, broken = artifact_factory(team_a), artifact_factory(team_a), artifact_factory(team_a)
    endpoint = factories.endpoint(pool, stable, name="gl-ep", public=True, slo_p99_ms=1000, slo_error_rate=0.05)

    # 1. A/A through the real gateway
    aa = services.experiment_create(user=deployer, endpoint=endpoint, name="aa", candidates=[copy])
    aa = services.experiment_start(user=deployer, experiment=aa)
    control, candidate = (a.name for a in aa.arms.all())
    proc, url, target = serve(aa, {True: "m-control", False: "m-control"}, triton, tmp_path, monkeypatch)
    try:
        traffic = drive(url, target, requests_total=1400, seconds=25)
    finally:
        stop_gateway(proc)
    assert traffic["statuses"] == {200: sum(traffic["statuses"].values())}
    assert set(traffic["variants"]) == {control, candidate}
    # the collector stored each arm's own series from the gateway's labels
    for arm in (control, candidate):
        assert stored(arm, "requests") == traffic["variants"][arm]
        assert (
            stored(arm, "errors") == 0
            and MetricSample.objects.filter(variant=arm, metric__startswith="latency_bucket:").exists()
        )
        assert MetricSample.objects.filter(variant=arm, metric__startswith="score_bin:").exists()
    result = services.experiment_analyze(experiment_id=aa.pk)
    g = result["guardrails"][candidate]
    outcomes = {c["name"]: c["outcome"] for c in g["checks"]}
    assert g["status"] != "fail" and "fail" not in outcomes.values(), g["reason"]
    assert set(outcomes) == {"shared_outage", "p99_slo", "error_slo", "psi", "error_rate", "latency", "latency_tail"}
    if traffic["variants"][candidate] >= 500:  # the e-process's minimum sample for a pass
        assert outcomes["error_rate"] == "pass"
    assert Experiment.objects.get(pk=aa.pk).state == "running" and not Alert.objects.exists()
    services.experiment_stop(user=deployer, experiment=aa, reason="A/A done")

    # 2. a candidate arm that fails every request
    bad = services.experiment_create(user=deployer, endpoint=endpoint, name="bad", candidates=[broken])
    bad = services.experiment_start(user=deployer, experiment=bad)
    broken_arm = bad.arms.get(is_control=False).name
    proc, url, target = serve(bad, {True: "m-control", False: "m-broken"}, triton, tmp_path, monkeypatch)
    try:
        traffic = drive(url, target, requests_total=400, seconds=20)
    finally:
        stop_gateway(proc)
    # failover hides it from clients: every reply is the control's 200
    served = sum(traffic["statuses"].values())  # 400, or fewer if a busy machine ran out of the 20 s
    assert served >= 200 and traffic["statuses"] == {200: served} and set(traffic["variants"]) == {control}
    assert stored(broken_arm, "failovers") >= 100 and stored(broken_arm, "errors") == stored(broken_arm, "failovers")
    result = services.experiment_analyze(experiment_id=bad.pk)
    exp = Experiment.objects.get(pk=bad.pk)
    assert (exp.state, exp.decision, exp.winner.is_control) == ("decided", "stop", True)
    g = result["guardrails"][broken_arm]
    failed = {c["name"] for c in g["checks"] if c["outcome"] == "fail"}
    assert g["status"] == "fail" and {"error_rate", "error_slo"} <= failed, g["reason"]
    event = Event.objects.get(object_id=exp.pk, action="status_changed", to_state="decided")
    assert (
        event.reason.startswith(f"stopped for harm: guardrail failed on {broken_arm} (")
        and "error_rate" in event.reason
    )
    assert "error_rate" in {c["name"] for c in event.data["guardrails"][broken_arm]["checks"]}
    alert = Alert.objects.get(kind="experiment_guardrail_failed")
    assert alert.severity == "critical" and broken_arm in alert.reason and alert.endpoint == "gl-ep"
