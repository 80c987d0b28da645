"""The judge decides the same whichever source feeds it. On the same traffic —
a real gateway process in front of a real tritonserver, scraped at once by the built-in
collector (into the store) and by a real Prometheus (Debian's package, with the shipped
recording rules) — the judge fed by the store and the judge fed by PromQL roll back the
same slow candidate and fail nothing of the same healthy (A/A) one, deciding each of its
comparisons the same wherever both have decided, on windows whose counts agree.
"""

import json
import re
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
import requests
from django.utils import timezone

from harness.gateway import METRICS_TOKEN, start_gateway, start_triton, stop_gateway
from harness.triton_models import SIGNATURE, behaviour_model, ctr_model, infer_body
from monitoring.collection.targets import ScrapeTarget
from monitoring.judge.checks import FAIL, INCONCLUSIVE
from monitoring.judge.evidence import JudgeConfig
from monitoring.judge.verdict import judge
from monitoring.services.collector import metrics_collect
from monitoring.sources import StoreSource, metric_source
from monitoring.sources.prometheus import PrometheusSource
from tests.gateway.conftest import require_triton
from tests.monitoring.prometheus_process import PrometheusProcess

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

ENDPOINTS = {"pq-aa": ("m-stable", "m-copy"), "pq-slow": ("m-stable", "m-slow")}
CONFIG = JudgeConfig(min_requests=150, min_latency_samples=150)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    require_triton()
    work = tmp_path_factory.mktemp("prometheus-source")
    ctr_model(work / "repo", "m-stable", seed=7)
    ctr_model(work / "repo", "m-copy", seed=7)  # the same weights: an A/A pair
    behaviour_model(work / "repo", "m-slow", sleep_ms=25)
    triton = start_triton(work / "triton", work / "repo", ["m-stable", "m-copy", "m-slow"])
    routes = work / "routes.json"
    routes.write_text(
        json.dumps(
            {
                "version": "prom-1",
                "endpoints": [
                    {
                        "name": name,
                        "timeout_ms": 3000,
                        "auth": {"public": True},
                        "variants": [
                            {
                                "name": variant,
                                "model_version": "1",
                                "triton_model": model,
                                "weight_bp": 5000,
                                "role": role,
                                "replicas": [triton.http_url],
                                "signature": SIGNATURE,
                            }
                            for variant, model, role in (("stable", stable, "stable"), ("candidate", cand, "canary"))
                        ],
                    }
                    for name, (stable, cand) in ENDPOINTS.items()
                ],
            }
        )
    )
    gateway, port = start_gateway(routes, work)
    prometheus = PrometheusProcess(
        work,
        [
            {
                "job_name": "modelplane-gateway",
                "authorization": {"credentials": METRICS_TOKEN},
                "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
            },
            {"job_name": "modelplane-triton", "static_configs": [{"targets": [urlsplit(triton.metrics_url).netloc]}]},
        ],
    ).start()
    yield {"gateway": f"http://127.0.0.1:{port}", "prometheus": prometheus, "triton_metrics": triton.metrics_url}
    prometheus.stop()
    stop_gateway(gateway)
    triton.stop()


def drive(url: str, targets: list[ScrapeTarget], seconds: float) -> dict:
    """4 clients over both endpoints while the collector scrapes every second."""
    counts: dict[tuple, int] = {}
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def client(worker: int):
        with requests.Session() as s:
            i = worker
            while time.monotonic() < stop_at:
                endpoint = list(ENDPOINTS)[i % 2]
                r = s.post(f"{url}/v2/models/{endpoint}/infer", data=infer_body(seed=i % 50), timeout=10)
                with lock:
                    key = (endpoint, r.headers.get("X-Model-Variant", "?"), r.status_code)
                    counts[key] = counts.get(key, 0) + 1
                i += 4

    metrics_collect(targets=targets)
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(client, w) for w in range(4)]
        while not all(f.done() for f in futures):
            time.sleep(1.0)
            metrics_collect(targets=targets)
        for f in futures:
            f.result()
    time.sleep(2.5)  # both scrapers see the last counts
    metrics_collect(targets=targets)
    return counts


def test_store_and_prometheus_feed_the_judge_the_same_decisions(stack, monkeypatch, team_a):
    monkeypatch.setenv("GATEWAY_METRICS_TOKEN", METRICS_TOKEN)  # what the collector sends
    target = ScrapeTarget.from_dict(
        {"kind": "gateway", "url": f"{stack['gateway']}/metrics", "endpoint_teams": {e: team_a.pk for e in ENDPOINTS}}
    )
    since = timezone.now()
    counts = drive(stack["gateway"], [target], seconds=25)
    until = timezone.now() + timedelta(seconds=1)
    assert {status for (_, _, status) in counts} == {200}, counts

    sources = {"store": StoreSource(), "prometheus": PrometheusSource(stack["prometheus"].url, step_s=1.0)}
    decisions = {}
    for endpoint in ENDPOINTS:
        for name, source in sources.items():
            arms = source.judge_arms(endpoint=endpoint, variants=["stable", "candidate"], since=since, until=until)
            served = {v: sum(n for (e, var, _), n in counts.items() if e == endpoint and var == v) for v in arms}
            for variant, arm in arms.items():
                # every request the clients saw, counted once, by either source
                assert arm.requests == pytest.approx(served[variant], abs=2), (name, endpoint, variant)
                assert sum(arm.latency_buckets.values()) == pytest.approx(served[variant], abs=2)
            decisions[(endpoint, name)] = judge(arms["stable"], arms["candidate"], CONFIG)

    def outcomes(endpoint, name):
        return {c["name"]: c["outcome"] for c in decisions[(endpoint, name)].checks}

    slow_store, slow_prom = decisions[("pq-slow", "store")], decisions[("pq-slow", "prometheus")]
    assert slow_store.outcome == slow_prom.outcome == FAIL, (slow_store.reason, slow_prom.reason)
    assert outcomes("pq-slow", "store")["latency"] == outcomes("pq-slow", "prometheus")["latency"] == "fail"
    aa_store, aa_prom = decisions[("pq-aa", "store")], decisions[("pq-aa", "prometheus")]
    assert aa_store.outcome != FAIL and aa_prom.outcome != FAIL, (aa_store.reason, aa_prom.reason)
    aa = {name: outcomes("pq-aa", name) for name in sources}
    assert aa["store"].keys() == aa["prometheus"].keys()
    assert FAIL not in aa["store"].values() and FAIL not in aa["prometheus"].values(), aa
    # The windows are each scraper's own ticks, so a comparison one source has already passed
    # may still be gathering evidence on the other's (a CI run: latency pass vs inconclusive
    # after 25 s); where both have decided, they decide the same.
    decided = [name for name in aa["store"] if INCONCLUSIVE not in (aa["store"][name], aa["prometheus"][name])]
    assert {n: aa["store"][n] for n in decided} == {n: aa["prometheus"][n] for n in decided}, aa
    assert decided, aa

    # the recording rules the dashboards read evaluate on the same series
    rates = stack["prometheus"].query('endpoint_variant:gateway_requests:rate1m{endpoint="pq-slow"}')
    assert {r["metric"]["variant"] for r in rates} == {"stable", "candidate"}
    # PROMETHEUS_URL picks the Prometheus source
    monkeypatch.setenv("PROMETHEUS_URL", stack["prometheus"].url)
    assert metric_source().name == "prometheus"


PANELS = "request_rate,error_rate,latency_p99_ms,latency_p50_ms,queue_ms,utilization"
SHOWN = f"{PANELS},requests,errors,triton_requests"


def overview(client, user) -> tuple[dict, list[str], str]:
    """The monitoring page as `user` sees it: its chart JSON, the endpoints it charts, the HTML."""
    client.force_login(user)
    html = client.get("/monitoring/?range=15m").content.decode()
    config = json.loads(re.search(r'<script id="chart-config" type="application/json">(.*?)</script>', html).group(1))
    return config, re.findall(r'class="card endpoint-charts" data-endpoint="([^"]+)"', html), html


def test_dashboards_show_the_same_series_from_both_sources(
    stack, monkeypatch, settings, client, api_for, team_a, team_b
):
    """/api/v1/metrics/ (what the charts draw) and the monitoring page give the same series
    whether the store or Prometheus answers, on the same traffic through a real gateway and
    tritonserver; another team sees none of them from either; Prometheus down is a 503."""
    from harness import factories

    monkeypatch.setenv("GATEWAY_METRICS_TOKEN", METRICS_TOKEN)
    pool = factories.pool(team_a)
    for name in ENDPOINTS:
        factories.endpoint(pool, name=name)
    alice, bob = factories.user("alice"), factories.user("bob")
    factories.member(alice, team_a)
    factories.member(bob, team_b)
    teams = {e: team_a.pk for e in ENDPOINTS}
    triton = {
        "kind": "triton",
        "url": stack["triton_metrics"],
        "endpoint_teams": teams,
        # m-stable serves both endpoints' stables: its Triton series are pq-slow's stable here
        "models": {
            "m-stable": {"endpoint": "pq-slow", "variant": "stable"},
            "m-slow": {"endpoint": "pq-slow", "variant": "candidate"},
            "m-copy": {"endpoint": "pq-aa", "variant": "candidate"},
        },
    }
    settings.MONITORING_TARGETS = [triton]  # the Prometheus source maps Triton's instances by these
    gateway = ScrapeTarget.from_dict({"kind": "gateway", "url": f"{stack['gateway']}/metrics", "endpoint_teams": teams})
    since = timezone.now()
    counts = drive(stack["gateway"], [gateway, ScrapeTarget.from_dict(triton)], seconds=20)
    until = timezone.now() + timedelta(seconds=1)
    window = {"since": since.isoformat(), "until": until.isoformat()}

    answers, pages = {}, {}
    for source in ("store", "prometheus"):
        if source == "prometheus":
            settings.PROMETHEUS_URL = stack["prometheus"].url
        reply = api_for(alice).get("/api/v1/metrics/", {"endpoint": "pq-slow", "metric": SHOWN, **window})
        assert reply.status_code == 200, reply.content
        answers[source] = {(s["variant"], s["metric"]): s["points"] for s in reply.json()["series"]}
        pages[source] = overview(client, alice)
        # another team's user: nothing of team A's, from either source (asked by name too)
        other = api_for(bob).get("/api/v1/metrics/", {"endpoint": "pq-slow", "metric": SHOWN, **window})
        assert other.status_code == 200 and other.json()["series"] == []
        assert overview(client, bob)[1] == []

    store, prom = answers["store"], answers["prometheus"]
    assert set(store) == set(prom)
    assert {m for _, m in store} == set(SHOWN.split(","))  # every panel has its series
    for variant in ("stable", "candidate"):
        served = sum(n for (e, v, _), n in counts.items() if e == "pq-slow" and v == variant)
        for answer in (store, prom):
            assert sum(p["value"] for p in answer[(variant, "requests")]) == pytest.approx(served, abs=2)
            assert sum(p["value"] for p in answer[(variant, "errors")]) == 0
            # Triton counted the same requests of its model (m-stable also serves pq-aa's stable)
            assert sum(p["value"] for p in answer[(variant, "triton_requests")]) >= served - 2
        assert sum(p["value"] for p in store[(variant, "triton_requests")]) == pytest.approx(
            sum(p["value"] for p in prom[(variant, "triton_requests")]), abs=2
        )

    def typical(answer, variant, metric):
        return statistics.median(p["value"] for p in answer[(variant, metric)])

    # the slow candidate (25 ms in its model) reads slow in both, and slower than the stable
    for answer in (store, prom):
        assert typical(answer, "candidate", "latency_p50_ms") > 25
        assert typical(answer, "candidate", "latency_p99_ms") > 25
        assert typical(answer, "candidate", "latency_p50_ms") > typical(answer, "stable", "latency_p50_ms")
    for variant in ("stable", "candidate"):
        assert typical(prom, variant, "latency_p50_ms") == pytest.approx(
            typical(store, variant, "latency_p50_ms"), rel=0.5
        )
    assert typical(prom, "candidate", "queue_ms") >= 0 and typical(prom, "candidate", "utilization") > 0
    # requests/s: the same traffic over the same 20 s
    candidate_served = sum(n for (e, v, _), n in counts.items() if e == "pq-slow" and v == "candidate")
    for answer in (store, prom):
        active = [p["value"] for p in answer[("candidate", "request_rate")] if p["value"] > 0]
        assert statistics.median(active) == pytest.approx(candidate_served / 20, rel=0.5)

    # the page: the same chart JSON and the same endpoints and variants charted
    (store_config, store_charted, store_html), (prom_config, prom_charted, prom_html) = (
        pages["store"],
        pages["prometheus"],
    )
    assert store_config == prom_config and sorted(store_charted) == sorted(prom_charted) == sorted(ENDPOINTS)
    for endpoint in ENDPOINTS:
        heading = re.compile(rf'data-endpoint="{endpoint}">\s*<h2[^>]*>{endpoint} <span class="muted">([^<]*)')
        assert heading.search(store_html).group(1) == heading.search(prom_html).group(1)
    assert "from Prometheus" in prom_html and "from Prometheus" not in store_html

    # hostile input reaches PromQL only quoted: "." is not a wildcard, a metric name is never sent
    root = factories.user("root", staff=True)
    for query in ({"endpoint": "pq.slow"}, {"endpoint": "pq-slow", "metric": 'request_rate"} or vector(1)'}):
        odd = api_for(root).get("/api/v1/metrics/", {"metric": "requests", **query, **window})
        assert odd.status_code == 200 and odd.json()["series"] == [], odd.content

    # Prometheus down: the API says so (503, JSON), the page says so (200)
    from serving.tritonserver import free_port

    settings.PROMETHEUS_URL = f"http://127.0.0.1:{free_port()}"
    down = api_for(alice).get("/api/v1/metrics/", {"endpoint": "pq-slow", "metric": "request_rate"})
    assert down.status_code == 503 and down.json()["code"] == "metric_source_unavailable"
    assert 'id="source-error"' in overview(client, alice)[2]
