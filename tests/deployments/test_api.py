"""Pools API: team scoping, roles, validation; bad input is a 4xx that changes nothing."""

import pytest

from deployments.models import PoolModel, PoolModelState, PoolStatus, ServingPool
from harness import factories
from registry.models import ArtifactStatus, Event, Role

pytestmark = pytest.mark.django_db


def create(client, **body):
    payload = {"name": "cpu-a", "team": "team-a", "replicas": 2, "cost_per_replica_hour": "0.25", **body}
    return client.post("/api/v1/pools/", payload, format="json")


def test_create_pool_records_it_with_its_repository_and_an_event(deployer_api, pools_dir):
    response = create(deployer_api)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["name"] == "cpu-a" and body["driver"] == "local" and body["replicas"] == 2
    assert body["status"] == PoolStatus.PENDING
    assert body["model_repository"] == ""  # under the server's data directory: recorded, never shown
    pool = ServingPool.objects.get(name="cpu-a")
    assert pool.model_repository == str(pools_dir.resolve() / "cpu-a" / "models")
    assert Event.objects.filter(
        object_type="deployments.servingpool", object_id=str(pool.pk), action="created"
    ).exists()


def test_duplicate_name_is_409_and_changes_nothing(deployer_api):
    assert create(deployer_api).status_code == 201
    response = create(deployer_api, replicas=5)
    assert response.status_code == 409
    assert response.json()["code"] == "name_taken"
    assert ServingPool.objects.get(name="cpu-a").replicas == 2


@pytest.mark.parametrize(
    "body, field",
    [
        ({"name": "Bad_Name"}, "name"),
        ({"replicas": -1}, "replicas"),
        ({"replicas": 99}, "replicas"),
        ({"device_kind": "nvidia-a100"}, "device_kind"),  # local pools run on this CPU
        ({"driver": "kubernetes", "model_repository": "/tmp/x"}, "model_repository"),
        ({"cost_per_replica_hour": "-1"}, "cost_per_replica_hour"),
        ({"resources": {"gpu": "1"}}, "resources"),
    ],
)
def test_bad_pool_input_is_400_naming_the_field(deployer_api, body, field):
    response = create(deployer_api, **body)
    assert response.status_code == 400, response.json()
    assert field in response.json()["detail"]
    assert not ServingPool.objects.exists()


def test_missing_tritonserver_binary_is_a_clear_400(deployer_api, monkeypatch, tmp_path):
    monkeypatch.setenv("TRITONSERVER_BIN", str(tmp_path / "no-such-tritonserver"))
    response = create(deployer_api)
    assert response.status_code == 400
    assert response.json()["code"] == "triton_unavailable"
    assert "no-such-tritonserver" in response.json()["detail"]
    assert not ServingPool.objects.exists()


def test_developer_cannot_create_pools(alice_api):
    response = create(alice_api)
    # team-a is not among the teams alice deploys in: the team "does not exist" for her.
    assert response.status_code == 400
    assert "team" in response.json()["detail"]


def test_other_teams_pools_are_404(deployer_api, bob_api, bob):
    assert create(deployer_api).status_code == 201
    assert bob_api.get("/api/v1/pools/cpu-a/").status_code == 404
    assert bob_api.post("/api/v1/pools/cpu-a/scale/", {"replicas": 0}, format="json").status_code == 404
    assert bob_api.get("/api/v1/pools/").json()["count"] == 0


def test_viewer_sees_but_cannot_scale(deployer_api, api_for, team_a):
    assert create(deployer_api).status_code == 201
    viewer = factories.user("vic")
    factories.member(viewer, team_a, Role.VIEWER)
    client = api_for(viewer)
    assert client.get("/api/v1/pools/cpu-a/").status_code == 200
    response = client.post("/api/v1/pools/cpu-a/scale/", {"replicas": 3}, format="json")
    assert response.status_code == 403
    assert response.json()["code"] == "role_required"
    assert ServingPool.objects.get(name="cpu-a").replicas == 2


def test_scale_below_zero_is_400_and_changes_nothing(deployer_api):
    assert create(deployer_api).status_code == 201
    response = deployer_api.post("/api/v1/pools/cpu-a/scale/", {"replicas": -1}, format="json")
    assert response.status_code == 400
    assert "replicas" in response.json()["detail"]
    pool = ServingPool.objects.get(name="cpu-a")
    assert (pool.replicas, pool.generation) == (2, 1)


def test_scale_records_the_change(deployer_api):
    assert create(deployer_api).status_code == 201
    response = deployer_api.post("/api/v1/pools/cpu-a/scale/", {"replicas": 3}, format="json")
    assert response.status_code == 202
    pool = ServingPool.objects.get(name="cpu-a")
    assert (pool.replicas, pool.generation) == (3, 2)
    event = Event.objects.get(object_id=str(pool.pk), action="scaled")
    assert (event.from_state, event.to_state) == ("2", "3")


def test_load_of_a_non_servable_artifact_is_400_and_changes_nothing(deployer_api, artifact_factory, team_a):
    assert create(deployer_api).status_code == 201
    artifact = artifact_factory(team_a, status=ArtifactStatus.REJECTED)
    response = deployer_api.post("/api/v1/pools/cpu-a/load/", {"artifact": artifact.pk}, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "artifact_not_servable"
    assert not PoolModel.objects.exists()


def test_load_of_another_teams_artifact_is_404(deployer_api, artifact_factory, team_b):
    assert create(deployer_api).status_code == 201
    artifact = artifact_factory(team_b, model_name="theirs")
    response = deployer_api.post("/api/v1/pools/cpu-a/load/", {"artifact": artifact.pk}, format="json")
    assert response.status_code == 404
    assert response.json()["code"] == "artifact_not_found"


def test_load_request_is_recorded_once(deployer_api, artifact_factory, team_a):
    assert create(deployer_api).status_code == 201
    artifact = artifact_factory(team_a)
    first = deployer_api.post("/api/v1/pools/cpu-a/load/", {"artifact": artifact.pk}, format="json")
    assert first.status_code == 202
    assert first.json()["state"] == PoolModelState.LOADING
    assert first.json()["triton_model_name"] == artifact.triton_model_name
    second = deployer_api.post("/api/v1/pools/cpu-a/load/", {"artifact": artifact.pk}, format="json")
    assert second.status_code == 202
    assert PoolModel.objects.count() == 1


def test_unload_of_an_unknown_model_is_404(deployer_api):
    assert create(deployer_api).status_code == 201
    response = deployer_api.post("/api/v1/pools/cpu-a/unload/", {"model": "nope__v1__x"}, format="json")
    assert response.status_code == 404
    assert response.json()["code"] == "model_not_in_pool"


def test_kubernetes_pool_and_gpu_defaults(deployer_api):
    response = create(
        deployer_api,
        name="gpu-a",
        driver="kubernetes",
        device_kind="nvidia-a100",
        model_repository="s3://bucket/models",
    )
    assert response.status_code == 201, response.json()
    assert response.json()["gpus_per_replica"] == 1


def test_list_query_count_is_pinned(deployer_api, deployer, team_a, django_assert_max_num_queries):
    from deployments.services import pools

    for i in range(5):
        pools.pool_create(user=deployer, name=f"p{i}", team=team_a, replicas=1)
    with django_assert_max_num_queries(6):
        response = deployer_api.get("/api/v1/pools/")
    assert response.json()["count"] == 5


def test_pools_are_in_the_openapi_schema(deployer_api):
    schema = deployer_api.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    for path in (
        "/api/v1/pools/",
        "/api/v1/pools/{name}/",
        "/api/v1/pools/{name}/scale/",
        "/api/v1/pools/{name}/load/",
        "/api/v1/pools/{name}/unload/",
    ):
        assert path in schema["paths"], path
