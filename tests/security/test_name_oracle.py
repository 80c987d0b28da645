"""No name oracle across teams: creating a model, a serving pool or an endpoint
under a name another team holds gets word for word the answer a reserved word gets (409
`name_unavailable`, naming no team); a name one of the user's own teams holds says so
(409 `name_taken`, "already exists in team …"), and staff see whose it is. Both sides:
the holder's team and the other team, for each kind."""

import pytest

from deployments.services.endpoints import endpoint_create
from harness import factories
from kernel.errors import Conflict
from registry import names
from registry.models import RegisteredModel, Role

pytestmark = pytest.mark.django_db


def _deployer(username, team):
    user = factories.user(username)
    factories.member(user, team, Role.DEPLOYER)
    return user


def test_a_model_name_another_team_holds_reads_as_a_reserved_word(alice_api, bob_api, staff, api_for, team_a, team_b):
    def create(api, name, team):
        return api.post("/api/v1/models/", {"name": name, "team": team, "task": "ctr"}, format="json")

    assert create(alice_api, "ranker", "team-a").status_code == 201
    theirs = create(bob_api, "ranker", "team-b")  # held by team-a, which bob is not in
    reserved = create(bob_api, "builds", "team-b")  # a reserved word
    assert theirs.status_code == reserved.status_code == 409
    body, reserved_body = theirs.json(), reserved.json()
    assert body["code"] == reserved_body["code"] == "name_unavailable"
    assert body["detail"].replace("'ranker'", "'X'").replace("ranker-2", "X-2") == reserved_body["detail"].replace(
        "'builds'", "'X'"
    ).replace("builds-2", "X-2")
    assert body["errors"].keys() == reserved_body["errors"].keys() == {"name"}
    assert "team-a" not in theirs.content.decode() and "exists" not in body["detail"]
    # the holder's own team is told plainly, and so is staff
    own = create(alice_api, "ranker", "team-a")
    assert own.status_code == 409 and own.json()["code"] == "name_taken"
    assert "already exists in team 'team-a'" in own.json()["detail"]
    assert "already exists in team 'team-a'" in create(api_for(staff), "ranker", "team-b").json()["detail"]
    assert RegisteredModel.objects.filter(name="ranker").count() == 1


def test_a_member_of_both_teams_sees_whose_name_it_is(api_for, team_a, team_b):
    both = factories.user("carol")
    factories.member(both, team_a, Role.DEVELOPER)
    factories.member(both, team_b, Role.VIEWER)
    factories.registered_model(team_b, name="blue-ranker")
    reply = api_for(both).post(
        "/api/v1/models/", {"name": "blue-ranker", "team": "team-a", "task": "ctr"}, format="json"
    )
    assert reply.status_code == 409 and "already exists in team 'team-b'" in reply.json()["detail"]


def test_a_pool_name_another_team_holds_reads_as_unavailable(api_for, team_a, team_b, settings, tmp_path):
    settings.POOLS_DIR = tmp_path / "pools"
    factories.pool(team_a, name="gpu-shared")
    ours, theirs = api_for(_deployer("dora", team_a)), api_for(_deployer("bert", team_b))

    def create(api, team):
        body = {"name": "gpu-shared", "team": team, "replicas": 1, "cost_per_replica_hour": "0.25"}
        return api.post("/api/v1/pools/", body, format="json")

    refused = create(theirs, "team-b")
    assert refused.status_code == 409 and refused.json()["code"] == "name_unavailable"
    assert refused.json()["detail"] == names.unavailable_message("serving pool", "gpu-shared")
    assert "team-a" not in refused.content.decode()
    own = create(ours, "team-a")
    assert own.status_code == 409 and "already exists in team 'team-a'" in own.json()["detail"]


def test_an_endpoint_name_another_team_holds_reads_as_unavailable(team_a, team_b):
    factories.endpoint(factories.pool(team_a, name="pool-a"), name="ctr-shared")
    pool_b = factories.pool(team_b, name="pool-b")
    with pytest.raises(Conflict) as theirs:
        endpoint_create(user=_deployer("bert", team_b), name="ctr-shared", pool=pool_b)
    assert theirs.value.code == "name_unavailable"
    assert theirs.value.detail == names.unavailable_message("endpoint", "ctr-shared")
    with pytest.raises(Conflict) as own:
        endpoint_create(user=_deployer("dora", team_a), name="ctr-shared", pool=factories.pool(team_a, name="pool-a2"))
    assert own.value.code == "name_taken" and "team 'team-a'" in own.value.detail
