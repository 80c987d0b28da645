"""LLM endpoints: created and changed through the API with their LLM settings
and fallbacks, checked like tensor endpoints (an LLM artifact only on an LLM endpoint and
the other way round, another team's artifact reads as unknown); and their route table
entries: variants with triton or openai backends, fallbacks, the secrets the emitted
backends name and no other, keys' token limits; the whole table matches
gateway/contracts/route_table.schema.json, and one bad LLM endpoint costs only itself."""

import json

import jsonschema_rs
import pytest

from deployments.models import Endpoint, InferenceKey, PoolModel
from deployments.rollout_machine import State
from deployments.routes import SCHEMA_PATH, SERVED_NONE, SERVED_STABLE, route_build
from deployments.selectors.compatibility import serving_problem
from deployments.services import pools as pool_services
from harness import factories
from registry.models import ProviderSecret, Role
from registry.services import llm as llm_services

pytestmark = pytest.mark.django_db


def schema_errors(table: dict) -> list[str]:
    validator = jsonschema_rs.validator_for(json.loads(SCHEMA_PATH.read_text()))
    return [f"{'/'.join(map(str, e.instance_path))}: {e.message}" for e in validator.iter_errors(table)]


ORIGINS = ["https://provider.example.test"]  # the external backend's origin: where its secret may go


@pytest.fixture
def admin_a(team_a):
    user = factories.user("ada")
    factories.member(user, team_a, Role.ADMIN)
    return user


@pytest.fixture
def secret(admin_a, team_a):
    return llm_services.secret_create(
        user=admin_a, team=team_a, name="provider", value="sk-provider-0123456789", origins=ORIGINS
    )


@pytest.fixture
def pool(team_a):
    return factories.pool(team_a, "llm-pool", ready_replicas=2)


@pytest.fixture
def chat(team_a, pool):
    """chat v1: a Triton generate model ready on both replicas of the pool."""
    artifact = factories.llm_artifact(team_a, model_name="chat", context_length=2048)
    factories.pool_model_ready(pool, artifact)
    return artifact


@pytest.fixture
def external(team_a, secret):
    """A backend reference to a provider with the team's secret."""
    return factories.llm_artifact(
        team_a,
        model_name="provider-chat",
        kind="openai",
        base_url="https://provider.example.test/v1",
        secret=secret,
        cost_per_1k_prompt=0.5,
        cost_per_1k_completion=1.5,
    )


def create(client, **fields):
    return client.post("/api/v1/endpoints/", {"pool": "llm-pool", **fields}, format="json")


# --- API --------------------------------------------------------------------------------------
def test_an_llm_endpoint_with_settings_and_fallbacks(deployer_api, chat, external, pool):
    response = create(
        deployer_api,
        name="chat",
        kind="llm",
        stable_artifact=chat.pk,
        context_length=1024,
        first_token_timeout_ms=5000,
        prefix_affinity_chars=64,
        llm_fallbacks=[external.pk],
        ttft_slo_ms=500,
        public=True,
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["kind"] == "llm" and body["llm_fallbacks"] == [external.pk]
    assert body["timeout_ms"] == 120_000 and body["sticky_header"] == "X-Session-Id"  # the LLM defaults
    assert body["context_length"] == 1024 and body["ttft_slo_ms"] == 500
    changed = deployer_api.patch("/api/v1/endpoints/chat/", {"max_tokens_default": 64}, format="json")
    assert changed.status_code == 200 and changed.json()["max_tokens_default"] == 64


def test_a_backend_stable_is_not_loaded_into_the_pool(deployer_api, external, pool):
    assert create(deployer_api, name="ext", kind="llm", stable_artifact=external.pk).status_code == 201
    assert not PoolModel.objects.filter(artifact=external).exists()
    with pytest.raises(Exception) as refused:
        pool_services.pool_load_request(user=Endpoint.objects.get().created_by, pool=pool, artifact=external)
    assert refused.value.code == "artifact_not_loadable"


@pytest.mark.parametrize(
    ("kind", "which", "fields", "code"),
    [
        ("llm", "tensor", {}, "artifact_kind_mismatch"),
        ("tensor", "chat", {}, "artifact_kind_mismatch"),
        ("tensor", "tensor", {"first_token_timeout_ms": 100}, "llm_only"),
        ("llm", "chat", {"context_length": 4096}, "bad_context_length"),  # past the stable version's 2048
        ("llm", "chat", {"context_length": 10**9}, "bad_context_length"),
        ("llm", "chat", {"prefix_affinity_chars": -1}, "bad_prefix_affinity_chars"),
        ("llm", "chat", {"llm_fallbacks": ["tensor"]}, "artifact_kind_mismatch"),
        ("llm", "chat", {"llm_fallbacks": [999999]}, "artifact_not_found"),
    ],
)
def test_validation(deployer_api, chat, artifact_factory, team_a, pool, kind, which, fields, code):
    tensor = artifact_factory(team_a)
    ids = {"tensor": tensor.pk, "chat": chat.pk}
    fields = {k: [ids.get(v, v) for v in val] if isinstance(val, list) else val for k, val in fields.items()}
    response = create(deployer_api, name="e", kind=kind, stable_artifact=ids[which], **fields)
    assert response.status_code == 400, response.content
    assert response.json()["code"] == code, response.json()
    assert not Endpoint.objects.exists()


def test_another_teams_llm_artifact_reads_as_unknown(deployer_api, chat, team_b):
    theirs = factories.llm_artifact(team_b, model_name="their-chat", kind="openai")
    response = create(deployer_api, name="e", kind="llm", stable_artifact=chat.pk, llm_fallbacks=[theirs.pk])
    assert response.status_code == 400 and response.json()["code"] == "artifact_not_found"
    stable = create(deployer_api, name="e", kind="llm", stable_artifact=theirs.pk)
    assert stable.status_code in (400, 404) and "their-chat" not in stable.content.decode()


def test_a_tensor_candidate_cannot_serve_an_llm_endpoint(chat, pool, artifact_factory, team_a):
    endpoint = factories.endpoint(pool, chat, name="chat", kind="llm")
    assert serving_problem(endpoint=endpoint, artifact=artifact_factory(team_a)).code == "artifact_kind_mismatch"


def test_key_token_limits_through_the_api(deployer_api, chat):
    response = deployer_api.post(
        "/api/v1/inference-keys/",
        {"team": "team-a", "name": "k", "tokens_per_minute": 1000, "max_streams": 4},
        format="json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["tokens_per_minute"] == 1000 and response.json()["max_streams"] == 4
    bad = deployer_api.post(
        "/api/v1/inference-keys/", {"team": "team-a", "name": "k2", "tokens_per_minute": 0}, format="json"
    )
    assert bad.status_code == 400 and bad.json()["code"] == "bad_tokens_per_minute"
    table = route_build()[0]
    (key,) = table["keys"]
    assert key["tokens_per_minute"] == 1000 and key["max_streams"] == 4


@pytest.mark.parametrize(
    ("budgets", "ok"),
    [
        ([{"tokens": 10, "window_s": 1}, {"tokens": 5_000_000, "window_s": 31 * 86400}], True),  # a second to a month
        ([{"tokens": 10, "window_s": 31 * 86400 + 1}], False),
        ([{"tokens": 0, "window_s": 60}], False),
        ([{"tokens": 10, "window_s": 60}, {"tokens": 20, "window_s": 60}], False),
        ([{"tokens": 1, "window_s": w} for w in (1, 2, 3, 4, 5)], False),
    ],
)
def test_token_budgets_over_windows_from_a_second_to_a_month(deployer_api, budgets, ok):
    response = deployer_api.post(
        "/api/v1/inference-keys/", {"team": "team-a", "name": "k", "token_budgets": budgets}, format="json"
    )
    if not ok:
        assert response.status_code == 400 and response.json()["code"] == "bad_token_budgets", response.content
        assert InferenceKey.objects.count() == 0
        return
    assert response.status_code == 201, response.content
    (key,) = route_build()[0]["keys"]
    assert key["token_budgets"] == budgets and schema_errors(route_build()[0]) == []


# --- the route table ----------------------------------------------------------------------------
def test_route_entries_backends_fallbacks_and_only_named_secrets(chat, external, pool, team_a, admin_a, secret):
    unused = llm_services.secret_create(
        user=admin_a, team=team_a, name="unused", value="sk-unused-0123456789", origins=ORIGINS
    )
    factories.endpoint(
        pool, chat, name="chat", kind="llm", public=True, llm_fallbacks=[external.pk], first_token_timeout_ms=4000
    )
    factories.endpoint(pool, external, name="ext", kind="llm", timeout_ms=60_000)
    table, problems, _ = route_build()
    assert problems == {} and schema_errors(table) == []
    entries = {e["name"]: e for e in table["llm_endpoints"]}
    assert table["endpoints"] == [] and set(entries) == {"chat", "ext"}
    chat_entry = entries["chat"]
    assert chat_entry["context_length"] == 2048 and chat_entry["first_token_timeout_ms"] == 4000
    (variant,) = chat_entry["variants"]
    assert variant["name"] == "v1-llm" and variant["role"] == "stable" and variant["weight_bp"] == 10000
    (backend,) = variant["backends"]
    assert backend["kind"] == "triton" and backend["model"] == "chat__v1__llm"
    assert backend["urls"] == ["http://127.0.0.1:18000", "http://127.0.0.1:18001"]
    (fallback,) = chat_entry["fallbacks"]
    assert fallback["kind"] == "openai" and fallback["urls"] == ["https://provider.example.test/v1"]
    assert fallback["secret"] == secret.gateway_id and fallback["cost_per_1k_completion"] == 1.5
    assert table["secrets"] == [{"id": secret.gateway_id, "value": "sk-provider-0123456789", "origins": ORIGINS}]
    assert unused.gateway_id not in json.dumps(table)
    rules = table["llm_rules"]  # what the gateway vets every connection to a tenant backend with
    assert "http://127.0.0.1:18000" in rules["platform_listeners"]  # the pool's replicas: never a tenant URL
    assert rules["first_token_timeout_max_ms"] == 60_000 and len(rules["hop_mark"]) == 24


def test_a_secret_not_bound_to_its_backends_origin_fails_the_entry(chat, pool, team_a, secret):
    """A reference stored before secrets were bound (or written around the service) never gets
    the secret into the table: its entry fails with a reason on the endpoint page."""
    stray = factories.llm_artifact(
        team_a, model_name="stray", kind="openai", base_url="https://listener.example.test/v1", secret=secret
    )
    factories.endpoint(pool, stray, name="stray", kind="llm")
    table, problems, _ = route_build()
    assert "not bound to https://listener.example.test" in problems["stray"].reason
    assert "sk-provider" not in json.dumps(table)


def test_the_first_token_timeout_has_an_operators_ceiling(chat, pool, deployer_api, settings):
    settings.LLM_FIRST_TOKEN_TIMEOUT_MAX_MS = 5000
    over = create(deployer_api, name="slow-chat", stable_artifact=chat.pk, kind="llm", first_token_timeout_ms=5001)
    assert over.status_code == 400 and over.json()["code"] == "bad_first_token_timeout_ms"
    assert "1..5000" in over.json()["detail"]
    ok = create(deployer_api, name="slow-chat", stable_artifact=chat.pk, kind="llm", first_token_timeout_ms=5000)
    assert ok.status_code == 201, ok.content
    settings.LLM_FIRST_TOKEN_TIMEOUT_MAX_MS = 2000  # lowered later: the table serves the ceiling
    (entry,) = route_build()[0]["llm_endpoints"]
    assert entry["first_token_timeout_ms"] == 2000


def test_rollout_candidate_is_a_canary_variant(chat, pool, team_a):
    endpoint = factories.endpoint(pool, chat, name="chat", kind="llm")
    candidate = factories.llm_artifact(team_a, model_name="chat")  # chat v2
    factories.pool_model_ready(pool, candidate)
    factories.rollout(endpoint, candidate, state=State.CANARY, steps_bp=[2500, 10000])
    table, problems, _ = route_build()
    assert problems == {} and schema_errors(table) == []
    variants = {v["name"]: v for v in table["llm_endpoints"][0]["variants"]}
    assert variants["v2-llm"]["role"] == "canary" and variants["v2-llm"]["weight_bp"] == 2500
    assert variants["v1-llm"]["weight_bp"] == 7500
    assert variants["v2-llm"]["backends"][0]["model"] == "chat__v2__llm"


def test_one_bad_llm_endpoint_costs_only_itself(chat, external, pool, team_a, artifact_factory):
    tensor = artifact_factory(team_a)
    factories.pool_model_ready(pool, tensor)
    factories.endpoint(pool, tensor, name="ranker", public=True)
    factories.endpoint(pool, chat, name="good", kind="llm")
    unloaded = factories.llm_artifact(team_a, model_name="cold")  # loaded on no replica
    factories.endpoint(pool, unloaded, name="cold", kind="llm")
    factories.endpoint(pool, external, name="unreadable", kind="llm")
    ProviderSecret.objects.filter(pk=external.version.llm.secret_id).update(ciphertext="gAAAAAnot-a-token")
    candidate = factories.llm_artifact(team_a, model_name="chat")  # v2, not loaded: its split cannot be routed
    factories.rollout(Endpoint.objects.get(name="good"), candidate, state=State.CANARY, steps_bp=[5000, 10000])

    table, problems, _ = route_build()
    assert schema_errors(table) == []
    assert [e["name"] for e in table["endpoints"]] == ["ranker"]
    assert [e["name"] for e in table["llm_endpoints"]] == ["good"]
    assert [v["name"] for v in table["llm_endpoints"][0]["variants"]] == ["v1-llm"]  # its stable alone
    assert problems["good"].served == SERVED_STABLE and "chat__v2__llm" in problems["good"].reason
    assert problems["cold"].served == SERVED_NONE and "ready on no replica" in problems["cold"].reason
    assert problems["unreadable"].served == SERVED_NONE and "decrypted" in problems["unreadable"].reason
    assert table["secrets"] == []  # the unreadable endpoint's secret is named by no emitted backend
    assert InferenceKey.objects.count() == 0


# --- the Keys page ------------------------------------------------------------------------------
def test_keys_page_stores_a_provider_secret_and_shows_its_value_once(admin_a, deployer, team_b):
    from django.test import Client

    other_admin = factories.user("bea")
    factories.member(other_admin, team_b, Role.ADMIN)
    llm_services.secret_create(
        user=other_admin, team=team_b, name="their-secret", value="sk-of-team-b-00000000", origins=ORIGINS
    )
    client = Client()
    client.force_login(admin_a)
    value = "sk-page-abcdefghijklmn-TAIL"
    stored = client.post(
        "/deployments/keys/secrets/",
        {"team": "team-a", "name": "page-secret", "value": value, "origins": "https://api.example.test"},
    )
    assert stored.status_code == 200 and value in stored.content.decode()
    page = client.get("/deployments/keys/").content.decode()
    assert "page-secret" in page and "…TAIL" in page and value not in page
    assert "https://api.example.test" in page  # where it may be sent, bound when stored
    # the form goes through the same service check: an internal origin is refused, nothing stored
    refused = client.post(
        "/deployments/keys/secrets/",
        {"team": "team-a", "name": "inside", "value": "sk-inside-0123456789", "origins": "http://169.254.169.254"},
        follow=True,
    )
    assert "metadata" in refused.content.decode() and not ProviderSecret.objects.filter(name="inside").exists()
    assert "their-secret" not in page
    created = client.post(
        "/deployments/keys/",
        {
            "team": "team-a",
            "name": "llm-key",
            "tokens_per_minute": 5000,
            "max_streams": 2,
            "rate_per_s": 10,
            "token_budgets": "100000/1h, 5000000/30d",
        },
    )
    assert created.status_code == 200 and "5000 · 2" in created.content.decode()
    assert InferenceKey.objects.get(name="llm-key").token_budgets == [
        {"tokens": 100000, "window_s": 3600},
        {"tokens": 5000000, "window_s": 2592000},
    ]
    assert InferenceKey.objects.get(name="llm-key").tokens_per_minute == 5000

    deployer_client = Client()
    deployer_client.force_login(deployer)  # a deployer, not an admin: stores no secret
    refused = deployer_client.post(
        "/deployments/keys/secrets/", {"team": "team-a", "name": "nope", "value": "sk-x-000000000000"}, follow=True
    )
    assert "admin role" in refused.content.decode() and not ProviderSecret.objects.filter(name="nope").exists()


def test_the_endpoint_pages_show_an_llm_endpoint(deployer, chat, external, pool):
    from django.test import Client

    factories.endpoint(pool, chat, name="chat", kind="llm", llm_fallbacks=[external.pk])
    client = Client()
    client.force_login(deployer)
    assert client.get("/deployments/endpoints/").status_code == 200
    page = client.get("/deployments/endpoints/chat/")
    text = page.content.decode()
    assert page.status_code == 200 and "chat v1 llm" in text
    assert 'model="chat"' in text and "1 fallback" in text


def test_a_release_on_an_llm_endpoint_is_refused(deployer, chat, pool):
    from deployments.services.releases import release_start
    from kernel.errors import InvalidInput

    endpoint = factories.endpoint(pool, chat, name="chat", kind="llm")
    with pytest.raises(InvalidInput) as refused:
        release_start(user=deployer, endpoint=endpoint, version=chat.version)
    assert refused.value.code == "llm_endpoint"


def test_the_table_version_does_not_digest_secret_values(external, pool):
    import hashlib

    factories.endpoint(pool, external, name="ext", kind="llm")
    table = route_build()[0]
    assert table["secrets"][0]["value"] == "sk-provider-0123456789"
    body = {k: v for k, v in table.items() if k not in ("version", "generated_at")}
    assert hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:20] != table["version"]
    body["secrets"] = [s["id"] for s in body["secrets"]]
    assert hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:20] == table["version"]
