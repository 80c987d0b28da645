"""Version aliases (MLflow's @champion / @challenger) through the API: set, move, delete with
audit events; names checked; one alias per name per model; and `models:/name@alias` /
`models:/name/3` resolved wherever a version is named (version lookup, endpoint create,
rollout start, release start), with another team's model answering as an unknown one."""

import pytest

from deployments.models import Endpoint, PoolModel, PoolModelState, Release, Rollout
from deployments.services import endpoints as endpoint_services
from harness import factories
from registry.models import Event, EventAction, VersionAlias

pytestmark = pytest.mark.django_db


@pytest.fixture
def ctr(team_a, artifact_factory):
    """Model ctr with v1 and v2, each with a servable onnx-fp32 artifact."""
    return [artifact_factory(team_a, model_name="ctr") for _ in range(2)]


def _set(api, model, alias, version):
    return api.post(f"/api/v1/models/{model}/aliases/", {"alias": alias, "version": version}, format="json")


def test_set_move_delete_with_audit_events(alice_api, ctr):
    v1, v2 = ctr[0].version, ctr[1].version
    created = _set(alice_api, "ctr", "champion", 1)
    assert created.status_code == 201, created.json()
    assert created.json()["uri"] == "models:/ctr@champion" and created.json()["version"] == 1

    moved = alice_api.put("/api/v1/models/ctr/aliases/champion/", {"version": 2}, format="json")
    assert moved.status_code == 200 and moved.json()["version"] == 2
    assert VersionAlias.objects.get(model=v1.model, name="champion").version == v2  # one alias per name
    assert _set(alice_api, "ctr", "champion", 1).json()["version"] == 1  # POST of a taken name moves it too
    assert alice_api.get(f"/api/v1/versions/{v1.pk}/").json()["aliases"] == ["champion"]
    assert alice_api.get(f"/api/v1/versions/{v2.pk}/").json()["aliases"] == []

    assert alice_api.delete("/api/v1/models/ctr/aliases/champion/").status_code == 204
    assert alice_api.get("/api/v1/models/ctr/aliases/").json() == []
    assert alice_api.delete("/api/v1/models/ctr/aliases/champion/").status_code == 404
    # OPTIONS on an alias (DRF's metadata looks the object up, and leaves out the PUT form when it
    # is not there): the resource's description, never a 500 (schemathesis found one), and the
    # same answer for a model that does not exist (no name oracle)
    options = alice_api.options("/api/v1/models/ctr/aliases/champion/")
    unknown = alice_api.options("/api/v1/models/no-such-model/aliases/champion/")
    assert options.status_code == unknown.status_code == 200 and options.json() == unknown.json()
    trail = list(
        Event.objects.filter(object_type="registry.registeredmodel", action__startswith="alias").order_by("pk")
    )
    assert [(e.action, e.from_state, e.to_state, e.reason) for e in trail] == [
        (EventAction.ALIAS_SET, "", "v1", "@champion"),
        (EventAction.ALIAS_SET, "v1", "v2", "@champion"),
        (EventAction.ALIAS_SET, "v2", "v1", "@champion"),
        (EventAction.ALIAS_DELETED, "v1", "deleted", "@champion"),
    ]
    assert all(e.actor.username == "alice" for e in trail)


@pytest.mark.parametrize(
    "alias, why",
    [
        ("Champion", "lower-case"),
        ("-x", "starting with a letter"),
        ("a" * 65, "no more than 64 characters"),
        ("latest", "reads as a version"),
        ("v3", "reads as a version"),
        ("a/b", "lower-case"),
    ],
)
def test_alias_names_are_checked(alice_api, ctr, alias, why):
    response = _set(alice_api, "ctr", alias, 1)
    assert response.status_code == 400 and why in response.json()["detail"], response.json()
    assert not VersionAlias.objects.exists()


def test_alias_to_a_missing_version_or_another_teams_model(alice_api, bob_api, ctr):
    response = _set(alice_api, "ctr", "champion", 9)
    assert response.status_code == 400 and response.json()["code"] == "version_not_found"
    foreign = _set(bob_api, "ctr", "champion", 1)
    unknown = _set(bob_api, "no-such-model", "champion", 1)
    assert foreign.status_code == unknown.status_code == 404
    assert not VersionAlias.objects.exists()


def test_resolve_model_uris(alice_api, bob_api, ctr, team_b, artifact_factory):
    _set(alice_api, "ctr", "champion", 2)
    by_alias = alice_api.get("/api/v1/versions/resolve/", {"uri": "models:/ctr@champion"})
    assert by_alias.status_code == 200 and by_alias.json()["id"] == ctr[1].version.pk
    by_number = alice_api.get("/api/v1/versions/resolve/", {"uri": "models:/ctr/1"})
    assert by_number.status_code == 200 and by_number.json()["id"] == ctr[0].version.pk
    missing_alias = alice_api.get("/api/v1/versions/resolve/", {"uri": "models:/ctr@challenger"})
    assert missing_alias.status_code == 404 and "champion" in missing_alias.json()["detail"]

    # Bob (team b) asks for alice's model by alias and for a model nobody has: one answer.
    artifact_factory(team_b, model_name="bobs-model")
    foreign = bob_api.get("/api/v1/versions/resolve/", {"uri": "models:/ctr@champion"})
    unknown = bob_api.get("/api/v1/versions/resolve/", {"uri": "models:/ctx@champion"})
    assert foreign.status_code == unknown.status_code == 404
    assert foreign.json()["code"] == unknown.json()["code"] == "model_not_found"
    assert foreign.json()["detail"].replace("'ctr'", "'ctx'") == unknown.json()["detail"]


@pytest.mark.parametrize(
    "uri, says",
    [
        ("", "give a model URI"),
        ("runs:/abc/model", "is not a model URI"),
        ("models:/ctr", "after the model name give @<alias> or /<version number>"),
        ("models:/ctr@", "after the model name"),
        ("models:/ctr@Champion", "lower-case"),
        ("models:/CTR@champion", "is not a model name"),
        ("models:/ctr/0", "start at 1"),
        ("models:/ctr/3/extra", "after the model name"),
        ("models:/" + "x" * 300, "at most 200"),
    ],
)
def test_malformed_uris_are_400_naming_the_problem(alice_api, ctr, uri, says):
    response = alice_api.get("/api/v1/versions/resolve/", {"uri": uri})
    body = response.json()
    assert response.status_code == 400 and body["code"] == "bad_model_uri" and says in body["detail"], body


def test_endpoint_create_and_rollout_start_by_alias(deployer_api, alice_api, team_a, ctr, artifact_factory):
    pool = factories.pool(team_a, "cpu-pool", ready_replicas=1)
    _set(alice_api, "ctr", "champion", 1)
    _set(alice_api, "ctr", "challenger", 2)
    response = deployer_api.post(
        "/api/v1/endpoints/",
        {"name": "ads", "pool": "cpu-pool", "stable_artifact": "models:/ctr@champion"},
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert response.json()["stable_artifact"] == ctr[0].pk
    PoolModel.objects.filter(pool=pool).update(state=PoolModelState.READY, replica_ready={"r0": True})

    # v2 has two variants now: the stable's (onnx-fp32) is chosen unless `variant` says otherwise.
    int8 = artifact_factory(team_a, model_name="ctr", variant="onnx-int8")
    int8.version = ctr[1].version
    int8.save()
    started = deployer_api.post(
        "/api/v1/endpoints/ads/rollouts/", {"candidate_artifact": "models:/ctr@challenger"}, format="json"
    )
    assert started.status_code == 201, started.json()
    assert Rollout.objects.get().candidate_artifact_id == ctr[1].pk


def test_rollout_and_endpoint_refusals_by_uri(deployer_api, deployer, api_for, team_a, team_b, ctr):
    pool = factories.pool(team_a, "cpu-pool", ready_replicas=1)
    endpoint_services.endpoint_create(user=deployer, name="ads", pool=pool, stable_artifact=ctr[0])
    bad = deployer_api.post("/api/v1/endpoints/ads/rollouts/", {"candidate_artifact": "models:/ctr@@x"}, format="json")
    assert bad.status_code == 400 and bad.json()["code"] == "bad_model_uri"
    assert "candidate_artifact" in bad.json()["detail"]
    no_alias = deployer_api.post(
        "/api/v1/endpoints/ads/rollouts/", {"candidate_artifact": "models:/ctr@challenger"}, format="json"
    )
    assert no_alias.status_code == 404 and no_alias.json()["code"] == "alias_not_found"
    wrong_type = deployer_api.post("/api/v1/endpoints/ads/rollouts/", {"candidate_artifact": [1]}, format="json")
    assert wrong_type.status_code == 400 and "models:/ctr@champion" in str(wrong_type.json())
    variant = deployer_api.post(
        "/api/v1/endpoints/",
        {"name": "ads2", "pool": "cpu-pool", "stable_artifact": "models:/ctr/1", "stable_variant": "onnx-int8"},
        format="json",
    )
    assert variant.status_code == 400 and "servable: onnx-fp32" in variant.json()["detail"]
    assert not Endpoint.objects.filter(name="ads2").exists() and not Rollout.objects.exists()

    # Bob's team has a pool; alice's model by URI is "no such model" for him.
    factories.pool(team_b, "bob-pool")
    bob_deployer_user = factories.user("bob-deployer")
    factories.member(bob_deployer_user, team_b, role="deployer")
    bob_deployer = api_for(bob_deployer_user)
    foreign = bob_deployer.post(
        "/api/v1/endpoints/", {"name": "b", "pool": "bob-pool", "stable_artifact": "models:/ctr/1"}, format="json"
    )
    unknown = bob_deployer.post(
        "/api/v1/endpoints/", {"name": "b", "pool": "bob-pool", "stable_artifact": "models:/ctx/1"}, format="json"
    )
    assert foreign.status_code == unknown.status_code == 404
    assert foreign.json()["code"] == unknown.json()["code"] == "model_not_found"


def test_release_start_by_alias(deployer_api, alice_api, deployer, team_a, ctr):
    pool = factories.pool(team_a, "cpu-pool", ready_replicas=1)
    endpoint_services.endpoint_create(user=deployer, name="ads", pool=pool, stable_artifact=ctr[0])
    _set(alice_api, "ctr", "challenger", 2)
    response = deployer_api.post(
        "/api/v1/releases/", {"endpoint": "ads", "version": "models:/ctr@challenger"}, format="json"
    )
    assert response.status_code == 201, response.json()
    assert Release.objects.get().version_id == ctr[1].version.pk
    unknown = deployer_api.post("/api/v1/releases/", {"endpoint": "ads", "version": "models:/nope@x"}, format="json")
    assert unknown.status_code == 404 and unknown.json()["code"] == "model_not_found"
