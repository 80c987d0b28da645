"""The collector on the gateway's LLM families (gateway/llm/metrics.py), written as
prometheus_client exposes them: per endpoint x variant TTFT/ITL quantiles and buckets,
requests and errors, tokens, tokens/s and cost; per key through the keys page's path."""

import pytest

from monitoring.collection import collect, gateway_samples
from monitoring.judge.windows import arms_from_rows
from monitoring.selectors.tenants import key_traffic_from_text
from tests.monitoring.conftest import GatewayMetrics, LLMGatewayMetrics


def _tick(metrics: LLMGatewayMetrics, serve, seconds=2.0) -> dict[tuple[str, str], dict]:
    before = gateway_samples.gateway_snapshot(metrics.text())
    serve()
    after = gateway_samples.gateway_snapshot(metrics.text())
    return {k: collect.derive(t) for k, t in gateway_samples.gateway_deltas(before, after, seconds=seconds).items()}


def test_llm_metrics_per_variant_from_two_scrapes():
    m = LLMGatewayMetrics()
    m.stream("chat", "v1-llm", ttft_s=0.01, itl_s=[0.004], prompt=5, completion=2)  # before the interval

    def serve():
        for _ in range(8):
            m.stream("chat", "v1-llm", ttft_s=0.02, itl_s=[0.003, 0.004, 0.004], prompt=10, completion=4, cost=0.5)
        for _ in range(4):
            m.stream("chat", "v2-llm", ttft_s=0.4, itl_s=[0.015, 0.015], prompt=10, completion=3)
        m.stream("chat", "v2-llm", ttft_s=0, status=502, fault="backend")  # failed before its first token
        m.stream("chat", "v2-llm", ttft_s=0.4, status=200, fault="backend")  # broke mid-stream
        m.stream("chat", "v2-llm", ttft_s=0, status=429, fault="client")  # a token quota: the client's
        m.fallbacks.labels("chat", "b1", "connect").inc()
        m.streams.labels("chat").set(3)

    out = _tick(m, serve)
    stable, canary = out[("chat", "v1-llm")], out[("chat", "v2-llm")]
    assert stable["llm_requests"] == 8 and stable["llm_errors"] == 0 and stable["llm_error_rate"] == 0
    assert stable["llm_request_rate"] == 4.0
    assert canary["llm_requests"] == 6 and canary["llm_errors"] == 2
    assert canary["llm_error_rate"] == pytest.approx(2 / 6)
    assert canary["llm_client_faults"] == 1
    # 20 ms sits in the gateway's (10, 25] ms bucket; 400 ms in (250, 500]
    assert 10 < stable["ttft_p50_ms"] <= 25 and 10 < stable["ttft_p99_ms"] <= 25
    assert 250 < canary["ttft_p50_ms"] <= 500
    assert stable["ttft_bucket:0.025"] == 8 and stable["ttft_bucket:0.01"] == 0  # its lower edge kept
    assert canary["ttft_bucket:0.5"] == 5  # the mid-stream failure had its first token
    assert stable["itl_bucket:0.005"] == 24 and 2 < stable["itl_p50_ms"] <= 5
    assert canary["itl_bucket:0.02"] == 8 and 10 < canary["itl_p99_ms"] <= 20
    assert stable["prompt_tokens"] == 80 and stable["completion_tokens"] == 32
    assert stable["tokens_per_s"] == pytest.approx(16.0) and stable["cost"] == pytest.approx(4.0)
    assert canary["completion_tokens"] == 12 and "cost" not in canary
    assert 0 < stable["llm_queue_mean_ms"] < 1
    per_endpoint = out[("chat", collect.ALL_VARIANTS)]
    assert per_endpoint["llm_fallbacks"] == 1 and per_endpoint["llm_streams_in_flight"] == 3
    # no tensor series were made up for an LLM endpoint
    assert "requests" not in stable and "latency_p99_ms" not in stable


def test_tensor_and_llm_families_side_by_side_and_restarts():
    """One scrape of a gateway serving both kinds: the tensor endpoint's metrics are as
    before, the LLM one has only LLM metrics; a gateway restart (counters drop) counts
    from zero, never negative."""
    tensor, m = GatewayMetrics(), LLMGatewayMetrics()
    for _ in range(3):
        m.stream("chat", "v1-llm", ttft_s=0.02, prompt=3, completion=3)
    tensor.serve("ctr", "stable", [0.002], [200])
    before = gateway_samples.gateway_snapshot(tensor.text() + m.text())
    fresh = LLMGatewayMetrics()  # the restarted process
    fresh.stream("chat", "v1-llm", ttft_s=0.02, prompt=1, completion=2)
    tensor.serve("ctr", "stable", [0.002, 0.003], [200, 500])
    totals = gateway_samples.gateway_deltas(
        before, gateway_samples.gateway_snapshot(tensor.text() + fresh.text()), seconds=1.0
    )
    out = collect.derive(totals[("chat", "v1-llm")])
    assert out["llm_requests"] == 1 and out["completion_tokens"] == 2 and out["tokens_per_s"] == 2.0
    ctr = collect.derive(totals[("ctr", "stable")])
    assert ctr["requests"] == 2 and ctr["errors"] == 1 and not any(k.startswith(("llm_", "ttft")) for k in ctr)


def test_replicas_add_up_and_windows_read_ttft_itl_and_llm_ticks():
    """Two gateways' totals merge; the stored rows become the judge's windows (the same
    function for the store and Prometheus: monitoring/judge/windows.py)."""
    a, b = LLMGatewayMetrics(), LLMGatewayMetrics()
    snaps = [gateway_samples.gateway_snapshot(x.text()) for x in (a, b)]
    a.stream("chat", "v2-llm", ttft_s=0.02, itl_s=[0.004] * 3)
    b.stream("chat", "v2-llm", ttft_s=0.2, itl_s=[0.004] * 3)
    b.stream("chat", "v2-llm", ttft_s=0, status=503, fault="backend")
    parts = [
        gateway_samples.gateway_deltas(s, gateway_samples.gateway_snapshot(x.text()), seconds=2.0)
        for s, x in zip(snaps, (a, b))
    ]
    derived = collect.derive(collect.merge(*parts)[("chat", "v2-llm")])
    assert derived["llm_requests"] == 3 and derived["llm_errors"] == 1
    rows = [("v2-llm", metric, "t1", value) for metric, value in derived.items()]
    window = arms_from_rows(rows, ["v2-llm"])["v2-llm"]
    assert window.llm_ticks == [(3.0, 1.0)] and window.ticks == [(0.0, 0.0)]
    assert sum(window.ttft_buckets.values()) == 2 and window.ttft_buckets[0.25] == 1
    assert sum(window.itl_buckets.values()) == 6 and window.itl_ticks == [window.itl_buckets]


def test_per_key_tokens_and_cost_for_the_keys_page():
    """Tokens and cost per key (team/key labels from the route table), summed over
    endpoints and variants; public calls (key "") are not a key."""
    m = LLMGatewayMetrics()
    m.stream("chat", "v1-llm", ttft_s=0.02, prompt=10, completion=5, team="search", key="k1", cost=0.25)
    m.stream("chat", "v2-llm", ttft_s=0.02, prompt=7, completion=1, team="search", key="k1", cost=0.5)
    m.stream("ads-llm", "v1-llm", ttft_s=0.02, prompt=2, completion=2, team="ads", key="k2")
    m.stream("chat", "v1-llm", ttft_s=0.02, prompt=4, completion=4)  # public: no key
    traffic = key_traffic_from_text(m.text())
    k1 = traffic["keys"]["k1"]
    assert (k1["prompt_tokens"], k1["completion_tokens"], k1["cost"]) == (17.0, 6.0, 0.75)
    assert k1["llm_endpoints"] == {
        "chat": {"prompt_tokens": 17.0, "completion_tokens": 6.0, "tokens": 23.0, "cost": 0.75}
    }
    k2 = traffic["keys"]["k2"]
    assert k2["prompt_tokens"] + k2["completion_tokens"] == 4 and k2["cost"] == 0
    assert "" not in traffic["keys"]
    assert traffic["teams"]["search"]["tokens"] == 23 and traffic["teams"]["ads"]["prompt_tokens"] == 2
    assert traffic["public"]["chat"]["tokens"] == 8


@pytest.mark.django_db
def test_tenant_llm_usage_shows_only_the_viewers_keys_teams_and_endpoints(
    gateway_server, monkeypatch, deployer, team_a, team_b, artifact_factory
):
    """tenant_llm_usage (the keys page's LLM columns) over the gateway's /metrics served
    over real HTTP: another team's key, team and public calls are not shown."""
    from deployments.services import keys as key_services
    from harness import factories
    from monitoring.selectors import tenants
    from registry.models import Role

    monkeypatch.setattr(tenants, "CACHE_SECONDS", 0.0)
    factories.endpoint(factories.pool(team_a, "pool-a", ready_replicas=1), artifact_factory(team_a), name="chat")
    factories.endpoint(
        factories.pool(team_b, "pool-b", ready_replicas=1), artifact_factory(team_b, model_name="b"), name="theirs"
    )
    mine, _ = key_services.inference_key_create(user=deployer, team=team_a, name="assistant")
    boss = factories.user("boss-b")
    factories.member(boss, team_b, Role.DEPLOYER)
    theirs, _ = key_services.inference_key_create(user=boss, team=team_b, name="their-key")
    m = LLMGatewayMetrics()
    m.stream("chat", "v1-llm", ttft_s=0.02, prompt=30, completion=12, team="team-a", key=mine.gateway_id, cost=0.2)
    m.stream("theirs", "v1-llm", ttft_s=0.02, prompt=5, completion=5, team="team-b", key=theirs.gateway_id)
    m.stream("chat", "v1-llm", ttft_s=0.02, prompt=2, completion=2)
    m.stream("theirs", "v1-llm", ttft_s=0.02, prompt=9, completion=9)
    gateway_server.metrics = m
    monkeypatch.setenv("GATEWAY_METRICS_URL", gateway_server.url)
    usage = tenants.tenant_llm_usage(user=deployer)
    assert list(usage["keys"]) == [mine.gateway_id]
    row = usage["keys"][mine.gateway_id]
    assert row["key"] == mine and (row["prompt_tokens"], row["completion_tokens"], row["cost"]) == (30, 12, 0.2)
    assert usage["teams"] == {team_a.name: {"prompt_tokens": 30, "completion_tokens": 12, "tokens": 42, "cost": 0.2}}
    assert list(usage["public"]) == ["chat"] and usage["public"]["chat"]["tokens"] == 4
    assert set(tenants.tenant_llm_usage(user=boss)["keys"]) == {theirs.gateway_id}


def test_reads_the_gateways_own_llm_exposition():
    """The gateway's own LLM collector (gateway/llm/metrics.py LlmMetrics) on a private
    registry: the default names and labels read its text."""
    from prometheus_client import CollectorRegistry, generate_latest

    from gateway.keys.tenants import Key
    from gateway.llm import metrics as llm_metrics

    registry = CollectorRegistry()
    gw = llm_metrics.LlmMetrics(registry=registry)
    before = gateway_samples.gateway_snapshot(generate_latest(registry).decode())
    tenant = Key({"id": "k7", "sha256": "0" * 64, "team": "team-a"})
    for ttft in (0.02, 0.03, 0.04):
        gw.done("chat", "v2-llm", 200, "none")
        gw.observe(gw.ttft, ("chat", "v2-llm"), ttft)
        for _ in range(4):
            gw.observe(gw.itl, ("chat", "v2-llm"), 0.004, llm_metrics.ITL_BUCKETS)
        gw.usage("chat", "v2-llm", tenant, 9, 5, 0.01)
    gw.done("chat", "v2-llm", 502, "backend")
    gw.done("chat", "v2-llm", 429, "client")
    gw.fallback("chat", "tri-1", "connect")
    text = generate_latest(registry).decode()
    out = collect.derive(
        gateway_samples.gateway_deltas(before, gateway_samples.gateway_snapshot(text), seconds=1.0)[("chat", "v2-llm")]
    )
    assert (out["llm_requests"], out["llm_errors"], out["llm_client_faults"]) == (4, 1, 1)
    assert sum(v for k, v in out.items() if k.startswith("ttft_bucket:")) == 3 and 25 < out["ttft_p99_ms"] <= 50
    assert sum(v for k, v in out.items() if k.startswith("itl_bucket:")) == 12
    assert (out["prompt_tokens"], out["completion_tokens"], out["tokens_per_s"]) == (27, 15, 15)
    assert out["cost"] == pytest.approx(0.03)
    k7 = key_traffic_from_text(text)["keys"]["k7"]
    assert k7["prompt_tokens"] + k7["completion_tokens"] == 42 and k7["llm_endpoints"]["chat"]["tokens"] == 42


def test_a_request_the_fallbacks_served_is_its_variants_failure_and_tenants_ttft_is_read():
    """A canary whose own backend is dead, rescued by the endpoint's fallbacks: the gateway
    counts the request's outcome under variant "fallback" and `gateway_llm_rescued` for the
    canary; the collector makes each rescue one failed request of the canary (as a tensor
    failover is), so the judge sees its error rate, not the fallbacks' success."""
    from prometheus_client import CollectorRegistry, generate_latest

    from gateway.keys.tenants import Key
    from gateway.llm import metrics as llm_metrics

    registry = CollectorRegistry()
    gw = llm_metrics.LlmMetrics(registry=registry)
    before = gateway_samples.gateway_snapshot(generate_latest(registry).decode())
    for _ in range(3):  # the canary's own backend served three
        gw.done("chat", "v2-llm", 200, "none")
    for reason in ("connect", "cooldown"):  # two it could not serve, the fallbacks did
        gw.rescue("chat", "v2-llm", reason)
        gw.done("chat", "fallback", 200, "none")
    tenant = Key({"id": "k9", "sha256": "0" * 64, "team": "team-a"})
    for ttft in (0.1, 0.3):
        gw.observe(gw.tenant_ttft, (tenant.team, tenant.id), ttft)
    text = generate_latest(registry).decode()
    deltas = gateway_samples.gateway_deltas(before, gateway_samples.gateway_snapshot(text), seconds=1.0)
    canary = collect.derive(deltas[("chat", "v2-llm")])
    assert (canary["llm_requests"], canary["llm_errors"]) == (5, 2)
    assert canary["llm_error_rate"] == pytest.approx(0.4)
    assert collect.derive(deltas[("chat", "fallback")])["llm_errors"] == 0
    assert key_traffic_from_text(text)["keys"]["k9"]["ttft_mean_ms"] == pytest.approx(200.0)
