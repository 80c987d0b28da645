"""LLM metrics from both sources: one HTTP server exposing the gateway's LLM families
(prometheus_client text, gateway/llm/metrics.py names) scraped at once by the built-in collector
(into the store) and by a real Prometheus; the judge's LLM windows agree and both roll
the slower-TTFT canary back; the dashboards' series (TTFT p99, tokens/s) come from both."""

import threading
import time
from datetime import timedelta

import numpy as np
import pytest
from django.utils import timezone

from harness import factories
from monitoring.collection.targets import ScrapeTarget
from monitoring.judge.checks import FAIL
from monitoring.judge.evidence import JudgeConfig
from monitoring.judge.verdict import judge
from monitoring.services.collector import metrics_collect
from monitoring.sources import StoreSource
from monitoring.sources.prometheus import PrometheusSource
from tests.monitoring.conftest import LLMGatewayMetrics
from tests.monitoring.prometheus_process import PrometheusProcess

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

CONFIG = JudgeConfig(kind="llm", min_requests=100, min_latency_samples=100, ttft_slo_ms=2000)


def test_llm_windows_agree_between_the_store_and_prometheus(gateway_server, tmp_path, team_a):
    staff = factories.user("ops", staff=True)
    metrics = gateway_server.metrics = LLMGatewayMetrics()
    address = gateway_server.base_url.removeprefix("http://")
    prometheus = PrometheusProcess(
        tmp_path, [{"job_name": "modelplane-gateway", "static_configs": [{"targets": [address]}]}]
    ).start()
    try:
        target = ScrapeTarget.from_dict(
            {"kind": "gateway", "url": gateway_server.url, "endpoint_teams": {"chat": team_a.pk}}
        )
        rng = np.random.default_rng(0)
        stop = threading.Event()

        def traffic():
            while not stop.is_set():
                for variant, ttft_ms in (("stable", 40.0), ("canary", 400.0)):
                    for _ in range(8):
                        metrics.stream(
                            "chat",
                            variant,
                            ttft_s=float(rng.lognormal(np.log(ttft_ms / 1000), 0.25)),
                            itl_s=rng.lognormal(np.log(0.004), 0.25, 4),
                            prompt=10,
                            completion=5,
                            team="team-a",
                            key="k1",
                            cost=0.01,
                        )
                time.sleep(0.1)

        time.sleep(1.5)  # Prometheus has a first scrape of the empty families
        since = timezone.now()
        metrics_collect(targets=[target])
        worker = threading.Thread(target=traffic, daemon=True)
        worker.start()
        for _ in range(12):
            time.sleep(1.0)
            metrics_collect(targets=[target])
        stop.set()
        worker.join()
        time.sleep(2.5)  # both scrapers see the last counts
        metrics_collect(targets=[target])
        until = timezone.now() + timedelta(seconds=1)
        served = {v: metrics.requests.labels("chat", v, "200", "none")._value.get() for v in ("stable", "canary")}

        sources = {"store": StoreSource(), "prometheus": PrometheusSource(prometheus.url, step_s=1.0)}
        for name, source in sources.items():
            arms = source.judge_arms(endpoint="chat", variants=["stable", "canary"], since=since, until=until)
            for variant, arm in arms.items():
                assert arm.as_llm().requests == pytest.approx(served[variant], abs=1), (name, variant)
                assert sum(arm.ttft_buckets.values()) == pytest.approx(served[variant], abs=1), (name, variant)
                assert sum(arm.itl_buckets.values()) == pytest.approx(4 * served[variant], abs=4), (name, variant)
            decision = judge(arms["stable"], arms["canary"], CONFIG)
            checks = {c["name"]: c["outcome"] for c in decision.checks}
            assert decision.outcome == FAIL and checks["ttft"] == FAIL and checks["itl"] != FAIL, decision.reason

            series = source.metric_series(
                user=staff, endpoint="chat", metrics=["ttft_p99_ms", "tokens_per_s", "cost"], since=since, until=until
            )
            got = {(s["variant"], s["metric"]) for s in series if s["points"]}
            assert {("canary", "ttft_p99_ms"), ("stable", "tokens_per_s"), ("stable", "cost")} <= got, name
            p99 = max(
                p["value"]
                for s in series
                if s["metric"] == "ttft_p99_ms" and s["variant"] == "canary"
                for p in s["points"]
            )
            assert 250 < p99 <= 1000, name
    finally:
        prometheus.stop()
