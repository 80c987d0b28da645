"""The issue's attacks through an LLM backend's URL, each beside blue's traffic: SSRF to another
team's Triton `unload` URL, a port scan that reads internal error bodies, a deployer reading the
team's provider secret at a listener of their own, and a backend that loops back into the
gateway. Each is refused twice: by the control plane when the URL is registered (the REST API,
in this process on PostgreSQL) and by the gateway at connect time (a real gateway process, two
workers) for a table that names it anyway (a URL registered before a pool took that port, a
name that resolves elsewhere now).

Real processes: tritonserver (blue's tensor model), the gateway, a route server; red's
backends, listeners and relays are the OpenAI-compatible stand-in (tests/gateway/llm_upstream.py:
a fake on purpose, it plays the hostile provider). Blue's tolerance: tests/adversarial/llm_tenants.py.
"""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from harness import factories
from harness.llm import LOOPBACK_RULES, origins
from registry.models import Role, Task
from serving.tritonserver import free_port
from tests.adversarial.llm_tenants import BlueTraffic, Stack, assert_unharmed, backend, llm_entry, red_chat
from tests.gateway.conftest import require_triton
from tests.gateway.llm_upstream import LEAK, LlmUpstream

pytestmark = [pytest.mark.integration]
QUIET_S, ATTACK_S = 3.0, 4.0
RED_THREADS, RED_PAUSE_S = 4, 0.1  # red's pace: ~40 requests/s (the attacks needed 8 in 30 s)
SECRET = "sk-red-team-provider-key-000001"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    require_triton()
    stack = Stack(tmp_path_factory.mktemp("adversarial-llm-urls"))
    yield stack
    stack.stop()


@pytest.fixture
def red_listener():
    listener = LlmUpstream().start()
    yield listener
    listener.stop()


def beside_blue(stack: Stack, attack, *, kinds=("tensor", "chat")):
    """Run `attack()` from RED_THREADS threads for ATTACK_S while blue's traffic runs; check blue's
    tolerance; return what the attack calls returned."""
    blue = BlueTraffic(stack.url, stack.work, stack.control.url)
    results = []

    def red(deadline: float) -> list:
        mine = []
        while time.monotonic() < deadline:
            mine.append(attack())
            time.sleep(RED_PAUSE_S)
        return mine

    try:
        blue.wait_warm()
        time.sleep(QUIET_S)
        started = time.time()
        with ThreadPoolExecutor(RED_THREADS) as pool:
            for mine in pool.map(red, [time.monotonic() + ATTACK_S] * RED_THREADS):
                results += mine
        ended = time.time()
    finally:
        records = blue.stop()
    assert_unharmed(records, (started - QUIET_S, started), (started, ended), kinds)
    return results


def register(api, base_url: str, **extra):
    return api.post(
        "/api/v1/models/red-chat/llm-versions/", {"base_url": base_url, "upstream_model": "m", **extra}, format="json"
    )


@pytest.fixture
def red_model(team_a):
    return factories.registered_model(team_a, name="red-chat", task=Task.LLM)


# --- SSRF to another team's Triton ---------------------------------------------------------------
@pytest.mark.django_db
def test_ssrf_to_another_teams_triton_unload_url(stack, deployer_api, red_model, team_b, settings):
    unload = f"{stack.triton.http_url}/v2/repository/models/blue-ctr/unload"
    factories.replica(factories.pool(team_b, "blue-pool"), http_url=stack.triton.http_url)
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]  # an operator allowed loopback for internal backends
    assert register(deployer_api, f"{unload}?").json()["code"] == "url_query"  # the issue's `?` trick
    refused = register(deployer_api, unload)
    assert refused.status_code == 400 and refused.json()["code"] == "url_platform_listener"

    # the gateway: the `?` entry is refused as a whole; without it, every connection is refused
    stack.install(
        llm_endpoints=[
            llm_entry("red-trick", "red", [backend("r", "openai", f"{unload}?", "m")], ["kr"]),
            llm_entry("red-ssrf", "red", [backend("r", "openai", unload, "m")], ["kr"]),
        ],
        llm_rules=LOOPBACK_RULES,
    )
    assert red_chat(stack.url, "red-trick")[0] == 404  # its entry refused: as no model at all to red
    refused = {r["name"]: r["code"] for r in requests.get(f"{stack.url}/status", timeout=5).json()["routes"]["refused"]}
    assert refused == {"red-trick": "rewritable_url"}  # the operator sees why
    before = stack.gateway.metric("gateway_llm_refusals_total", reason="platform_listener")
    results = beside_blue(stack, lambda: red_chat(stack.url, "red-ssrf"))
    assert {status for status, _ in results} == {502}
    assert {body["error"]["code"] for _, body in results} == {"backend_not_allowed"}
    assert stack.triton.is_model_ready("blue-ctr")  # no unload reached it
    assert stack.gateway.metric("gateway_llm_refusals_total", reason="platform_listener") >= before + len(results)


# --- port scan and error bodies -------------------------------------------------------------------
def _shape(message: str) -> str:
    return re.sub(r"\d+", "N", message)


def test_a_port_scan_learns_nothing_and_error_bodies_come_back_sanitized(stack, red_listener):
    open_port, closed_port = red_listener.port, free_port()
    stack.install(
        llm_endpoints=[
            llm_entry("red-open", "red", [backend("o", "openai", f"http://127.0.0.1:{open_port}/v1", "m")], ["kr"]),
            llm_entry("red-closed", "red", [backend("c", "openai", f"http://127.0.0.1:{closed_port}/v1", "m")], ["kr"]),
            llm_entry("red-meta", "red", [backend("m", "openai", "http://169.254.169.254/v1", "m")], ["kr"]),
        ],
        llm_rules={},  # nothing internal allowed
    )
    answers = {name: red_chat(stack.url, name) for name in ("red-open", "red-closed", "red-meta")}
    assert {status for status, _ in answers.values()} == {502}
    # an open and a closed port answer alike: the gateway never connected to either
    assert _shape(answers["red-open"][1]["error"]["message"]) == _shape(answers["red-closed"][1]["error"]["message"])
    assert "metadata" in answers["red-meta"][1]["error"]["message"]

    # red's own server, on a network the operator allowed, answers errors with internal pages
    leak = f"http://127.0.0.1:{red_listener.port}/v1"
    stack.install(
        llm_endpoints=[
            llm_entry("red-leak", "red", [backend("l", "openai", leak, "leak-500")], ["kr"]),
            llm_entry("red-leak4", "red", [backend("l4", "openai", leak, "leak-418")], ["kr"]),
        ],
        llm_rules=LOOPBACK_RULES,
    )
    results = beside_blue(stack, lambda: (red_chat(stack.url, "red-leak"), red_chat(stack.url, "red-leak4")))
    answers = [answer for pair in results for answer in pair]
    # 502, and 503 once the replica's breaker opened on its failures
    assert {status for status, _ in answers} <= {502, 503} and 502 in {status for status, _ in answers}
    for _, body in answers:
        message = body["error"]["message"]
        assert LEAK not in message and "<html" not in message and len(message) < 400, message
    assert red_listener.requests  # the pages were sent: it is the gateway that kept them from red


# --- a deployer reading the team's provider secret ---------------------------------------------------
@pytest.mark.django_db
def test_a_deployer_cannot_have_the_provider_secret_sent_to_their_listener(
    stack, api_for, deployer_api, red_model, team_a, red_listener, settings
):
    provider = LlmUpstream(api_key=SECRET).start()
    try:
        settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
        admin = factories.user("red-admin")
        factories.member(admin, team_a, Role.ADMIN)
        stored = api_for(admin).post(
            "/api/v1/secrets/",
            {"team": "team-a", "name": "provider", "value": SECRET, "origins": [provider.url]},
            format="json",
        )
        assert stored.status_code == 201, stored.content
        mine = register(deployer_api, f"{red_listener.url}/v1", secret="provider")
        assert mine.status_code == 400 and mine.json()["code"] == "secret_origin_mismatch"
        assert register(deployer_api, f"{provider.url}/v1", secret="provider").status_code == 201

        # the gateway: a table naming the secret at the listener is refused; the provider's own
        # origin redirecting there is not followed
        provider.redirect_to = f"{red_listener.url}/v1/chat/completions"
        bound = {"id": "provider", "value": SECRET, "origins": origins(provider.url)}
        stack.install(
            llm_endpoints=[
                llm_entry(
                    "red-exfil",
                    "red",
                    [backend("x", "openai", f"{red_listener.url}/v1", "m", secret="provider")],
                    ["kr"],
                ),
                llm_entry(
                    "red-hop",
                    "red",
                    [backend("h", "openai", f"{provider.url}/v1", "redirect", secret="provider")],
                    ["kr"],
                ),
            ],
            secrets=[bound],
            llm_rules=LOOPBACK_RULES,
        )
        results = beside_blue(stack, lambda: (red_chat(stack.url, "red-exfil"), red_chat(stack.url, "red-hop")))
        # the entry is refused (secret_origin): red's model does not exist for the gateway
        assert {exfil[0] for exfil, _ in results} == {404}
        status = requests.get(f"{stack.url}/status", timeout=5).json()
        assert {r["name"]: r["code"] for r in status["routes"]["refused"]} == {"red-exfil": "secret_origin"}
        assert {hop[0] for _, hop in results} <= {502, 503}  # the 307 is not followed (503: its breaker opened)
        assert red_listener.requests == []  # nothing, let alone the key, reached the deployer's listener
        assert all(r["headers"].get("Authorization") == f"Bearer {SECRET}" for r in provider.requests)
    finally:
        provider.stop()


# --- loops ------------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_a_backend_leading_back_to_the_gateway_is_refused_and_costs_one_hop(
    stack, deployer_api, red_model, red_listener, settings
):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.GATEWAY_PORT = stack.gateway.port
    refused = register(deployer_api, f"http://localhost:{stack.gateway.port}/v1")
    assert refused.status_code == 400 and refused.json()["code"] == "url_platform_listener"

    red_listener.relay_to = stack.url  # red's "provider" relays everything to the gateway
    stack.install(
        llm_endpoints=[
            llm_entry("red-self", "red", [backend("s", "openai", f"{stack.url}/v1", "red-self")], ["kr"]),
            llm_entry("relay-loop", "red", [backend("l", "openai", f"{red_listener.url}/v1", "relay-loop")], ["kr"]),
            llm_entry(
                "red-stall",
                "red",
                [backend("t", "openai", f"{red_listener.url}/v1", "stall-4000")],
                ["kr"],
                first_token_timeout_ms=600_000,
            ),
        ],
        llm_rules={**LOOPBACK_RULES, "first_token_timeout_max_ms": 1500},
    )
    loops_before = stack.gateway.metric("gateway_llm_refusals_total", reason="loop")
    results = beside_blue(stack, lambda: (red_chat(stack.url, "red-self"), red_chat(stack.url, "relay-loop")))
    assert {own[0] for own, _ in results} == {502}  # the gateway's own port: never connected
    # the relayed request came back marked: 508 inside, 502 to red (503 once the relay's breaker opened)
    assert {relay[0] for _, relay in results} <= {502, 503} and 502 in {relay[0] for _, relay in results}
    relayed = [r for r in red_listener.requests if r["path"] == "/v1/chat/completions"]
    assert 0 < len(relayed) <= len(results)  # one hop per red request at most, not thousands
    assert stack.gateway.metric("gateway_llm_refusals_total", reason="loop") >= loops_before + len(relayed)

    # the first-token timeout's ceiling holds whatever the entry says
    started = time.monotonic()
    status, body = red_chat(stack.url, "red-stall")
    assert status == 504 and body["error"]["code"] == "first_token_timeout"
    assert time.monotonic() - started < 5.0


def test_loops_do_not_hold_connections(stack, red_listener):
    """The issue's loop held 7,241 gateway connections for one request; here a burst of looping
    requests leaves the relay with one connection each, all closed by the time they answer."""
    red_listener.relay_to = stack.url
    stack.install(
        llm_endpoints=[
            llm_entry("relay-loop", "red", [backend("l", "openai", f"{red_listener.url}/v1", "relay-loop")], ["kr"])
        ],
        llm_rules=LOOPBACK_RULES,
    )
    done = []
    threads = [threading.Thread(target=lambda: done.append(red_chat(stack.url, "relay-loop")[0])) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(done) == 20 and set(done) <= {502, 503}
    assert len([r for r in red_listener.requests if r["path"] == "/v1/chat/completions"]) <= 20
