"""What the API server would refuse at apply time is refused at the door (issue 26): one
validator (deployments/pool_fields.py) behind create, update and scale, each a 400 naming
the field; a refused request writes nothing, and another team's pool is untouched."""

import pytest

from deployments.models import ServingPool

pytestmark = pytest.mark.django_db

BASE = {"team": "team-a", "driver": "kubernetes", "model_repository": "s3://bucket/models", "replicas": 2}


@pytest.mark.parametrize(
    "change, field",
    [
        ({"resources": {"cpu": "lots"}}, "resources.cpu"),
        ({"resources": {"memory": "4Gb"}}, "resources.memory"),
        ({"resources": {"cpu": "-1"}}, "resources.cpu"),
        ({"resources": {"cpu": "1e9"}}, "resources.cpu"),
        ({"resources": {"gpu": "1"}}, "resources"),
        ({"namespace": "Bad_NS!"}, "namespace"),
        ({"namespace": "a" * 64}, "namespace"),
        ({"image": "nvcr.io/nvidia/tritonserver:24.10 -py3"}, "image"),
        ({"repository_secret": "S3 Creds"}, "repository_secret"),
        ({"replicas": 1, "min_replicas": 2, "max_replicas": 4}, "replicas"),
        ({"replicas": 5, "min_replicas": 1, "max_replicas": 4}, "replicas"),
        ({"min_replicas": 5, "max_replicas": 3, "replicas": 4}, "min_replicas"),
        ({"autoscale_metric": "vibes"}, "autoscale_metric"),
        ({"autoscale_metric": "cpu", "autoscale_target": 250, "resources": {"cpu": "1"}}, "autoscale_target"),
        ({"max_replicas": 4}, "resources.cpu"),  # a CPU HPA with no CPU request cannot compute
    ],
)
def test_bad_pool_fields_are_a_400_naming_the_field(deployer_api, change, field):
    response = deployer_api.post("/api/v1/pools/", {"name": "k8s-bad", **BASE, **change}, format="json")
    assert response.status_code == 400, response.json()
    body = response.json()
    assert field in body["errors"], body
    assert not ServingPool.objects.filter(name="k8s-bad").exists()


def test_updates_and_scales_go_through_the_same_validator(deployer_api, team_b):
    ServingPool.objects.create(  # another team's pool
        name="b-pool", team=team_b, driver="kubernetes", replicas=2, resources={"cpu": "1"}, model_repository="s3://b/m"
    )
    created = deployer_api.post("/api/v1/pools/", {"name": "k8s-ok", **BASE, "resources": {"cpu": "2"}}, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["autoscale_metric"] == "cpu" and created.json()["autoscale_target"] == 70
    bad = deployer_api.patch("/api/v1/pools/k8s-ok/", {"resources": {"cpu": "lots"}}, format="json")
    assert bad.status_code == 400 and "resources.cpu" in bad.json()["errors"]
    bad = deployer_api.patch("/api/v1/pools/k8s-ok/", {"min_replicas": 3}, format="json")  # replicas 2 < 3
    assert bad.status_code == 400 and "replicas" in bad.json()["errors"]
    # an autoscaled pool's count is its HPA's
    assert deployer_api.post("/api/v1/pools/k8s-ok/scale/", {"replicas": 3}, format="json").status_code == 409
    assert deployer_api.post("/api/v1/pools/k8s-ok/scale/", {"replicas": 0}, format="json").status_code == 202
    assert ServingPool.objects.get(name="k8s-ok").resources == {"cpu": "2"}
    untouched = ServingPool.objects.get(name="b-pool")
    assert (untouched.resources, untouched.replicas, untouched.generation) == ({"cpu": "1"}, 2, 1)
