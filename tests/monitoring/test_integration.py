"""Real processes: a tritonserver scraped over HTTP, a real HTTP server with gateway
metrics, a real Celery worker delivering to a real local webhook receiver."""

import json
import time

import pytest

from monitoring.collection.targets import ScrapeTarget
from monitoring.models import (
    Alert,
    DeliveryStatus,
    MetricSample,
    NotificationChannel,
    NotificationDelivery,
    ScrapeState,
)
from monitoring.services.alerts import alert_raise
from monitoring.services.collector import metrics_collect
from tests.monitoring.conftest import BROKEN_MODEL, TRITON_MODELS, infer

pytestmark = pytest.mark.integration


def _values(endpoint, variant):
    return dict(MetricSample.objects.filter(endpoint=endpoint, variant=variant).values_list("metric", "value"))


@pytest.mark.django_db
def test_collector_scrapes_real_triton_and_gateway(triton, gateway_server, team_a, settings):
    settings.MONITORING_SCRAPE_ALERT_AFTER_S = 0.5
    models = {name: {"endpoint": ep, "variant": var} for name, (ep, var) in TRITON_MODELS.items()}
    targets = [
        ScrapeTarget.from_dict({"kind": "gateway", "url": gateway_server.url, "endpoint_teams": {"ctr": team_a.pk}}),
        ScrapeTarget.from_dict(
            {
                "kind": "triton",
                "url": triton.metrics_url,
                "models": models,
                "cost_per_replica_hour": 0.9,
                "endpoint_teams": {"ctr": team_a.pk},
            }
        ),
        ScrapeTarget.from_dict({"kind": "triton", "url": "http://127.0.0.1:9/metrics"}),  # nothing listens there
    ]
    first = metrics_collect(targets=targets)
    assert (
        first["scraped"] == 2 and first["failed"] == 1 and first["samples"] == 0
    )  # first scrape only records counters

    for _ in range(12):
        assert infer(triton, "ctr__v1__onnx-fp32", batch=4) == 200
    for _ in range(6):
        assert infer(triton, "ctr__v2__onnx-fp32", batch=2) == 200
    gateway_server.metrics.serve("ctr", "stable", [0.002] * 12, [200] * 12)
    gateway_server.metrics.serve("ctr", "canary", [0.004] * 5 + [0.02], [200] * 5 + [503])
    time.sleep(1.1)  # Triton refreshes its /metrics about once a second
    second = metrics_collect(targets=targets)
    assert second["scraped"] == 2 and second["samples"] > 0, second

    stable, canary = _values("ctr", "stable"), _values("ctr", "canary")
    assert stable["triton_requests"] == 12 and canary["triton_requests"] == 6
    assert stable["batch_size"] == pytest.approx(4.0) and canary["batch_size"] == pytest.approx(2.0)
    for values in (stable, canary):
        assert values["compute_ms"] > 0 and values["server_ms"] >= values["compute_ms"]
        assert 0 <= values["queue_share"] < 1 and 0 < values["utilization"] <= 1
        assert values["cost_per_1k_inferences"] > 0
    assert stable["requests"] == 12 and stable["error_rate"] == 0
    assert canary["requests"] == 6 and canary["error_rate"] == pytest.approx(1 / 6)
    assert stable["latency_p99_ms"] <= 3.0 and canary["latency_p99_ms"] > 3.0
    assert set(MetricSample.objects.filter(endpoint="ctr").values_list("team_id", flat=True)) == {team_a.pk}
    failed = ScrapeState.objects.get(target="triton:http://127.0.0.1:9/metrics")
    assert not failed.ok and "refused" in failed.error.lower() and failed.failing_since is not None
    outage = Alert.objects.get(kind="scrape_failed")  # failing for over 0.5 s by the second tick
    assert "http://127.0.0.1:9/metrics" in outage.reason and outage.team is None and outage.status == "open"
    assert not ScrapeState.objects.get(target=f"gateway:{gateway_server.url}").failing_since


@pytest.mark.django_db
def test_python_backend_errors_are_triton_successes_so_errors_come_from_the_gateway(triton, team_a):
    """A model that fails every request in its python backend: clients get an error, but
    Triton 2.51 counts python-backend error responses as successes
    (triton-inference-server/server#7713). The collector reports what Triton says; the
    error rate the judge uses is the gateway's (per HTTP status), not Triton's."""
    target = ScrapeTarget.from_dict(
        {
            "kind": "triton",
            "url": triton.metrics_url,
            "models": {BROKEN_MODEL: {"endpoint": "ctr-f", "variant": "canary"}},
        }
    )
    metrics_collect(targets=[target])
    statuses = [infer(triton, BROKEN_MODEL, dense_dims=14) for _ in range(3)]
    assert all(s >= 400 for s in statuses), statuses
    time.sleep(1.1)
    metrics_collect(targets=[target])
    values = _values("ctr-f", "canary")
    assert values["triton_requests"] == 3
    assert values["triton_failures"] == 0  # fails when Triton starts counting them: then trust triton_error_rate too


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_real_worker_collects_metrics_and_delivers_an_alert_after_a_failed_attempt(
    subprocess_env, celery_worker, gateway_server, webhook_receiver, team_a
):
    """One real Celery worker (started once: workers are the slow part) does both jobs.

    1. `monitoring.collect` (the beat task) scrapes the targets in MONITORING_TARGETS.
    2. An alert goes to a real webhook receiver that answers 503 first: the worker
       records the failed attempt, backs off, retries and delivers; both attempts are
       rows on the alert; raising it again while open sends nothing more."""
    from monitoring.tasks import collect

    subprocess_env["MONITORING_TARGETS"] = json.dumps(
        [{"kind": "gateway", "url": gateway_server.url, "endpoint_teams": {"ctr": team_a.pk}}]
    )
    subprocess_env["MONITORING_NOTIFY_BACKOFF_S"] = "0.5"
    subprocess_env["OUTBOUND_ALLOWED_HOSTS"] = "127.0.0.1"  # the receiver is local: the operator allows it
    celery_worker()

    collect.delay()
    _wait(
        lambda: ScrapeState.objects.filter(target=f"gateway:{gateway_server.url}", ok=True).exists(), 30, "first scrape"
    )
    gateway_server.metrics.serve("ctr", "stable", [0.001] * 40, [200] * 38 + [500] * 2)
    collect.delay()
    _wait(lambda: MetricSample.objects.filter(endpoint="ctr", metric="requests").exists(), 30, "samples")
    values = _values("ctr", "stable")
    assert values["requests"] == 40 and values["error_rate"] == pytest.approx(0.05) and values["request_rate"] > 0
    assert MetricSample.objects.filter(endpoint="ctr").first().team_id == team_a.pk

    NotificationChannel.objects.create(team=team_a, kind="webhook", target=webhook_receiver.url, min_severity="info")
    webhook_receiver.statuses = [503]
    alert, notified = alert_raise(
        kind="canary_rollback",
        severity="critical",
        endpoint="ctr",
        rollout_id=5,
        team=team_a,
        reason="candidate error rate 6.1% vs stable 1.0%",
        evidence={"e_value": 48.2},
    )
    assert notified
    _wait(
        lambda: NotificationDelivery.objects.filter(alert=alert, status=DeliveryStatus.DELIVERED).exists(),
        60,
        "delivery",
    )
    attempts = list(
        NotificationDelivery.objects.filter(alert=alert)
        .order_by("attempt")
        .values_list("attempt", "status", "response_code")
    )
    assert attempts == [(1, DeliveryStatus.FAILED, 503), (2, DeliveryStatus.DELIVERED, 200)]
    first, second = NotificationDelivery.objects.filter(alert=alert).order_by("attempt")
    assert (second.created_at - first.created_at).total_seconds() >= 0.5  # backed off
    assert len(webhook_receiver.received) == 2
    body = webhook_receiver.received[-1]
    assert "6.1%" in body["text"] and body["alert"]["evidence"] == {"e_value": 48.2}
    alert_raise(kind="canary_rollback", severity="critical", endpoint="ctr", rollout_id=5, team=team_a, reason="again")
    time.sleep(1.0)
    assert len(webhook_receiver.received) == 2


@pytest.mark.django_db
def test_real_gateway_a_dead_canary_fails_over_and_the_store_shows_its_errors(triton, tmp_path, team_a):
    """The real gateway (`python -m gateway`, routes from a file) splits `ctr` 70/30 between
    a healthy stable and a canary whose replica refuses connections. Clients see only
    200s (failover to stable), yet the collector stores every canary request as an error
    (failover accounting), and Triton's count of stable answers matches the gateway's."""
    import subprocess
    import sys
    import urllib.request

    from serving.tritonserver import free_port
    from tests.monitoring.conftest import ROOT

    stable_model = next(name for name, (_, var) in TRITON_MODELS.items() if var == "stable")
    routes = {
        "version": "m1",
        "endpoints": [
            {
                "name": "ctr",
                "salt": "m",
                "timeout_ms": 3000,
                "auth": {"public": True},
                "variants": [
                    {
                        "name": "stable",
                        "model_version": "1",
                        "triton_model": stable_model,
                        "role": "stable",
                        "weight_bp": 7000,
                        "replicas": [triton.http_url],
                    },
                    {
                        "name": "canary",
                        "model_version": "2",
                        "triton_model": "ctr__v2__onnx-fp32",
                        "role": "canary",
                        "weight_bp": 3000,
                        "replicas": [f"http://127.0.0.1:{free_port()}"],
                    },  # nothing listens there
                ],
            }
        ],
    }
    (tmp_path / "routes.json").write_text(json.dumps(routes))
    port = free_port()
    log = open(tmp_path / "gateway.log", "ab")
    gateway = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway",
            "--routes-file",
            str(tmp_path / "routes.json"),
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    base = f"http://127.0.0.1:{port}"
    try:

        def ready():
            try:
                return urllib.request.urlopen(f"{base}/v2/health/ready", timeout=0.5).status == 200
            except OSError:
                return gateway.poll() is not None

        _wait(ready, 20, "gateway ready")
        assert gateway.poll() is None, (tmp_path / "gateway.log").read_text()[-2000:]

        models = {stable_model: {"endpoint": "ctr", "variant": "stable"}}
        targets = [
            ScrapeTarget.from_dict({"kind": "gateway", "url": f"{base}/metrics", "endpoint_teams": {"ctr": team_a.pk}}),
            ScrapeTarget.from_dict(
                {"kind": "triton", "url": triton.metrics_url, "models": models, "endpoint_teams": {"ctr": team_a.pk}}
            ),
        ]
        metrics_collect(targets=targets)
        gateway_triton = type("G", (), {"http_url": base})()  # infer() posts to {http_url}/v2/models/{name}/infer
        statuses = [infer(gateway_triton, "ctr", batch=1) for _ in range(40)]
        assert statuses == [200] * 40  # the canary's failures never reach a client
        time.sleep(1.1)
        metrics_collect(targets=targets)
    finally:
        gateway.terminate()
        gateway.wait(10)

    stable, canary = _values("ctr", "stable"), _values("ctr", "canary")
    assert 10 <= canary["requests"] <= 14  # 30 % of 40 by the gateway's low-discrepancy split
    assert canary["errors"] == canary["requests"] and canary["error_rate"] == 1.0
    assert canary["failovers"] == canary["requests"]
    assert stable["errors"] == 0 and stable["error_rate"] == 0
    assert stable["requests"] == 40  # every client request was answered by stable in the end
    assert stable["triton_requests"] == 40  # and Triton agrees
    assert stable["latency_p99_ms"] > 0 and stable["upstream_mean_ms"] > 0


@pytest.mark.django_db
def test_real_gateway_abuse_at_the_canary_reaches_neither_the_store_nor_the_judge(triton, tmp_path, team_a):
    """The roll-back-by-abuse, through the platform's own path: a real gateway
    splits `ctr` 50/50 by sticky key between two healthy models; an anonymous client
    learns from X-Model-Variant which keys land on the canary (a healthy model answering in
    5 ms) and sends them 300
    requests with X-Request-Timeout-Ms: 1 (below the endpoint's 50-ms floor) plus
    requests with a bare LF in Content-Type. The collector scrapes the gateway into the
    store, and the judge reads its window from the store: the candidate has no errors,
    the breaker stays closed. Had those 504s been counted (as before), the same judge
    fails the candidate on its error rate."""
    import socket
    import subprocess
    import sys
    import urllib.request
    from datetime import timedelta

    import requests
    from django.utils import timezone

    from monitoring.judge.evidence import ArmWindow, JudgeConfig
    from monitoring.judge.verdict import judge
    from monitoring.selectors import metrics as metric_selectors
    from serving.tritonserver import free_port
    from tests.monitoring.conftest import ROOT, SLOW_MODEL

    stable_model = next(n for n, (_, v) in TRITON_MODELS.items() if v == "stable")
    canary_model = SLOW_MODEL  # healthy, 5 ms: every 1-ms deadline expires, as the attack intends
    routes = {
        "version": "abuse-1",
        "endpoints": [
            {
                "name": "ctr",
                "salt": "abuse",
                "timeout_ms": 2000,
                "min_timeout_ms": 50,
                "auth": {"public": True},
                "variants": [
                    {
                        "name": "stable",
                        "model_version": "1",
                        "triton_model": stable_model,
                        "role": "stable",
                        "weight_bp": 5000,
                        "replicas": [triton.http_url],
                    },
                    {
                        "name": "canary",
                        "model_version": "2",
                        "triton_model": canary_model,
                        "role": "canary",
                        "weight_bp": 5000,
                        "replicas": [triton.http_url],
                    },
                ],
            }
        ],
    }
    (tmp_path / "routes.json").write_text(json.dumps(routes))
    port = free_port()
    log = open(tmp_path / "gateway.log", "ab")
    gateway = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway",
            "--routes-file",
            str(tmp_path / "routes.json"),
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    base = f"http://127.0.0.1:{port}"
    url = f"{base}/v2/models/ctr/infer"
    body = json.dumps(
        {
            "inputs": [
                {"name": "dense", "shape": [1, 13], "datatype": "FP32", "data": [0.1] * 13},
                {"name": "sparse", "shape": [1, 26], "datatype": "INT64", "data": list(range(26))},
            ]
        }
    ).encode()
    try:

        def ready():
            try:
                return urllib.request.urlopen(f"{base}/v2/health/ready", timeout=0.5).status == 200
            except OSError:
                return gateway.poll() is not None

        _wait(ready, 20, "gateway ready")
        targets = [
            ScrapeTarget.from_dict({"kind": "gateway", "url": f"{base}/metrics", "endpoint_teams": {"ctr": team_a.pk}})
        ]
        metrics_collect(targets=targets)
        since = timezone.now() - timedelta(seconds=1)
        with requests.Session() as s:
            canary_keys = [
                k
                for k in (f"u{i}" for i in range(60))
                if s.post(url, data=body, headers={"X-User-Id": k}, timeout=5).headers["X-Model-Variant"] == "canary"
            ]
            assert len(canary_keys) >= 15
            abuse = [
                s.post(
                    url,
                    data=body,
                    headers={"X-User-Id": canary_keys[i % len(canary_keys)], "X-Request-Timeout-Ms": "1"},
                    timeout=5,
                ).status_code
                for i in range(300)
            ]
            for i in range(20):
                with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                    sock.sendall(
                        b"POST /v2/models/ctr/infer HTTP/1.1\r\nHost: gw\r\nX-User-Id: %s\r\n"
                        b"Content-Type: application/json\nX: y\r\nContent-Length: %d\r\n\r\n%s"
                        % (canary_keys[i % len(canary_keys)].encode(), len(body), body)
                    )
                    assert sock.recv(12) == b"HTTP/1.1 400"
            honest = [s.post(url, data=body, headers={"X-User-Id": f"h{i}"}, timeout=5).status_code for i in range(300)]
        # A loaded event loop may handle the canary's 5-ms reply before a 1-ms timer that is also due
        # (asyncio runs ready I/O first): such a request is served, which is no harm. Enough must expire
        # for the sensitivity check below to mean something.
        assert set(abuse) <= {200, 504} and abuse.count(504) >= 50, (abuse.count(504), sorted(set(abuse)))
        assert honest == [200] * 300
        time.sleep(1.1)
        metrics_collect(targets=targets)
        metrics_text = requests.get(f"{base}/metrics", timeout=5).text
    finally:
        gateway.terminate()
        gateway.wait(10)

    canary, stable = _values("ctr", "canary"), _values("ctr", "stable")
    assert canary.get("errors", 0) == 0 and stable.get("errors", 0) == 0
    assert canary["client_faults"] == abuse.count(504)  # the bare-LF requests never got as far as an endpoint
    from prometheus_client.parser import text_string_to_metric_families

    breaker = [
        s.value
        for f in text_string_to_metric_families(metrics_text)
        for s in f.samples
        if s.name == "gateway_replica_circuit_open" and s.labels.get("model") == canary_model
    ]
    assert breaker in ([], [0.0]), breaker  # never opened
    stable_arm, candidate_arm = metric_selectors.judge_window(
        endpoint="ctr", stable_variant="stable", candidate_variant="canary", since=since, until=timezone.now()
    )
    config = JudgeConfig(min_requests=100)
    assert candidate_arm.errors == 0 and candidate_arm.requests >= 100
    error_check = next(
        c for c in judge(stable_arm, candidate_arm, config, compare_latency=False).checks if c["name"] == "error_rate"
    )
    assert error_check["outcome"] != "fail", error_check
    # sensitivity: the same abuse counted as candidate errors (what the judge used to see) fails it
    counted = ArmWindow(ticks=[(candidate_arm.requests + canary["client_faults"], float(abuse.count(504)))])
    before_fix = next(
        c for c in judge(stable_arm, counted, config, compare_latency=False).checks if c["name"] == "error_rate"
    )
    assert before_fix["outcome"] == "fail", before_fix
