"""Traffic per inference key on the keys page: read from the gateway's own counters
(gateway.telemetry.metrics.HotPath and its auth-rejection counter, rendered by prometheus_client
and served over real HTTP), scoped to the keys and endpoints the viewer may see."""

import pytest
from django.test import Client
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from deployments.services import keys as key_services
from gateway.keys.tenants import Key
from gateway.telemetry.metrics import HotPath
from gateway.wire.faults import CLIENT, OK
from harness import factories
from monitoring.selectors import tenants
from registry.models import Role

pytestmark = pytest.mark.django_db


class GatewayCounters:
    """The gateway's per-key series, made by the gateway's own metric code."""

    def __init__(self):
        self.registry = CollectorRegistry()
        self.hot = HotPath(registry=self.registry)
        self.rejections = Counter(
            "gateway_auth_rejections", "refused", ["endpoint", "team", "key", "reason"], registry=self.registry
        )

    def text(self) -> str:
        return generate_latest(self.registry).decode()


def tenant(key_id, team):
    return Key({"id": key_id, "sha256": "0" * 64, "team": team})


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setattr(tenants, "CACHE_SECONDS", 0.0)


def test_counts_per_key_from_the_gateways_exposition():
    counters = GatewayCounters()
    ranker, other = tenant("k1", "ads"), tenant("k2", "search")
    for _ in range(5):
        counters.hot.done("ctr", "v1", 200, 0.004, OK, ranker)
    counters.hot.done("ctr", "v1", 400, 0.001, CLIENT, ranker)
    counters.hot.done("ctr", "none", 429, 0.0001, CLIENT, ranker)
    counters.hot.done("ctr", "v1", 503, 0.010, "backend", other)
    counters.rejections.labels("ctr", "ads", "k1", "rate_limited").inc()
    counters.rejections.labels("ctr", "search", "k2", "forbidden").inc(3)
    counters.rejections.labels("ctr", "", "", "missing_key").inc(7)
    traffic = tenants.key_traffic_from_text(counters.text())
    k1 = traffic["keys"]["k1"]
    assert (k1["total"], k1["requests"], k1["rejections"]) == (7, {"2xx": 5, "4xx": 2}, {"rate_limited": 1})
    assert k1["mean_ms"] == pytest.approx((5 * 4 + 1 + 0.1) / 7, rel=1e-6)
    assert traffic["keys"]["k2"]["requests"] == {"5xx": 1} and traffic["keys"]["k2"]["rejections"] == {"forbidden": 3}
    assert traffic["anonymous"] == {"ctr": {"missing_key": 7}}


def test_keys_page_shows_its_keys_traffic_and_only_the_viewers(
    gateway_server, monkeypatch, deployer, team_a, team_b, artifact_factory
):
    factories.endpoint(factories.pool(team_a, "pool-a", ready_replicas=1), artifact_factory(team_a), name="ctr")
    factories.endpoint(
        factories.pool(team_b, "pool-b", ready_replicas=1), artifact_factory(team_b, model_name="b"), name="theirs"
    )
    mine, _ = key_services.inference_key_create(user=deployer, team=team_a, name="ranker")
    boss = factories.user("boss-b")
    factories.member(boss, team_b, Role.DEPLOYER)
    theirs, _ = key_services.inference_key_create(user=boss, team=team_b, name="their-key")
    counters = GatewayCounters()
    for _ in range(12):
        counters.hot.done("ctr", "v1", 200, 0.002, OK, tenant(mine.gateway_id, "team-a"))
    counters.hot.done("theirs", "v1", 200, 0.002, OK, tenant(theirs.gateway_id, "team-b"))
    counters.rejections.labels("ctr", "team-a", mine.gateway_id, "concurrency_limit").inc(2)
    counters.rejections.labels("ctr", "", "", "invalid_key").inc(4)
    counters.rejections.labels("theirs", "", "", "missing_key").inc(9)
    gateway_server.metrics = counters
    monkeypatch.setenv("GATEWAY_METRICS_URL", gateway_server.url)
    client = Client()
    client.force_login(deployer)
    page = client.get("/deployments/keys/").content.decode()
    section = page[page.index('<div id="key-traffic">') :]
    section = section[: section.index("</div>")]
    assert "ranker" in section and "<td>12</td>" in section and "concurrency_limit</span> 2" in section
    assert "invalid_key 4" in section and "their-key" not in section and "theirs" not in section
    assert "gateway_tenant_requests_total" in section  # the PromQL to use in Prometheus


def test_keys_page_says_when_the_gateway_cannot_be_read(monkeypatch, deployer):
    from serving.tritonserver import free_port

    monkeypatch.setenv("GATEWAY_METRICS_URL", f"http://127.0.0.1:{free_port()}/metrics")
    client = Client()
    client.force_login(deployer)
    response = client.get("/deployments/keys/")
    assert response.status_code == 200 and "Traffic per key is not available" in response.content.decode()


def test_llm_tokens_and_cost_per_key(gateway_server, monkeypatch, deployer, team_a, artifact_factory):
    """LLM usage per key from the contract's families (gateway/llm/metrics.py: gateway_llm_tokens
    {endpoint,variant,team,key,kind}, gateway_llm_cost{endpoint,variant,team,key}), rendered by
    prometheus_client as the gateway renders its own; a key without LLM traffic says so."""
    factories.endpoint(factories.pool(team_a, "pool-a", ready_replicas=1), artifact_factory(team_a), name="ctr")
    chat, _ = key_services.inference_key_create(user=deployer, team=team_a, name="chat-key")
    quiet, _ = key_services.inference_key_create(user=deployer, team=team_a, name="quiet-key")
    counters = GatewayCounters()
    tokens = Counter(
        "gateway_llm_tokens", "tokens", ["endpoint", "variant", "team", "key", "kind"], registry=counters.registry
    )
    cost = Counter("gateway_llm_cost", "cost", ["endpoint", "variant", "team", "key"], registry=counters.registry)
    tokens.labels("demo-llm", "v1-llm", "team-a", chat.gateway_id, "prompt").inc(120)
    tokens.labels("demo-llm", "v2-llm", "team-a", chat.gateway_id, "prompt").inc(30)
    tokens.labels("demo-llm", "v1-llm", "team-a", chat.gateway_id, "completion").inc(400)
    tokens.labels("demo-llm", "v1-llm", "", "", "completion").inc(999)  # public calls: no key
    cost.labels("demo-llm", "v1-llm", "team-a", chat.gateway_id).inc(0.0125)
    ttft = Histogram("gateway_llm_tenant_ttft_seconds", "ttft", ["team", "key"], registry=counters.registry)
    ttft.labels("team-a", chat.gateway_id).observe(0.2)
    ttft.labels("team-a", chat.gateway_id).observe(0.1)
    counters.hot.done("ctr", "v1", 200, 0.002, OK, tenant(quiet.gateway_id, "team-a"))
    counters.hot.done("demo-llm", "v1-llm", 200, 0.2, OK, tenant(chat.gateway_id, "team-a"))
    traffic = tenants.key_traffic_from_text(counters.text())
    mine = traffic["keys"][chat.gateway_id]
    assert (mine["prompt_tokens"], mine["completion_tokens"]) == (150, 400)
    assert mine["cost"] == pytest.approx(0.0125)
    assert "" not in traffic["keys"]
    gateway_server.metrics = counters
    monkeypatch.setenv("GATEWAY_METRICS_URL", gateway_server.url)
    client = Client()
    client.force_login(deployer)
    page = client.get("/deployments/keys/").content.decode()
    section = page[page.index('<div id="key-traffic">') :]
    rows = {name: section[section.index(name) :].split("</tr>")[0] for name in ("chat-key", "quiet-key")}
    assert "150 · 400" in rows["chat-key"] and "0.0125" in rows["chat-key"] and "150.0 ms" in rows["chat-key"]
    assert "no data yet" in rows["quiet-key"] and "no data yet" not in rows["chat-key"]
