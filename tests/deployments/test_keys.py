"""Inference keys through their services and API, and what the route table makes of them:
the secret shown once and stored only as a hash, team scoping (another team's key is a
404), roles, limits validated, revoke idempotent, audit events, and the gateway's auth
blocks (hashes only, scoped per endpoint, revoked keys gone, the ETag moves)."""

import hashlib
import json
from pathlib import Path

import jsonschema
import pytest
from django.db import connection

from deployments.models import Endpoint, InferenceKey
from deployments.routes import route_table
from deployments.services import endpoints as endpoint_services
from deployments.services import keys as services
from gateway.keys.tenants import authenticate
from gateway.table.routes import compile_table
from harness import factories
from kernel.errors import Conflict, Forbidden, InvalidInput
from registry.models import Event, Role

pytestmark = pytest.mark.django_db
SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "gateway" / "contracts" / "route_table.schema.json").read_text()
)


@pytest.fixture
def endpoints(team_a, team_b, artifact_factory):
    """Two serving endpoints of team A (ctr, search) and one of team B (other)."""
    pool_a, pool_b = (
        factories.pool(team_a, "pool-a", ready_replicas=1),
        factories.pool(team_b, "pool-b", ready_replicas=1),
    )
    return {
        "ctr": factories.endpoint(pool_a, artifact_factory(team_a), name="ctr"),
        "search": factories.endpoint(pool_a, artifact_factory(team_a), name="search"),
        "other": factories.endpoint(pool_b, artifact_factory(team_b, model_name="other"), name="other"),
    }


def member(team, role, name):
    user = factories.user(name)
    factories.member(user, team, role)
    return user


def key_events(key, action=None):
    qs = Event.objects.filter(object_type="deployments.inferencekey", object_id=str(key.pk))
    return qs.filter(action=action) if action else qs


# --- services --------------------------------------------------------------------------------
def test_create_returns_the_secret_once_and_stores_only_its_hash(deployer, team_a, endpoints):
    key, secret = services.inference_key_create(user=deployer, team=team_a, name="ranker-prod")
    assert secret.startswith("mpk_") and len(secret) == 4 + 43
    assert key.sha256 == hashlib.sha256(secret.encode()).hexdigest() and key.prefix == secret[:12]
    row = InferenceKey.objects.filter(pk=key.pk).values().get()
    assert not any(secret in str(value) or secret[12:] in str(value) for value in row.values())
    (event,) = key_events(key)
    assert (event.action, event.to_state, event.actor, event.team) == ("created", "active", deployer, team_a)
    assert secret[12:] not in json.dumps(event.data) and event.data["endpoints"] == "all"
    assert (key.rate_per_s, key.burst, key.max_concurrency) == (100.0, 200.0, 64)
    other, other_secret = services.inference_key_create(user=deployer, team=team_a, name="ranker-canary")
    assert other_secret != secret and other.sha256 != key.sha256


def test_scope_is_the_named_endpoints_of_the_team_only(deployer, team_a, endpoints):
    key, _ = services.inference_key_create(user=deployer, team=team_a, name="scoped", endpoints=["ctr"])
    assert not key.all_endpoints and list(key.endpoints.values_list("name", flat=True)) == ["ctr"]
    for names in (["other"], ["ctr", "nope"]):  # another team's endpoint reads like a missing one
        with pytest.raises(InvalidInput, match="has no endpoint named") as failure:
            services.inference_key_create(user=deployer, team=team_a, name=f"bad-{len(names)}", endpoints=names)
        assert failure.value.field == "endpoints"
    with pytest.raises(InvalidInput, match="at least one endpoint"):
        services.inference_key_create(user=deployer, team=team_a, name="empty", endpoints=[])
    assert (
        InferenceKey.objects.count() == 1 and Event.objects.filter(object_type="deployments.inferencekey").count() == 1
    )


@pytest.mark.parametrize("role", [Role.VIEWER, Role.DEVELOPER])
def test_only_deployers_and_admins_create_and_revoke(role, deployer, team_a, team_b):
    user = member(team_a, role, f"u-{role}")
    with pytest.raises(Forbidden):
        services.inference_key_create(user=user, team=team_a, name="nope")
    key, _ = services.inference_key_create(user=deployer, team=team_a, name="k")
    with pytest.raises(Forbidden):
        services.inference_key_revoke(user=user, key=key)
    with pytest.raises(Forbidden):  # a deployer of team A is nobody in team B
        services.inference_key_create(user=deployer, team=team_b, name="theirs")
    admin = member(team_a, Role.ADMIN, "team-admin")
    assert services.inference_key_revoke(user=admin, key=key).revoked_by == admin
    assert InferenceKey.objects.count() == 1


def test_active_names_are_unique_per_team_and_free_again_after_revoke(deployer, team_a):
    key, _ = services.inference_key_create(user=deployer, team=team_a, name="ranker")
    with pytest.raises(Conflict) as failure:
        services.inference_key_create(user=deployer, team=team_a, name="ranker")
    assert failure.value.code == "name_taken"
    services.inference_key_revoke(user=deployer, key=key)
    services.inference_key_create(user=deployer, team=team_a, name="ranker")
    assert InferenceKey.objects.filter(name="ranker").count() == 2


@pytest.mark.parametrize(
    "limits, field",
    [
        ({"rate_per_s": 0}, "rate_per_s"),
        ({"rate_per_s": -5}, "rate_per_s"),
        ({"rate_per_s": float("nan")}, "rate_per_s"),
        ({"rate_per_s": float("inf")}, "rate_per_s"),
        ({"rate_per_s": 1e7}, "rate_per_s"),
        ({"rate_per_s": "fast"}, "rate_per_s"),
        ({"rate_per_s": True}, "rate_per_s"),
        ({"burst": 0.5}, "burst"),
        ({"rate_per_s": None, "burst": 10}, "burst"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"max_concurrency": 2.5}, "max_concurrency"),
        ({"max_concurrency": 10**7}, "max_concurrency"),
    ],
)
def test_bad_limits_are_refused_naming_the_field(deployer, team_a, limits, field):
    with pytest.raises(InvalidInput) as failure:
        services.inference_key_create(user=deployer, team=team_a, name="k", **limits)
    assert failure.value.field == field and field in failure.value.detail
    assert not InferenceKey.objects.exists()


@pytest.mark.parametrize("name", ["", "   ", "x" * 101, "tab\there", "new\nline"])
def test_bad_names_are_refused(deployer, team_a, name):
    with pytest.raises(InvalidInput, match="name"):
        services.inference_key_create(user=deployer, team=team_a, name=name)


def test_limits_defaults_and_no_limit(deployer, team_a):
    slow, _ = services.inference_key_create(user=deployer, team=team_a, name="slow", rate_per_s=10)
    assert (slow.rate_per_s, slow.burst, slow.max_concurrency) == (10.0, 20.0, 64)
    free, _ = services.inference_key_create(
        user=deployer, team=team_a, name="free", rate_per_s=None, max_concurrency=None
    )
    assert (free.rate_per_s, free.burst, free.max_concurrency) == (None, None, None)


def test_revoke_is_recorded_once(deployer, team_a):
    key, _ = services.inference_key_create(user=deployer, team=team_a, name="k")
    first = services.inference_key_revoke(user=deployer, key=key, reason="leaked in a log")
    again = services.inference_key_revoke(user=deployer, key=key, reason="twice")
    assert first.revoked_at is not None and again.revoked_at == first.revoked_at and again.revoked_by == deployer
    (event,) = key_events(key, "revoked")
    assert (event.from_state, event.to_state, event.reason) == ("active", "revoked", "leaked in a log")


# --- API ----------------------------------------------------------------------------------
def create(client, **body):
    return client.post("/api/v1/inference-keys/", {"team": "team-a", "name": "ranker", **body}, format="json")


def test_api_create_shows_the_secret_once_and_lists_prefixes_only(deployer_api, endpoints):
    response = create(deployer_api, endpoints=["ctr"], rate_per_s=5, burst=10, max_concurrency=2)
    assert response.status_code == 201, response.json()
    assert response["Cache-Control"] == "no-store"
    body = response.json()
    secret = body["secret"]
    assert body["prefix"] == secret[:12] and body["endpoints"] == ["ctr"] and body["active"] is True
    assert (body["rate_per_s"], body["burst"], body["max_concurrency"], body["team"]) == (5.0, 10.0, 2, "team-a")
    assert body["gateway_id"] == f"k{body['id']}"
    listed = deployer_api.get("/api/v1/inference-keys/")
    detail = deployer_api.get(f"/api/v1/inference-keys/{body['id']}/")
    for text in (listed.content.decode(), detail.content.decode()):
        assert secret[12:] not in text and "sha256" not in text and '"secret"' not in text
    assert listed.json()["count"] == 1 and detail.json()["prefix"] == secret[:12]


def test_api_another_teams_key_is_404(deployer_api, bob_api, endpoints):
    key_id = create(deployer_api).json()["id"]
    assert bob_api.get(f"/api/v1/inference-keys/{key_id}/").status_code == 404
    response = bob_api.post(f"/api/v1/inference-keys/{key_id}/revoke/", {}, format="json")
    assert response.status_code == 404 and response.json()["code"] in {"not_found", "key_not_found"}
    assert bob_api.get("/api/v1/inference-keys/").json()["count"] == 0
    assert InferenceKey.objects.get(pk=key_id).active
    # bob cannot make keys for team A either: the team "does not exist" for him
    response = create(bob_api)
    assert response.status_code == 400 and "team" in response.json()["detail"]


def test_api_viewer_lists_but_cannot_create_or_revoke(deployer_api, api_for, team_a):
    key_id = create(deployer_api).json()["id"]
    viewer = api_for(member(team_a, Role.VIEWER, "vic"))
    assert viewer.get("/api/v1/inference-keys/").json()["count"] == 1
    response = create(viewer, name="mine")
    assert response.status_code == 403 and response.json()["code"] == "role_required"
    assert viewer.post(f"/api/v1/inference-keys/{key_id}/revoke/", {}, format="json").status_code == 403
    assert InferenceKey.objects.count() == 1 and InferenceKey.objects.get().active


def test_api_revoke_is_idempotent(deployer_api):
    key_id = create(deployer_api).json()["id"]
    first = deployer_api.post(f"/api/v1/inference-keys/{key_id}/revoke/", {"reason": "rotation"}, format="json")
    second = deployer_api.post(f"/api/v1/inference-keys/{key_id}/revoke/", {}, format="json")
    assert first.status_code == second.status_code == 200
    assert first.json()["revoked_at"] == second.json()["revoked_at"] and second.json()["active"] is False
    assert key_events(InferenceKey.objects.get(pk=key_id), "revoked").count() == 1
    assert deployer_api.get("/api/v1/inference-keys/?active=true").json()["count"] == 0
    assert deployer_api.get("/api/v1/inference-keys/?active=false").json()["count"] == 1


@pytest.mark.parametrize(
    "body, field",
    [
        ({"name": ""}, "name"),
        ({"rate_per_s": -1}, "rate_per_s"),
        ({"burst": 0}, "burst"),
        ({"max_concurrency": "many"}, "max_concurrency"),
        ({"endpoints": "ctr"}, "endpoints"),
        ({"endpoints": ["other"]}, "endpoints"),
        ({"endpoints": []}, "endpoints"),
        ({"team": "no-such-team"}, "team"),
        ({"team": ["team-a"]}, "team"),
        ({"name": "x" * 500}, "name"),
    ],
)
def test_api_bad_input_is_400_naming_the_field(deployer_api, endpoints, body, field):
    response = create(deployer_api, **body)
    assert response.status_code == 400, response.json()
    assert field in response.json()["detail"] and response.json()["code"]
    assert not InferenceKey.objects.exists()


def test_api_malformed_json_is_400(deployer_api):
    response = deployer_api.generic(
        "POST", "/api/v1/inference-keys/", '{"team": "team-a", "name":', content_type="application/json"
    )
    assert response.status_code == 400 and not InferenceKey.objects.exists()


def test_api_key_list_query_count_is_pinned(deployer_api, deployer, team_a, endpoints, django_assert_max_num_queries):
    for index in range(6):
        services.inference_key_create(
            user=deployer, team=team_a, name=f"k{index}", endpoints=["ctr", "search"] if index % 2 else None
        )
    with django_assert_max_num_queries(6):
        response = deployer_api.get("/api/v1/inference-keys/")
    assert response.json()["count"] == 6


def test_endpoint_public_flag_defaults_closed_and_deployers_change_it(
    deployer, deployer_api, alice_api, team_a, endpoints
):
    pool = endpoints["ctr"].pool
    created = endpoint_services.endpoint_create(user=deployer, name="fresh", pool=pool)
    assert created.public is False
    assert deployer_api.get("/api/v1/endpoints/fresh/").json()["public"] is False
    assert (
        alice_api.patch("/api/v1/endpoints/fresh/", {"public": True}, format="json").status_code == 403
    )  # a developer
    response = deployer_api.patch("/api/v1/endpoints/fresh/", {"public": True}, format="json")
    assert response.status_code == 200 and response.json()["public"] is True
    assert deployer_api.patch("/api/v1/endpoints/fresh/", {"public": "maybe"}, format="json").status_code == 400
    assert Endpoint.objects.get(name="fresh").public is True
    (event,) = Event.objects.filter(
        object_type="deployments.endpoint", object_id=str(created.pk), action="access_changed"
    )
    assert (event.from_state, event.to_state) == ("keys only", "public")
    response = deployer_api.post(
        "/api/v1/endpoints/", {"name": "open", "pool": pool.name, "public": True}, format="json"
    )
    assert response.status_code == 201 and response.json()["public"] is True


# --- the route table ------------------------------------------------------------------------
def auth_of(table, name):
    return next(e["auth"] for e in table["endpoints"] if e["name"] == name)


def test_route_table_carries_hashes_scoped_per_endpoint(deployer, team_a, team_b, endpoints):
    team_b_deployer = member(team_b, Role.DEPLOYER, "bert")
    everything, secret_all = services.inference_key_create(
        user=deployer, team=team_a, name="all", rate_per_s=None, max_concurrency=None
    )
    scoped, secret_scoped = services.inference_key_create(
        user=deployer, team=team_a, name="ctr-only", endpoints=["ctr"], rate_per_s=3, burst=4, max_concurrency=2
    )
    theirs, secret_theirs = services.inference_key_create(user=team_b_deployer, team=team_b, name="theirs")
    Endpoint.objects.filter(name="search").update(public=False)
    table = route_table()
    jsonschema.validate(table, SCHEMA)
    text = json.dumps(table)
    for secret in (secret_all, secret_scoped, secret_theirs):
        assert secret[12:] not in text
    docs = {k["id"]: k for k in table["keys"]}
    assert docs[scoped.gateway_id] == {
        "id": scoped.gateway_id,
        "prefix": secret_scoped[:12],
        "team": "team-a",
        "sha256": hashlib.sha256(secret_scoped.encode()).hexdigest(),
        "rate_per_s": 3.0,
        "burst": 4.0,
        "max_concurrency": 2,
    }
    assert set(docs[everything.gateway_id]) == {"id", "prefix", "sha256", "team"}  # no limits: none sent
    ctr = auth_of(table, "ctr")
    assert ctr["public"] is False and sorted(ctr["keys"]) == sorted([everything.gateway_id, scoped.gateway_id])
    assert auth_of(table, "search") == {"public": False, "keys": [everything.gateway_id]}
    assert auth_of(table, "other") == {"public": False, "keys": [theirs.gateway_id]}

    # what the gateway makes of it: its own checks, with the secrets clients would send
    compiled = compile_table(table, {})

    def check(endpoint, secret):
        key, rejection = authenticate(
            {"authorization": f"Bearer {secret}"}, compiled.endpoints[endpoint].auth, compiled.keys, endpoint, 0.0
        )
        return rejection[1] if rejection else "ok"

    assert [
        check("ctr", secret_all),
        check("ctr", secret_scoped),
        check("search", secret_scoped),
        check("ctr", secret_theirs),
        check("ctr", secret_all[:-1] + "x"),
    ] == ["ok", "ok", "forbidden", "forbidden", "invalid_key"]


def test_public_endpoints_need_no_key(deployer, team_a, endpoints):
    key, _ = services.inference_key_create(user=deployer, team=team_a, name="all")
    endpoint_services.endpoint_update(user=deployer, endpoint=endpoints["search"], public=True)
    table = route_table()
    # the team's keys are listed all the same: a public endpoint's feedback needs one
    assert auth_of(table, "search") == {"public": True, "keys": [key.gateway_id]}
    assert auth_of(table, "ctr")["public"] is False


def test_revoked_keys_leave_the_table_and_the_etag_changes(deployer, team_a, endpoints, api_for):
    from django.contrib.auth.models import Permission

    gateway_user = factories.user("gateway-svc")
    gateway_user.user_permissions.add(Permission.objects.get(codename="read_routes"))
    gateway = api_for(gateway_user)
    empty = gateway.get("/api/v1/gateway/routes")
    etag = empty["ETag"]
    key, _ = services.inference_key_create(user=deployer, team=team_a, name="k")
    created = gateway.get("/api/v1/gateway/routes", HTTP_IF_NONE_MATCH=etag)
    assert created.status_code == 200 and created["ETag"] != etag
    assert gateway.get("/api/v1/gateway/routes", HTTP_IF_NONE_MATCH=created["ETag"]).status_code == 304
    assert key.gateway_id in auth_of(created.json(), "ctr")["keys"]
    services.inference_key_revoke(user=deployer, key=key)
    revoked = gateway.get("/api/v1/gateway/routes", HTTP_IF_NONE_MATCH=created["ETag"])
    # the ETag is a digest of the content: back to the table before the key existed
    assert revoked.status_code == 200 and revoked["ETag"] != created["ETag"] and revoked["ETag"] == etag
    table = revoked.json()
    assert table["keys"] == [] and auth_of(table, "ctr") == {"public": False, "keys": []}
    jsonschema.validate(table, SCHEMA)


def test_team_names_that_are_not_labels_still_make_a_valid_table(deployer, endpoints, artifact_factory):
    odd = factories.team("Ads & Search (EU)")
    boss = member(odd, Role.DEPLOYER, "odd-boss")
    factories.endpoint(
        factories.pool(odd, "pool-odd", ready_replicas=1), artifact_factory(odd, model_name="odd"), name="odd"
    )
    key, _ = services.inference_key_create(user=boss, team=odd, name="k")
    table = route_table()
    jsonschema.validate(table, SCHEMA)
    assert next(k for k in table["keys"] if k["id"] == key.gateway_id)["team"] == f"team-{odd.pk}"
    compile_table(table, {})  # the gateway's semantic rules hold too


def test_route_table_queries_do_not_grow_with_keys(deployer, team_a, endpoints, django_assert_max_num_queries):
    route_table()
    for index in range(5):
        services.inference_key_create(
            user=deployer, team=team_a, name=f"k{index}", endpoints=["ctr"] if index % 2 else None
        )
    connection.queries_log.clear()
    with django_assert_max_num_queries(12) as captured:
        route_table()
    few = len(captured.captured_queries)
    for index in range(5, 15):
        services.inference_key_create(
            user=deployer, team=team_a, name=f"k{index}", endpoints=["search"] if index % 2 else None
        )
    with django_assert_max_num_queries(few):
        route_table()


@pytest.mark.parametrize("key_id", ["99999999999999999999999999", "abc", "-1", "1.5", "%00", "1%20OR%201=1"])
def test_api_absurd_key_ids_are_404(deployer_api, key_id):
    assert deployer_api.get(f"/api/v1/inference-keys/{key_id}/").status_code == 404
    assert deployer_api.post(f"/api/v1/inference-keys/{key_id}/revoke/", {}, format="json").status_code == 404


@pytest.mark.parametrize(
    "body",
    [
        {"team": "\x00"},
        {"name": "a\x00"},
        {"endpoints": ["\x00"]},
        {"rate_per_s": 1e308},
        {"burst": "NaN"},
        {"max_concurrency": 2**70},
        {"rate_per_s": "Infinity"},
        {"team": "t" * 10_000},
        {"endpoints": ["ctr"] * 10_000},
        {"name": {"nested": "object"}},
        {"team": None},
    ],
)
def test_api_hostile_bodies_are_400(deployer_api, endpoints, body):
    response = create(deployer_api, **body)
    assert response.status_code == 400, response.content[:300]
    assert not InferenceKey.objects.exists()


@pytest.mark.parametrize(
    "query", ["team=%00", "search=%00", "active=maybe", "ordering=sha256", "ordering=%00", "page=999"]
)
def test_api_hostile_list_queries_never_500(deployer_api, query):
    assert deployer_api.get(f"/api/v1/inference-keys/?{query}").status_code in (200, 400, 404)


def test_api_revoke_reason_with_nul_is_400(deployer_api):
    key_id = create(deployer_api).json()["id"]
    response = deployer_api.post(f"/api/v1/inference-keys/{key_id}/revoke/", {"reason": "x\x00y"}, format="json")
    assert response.status_code == 400 and InferenceKey.objects.get(pk=key_id).active
