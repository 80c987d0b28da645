"""What the API server would refuse at apply time is refused at the door: one
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


@pytest.mark.parametrize(
    "value, expected",
    [
        (2, 2),
        (2.0, 2),  # a float with no fraction is the same number
        ("2", 2),
        (0, 0),
        (2.5, None),  # a fraction is refused, never truncated to 2
        ("2.5", None),
        (True, None),  # JSON true is no count
        (None, None),
        ("two", None),
        (-1, None),  # out of range
        (9, None),
    ],
)
def test_one_whole_number_check_for_every_pool_integer(value, expected):
    from deployments.pool_fields import whole_number
    from kernel.errors import InvalidInput

    if expected is None:
        with pytest.raises(InvalidInput) as refused:
            whole_number(value, "replicas", low=0, high=8)
        assert refused.value.field == "replicas"
    else:
        assert whole_number(value, "replicas", low=0, high=8) == expected


def test_a_fractional_count_is_refused_at_the_service_too(deployer_api, deployer):
    """The service behind the API, the CLI and the pages refuses 2.5 (it used to truncate it to 2)."""
    from deployments.services.pools import pool_scale
    from kernel.errors import InvalidInput

    created = deployer_api.post(
        "/api/v1/pools/", {"name": "k8s-frac", **BASE, "resources": {"cpu": "1"}}, format="json"
    )
    assert created.status_code == 201, created.json()
    assert deployer_api.post("/api/v1/pools/k8s-frac/scale/", {"replicas": 2.5}, format="json").status_code == 400
    with pytest.raises(InvalidInput, match="not a whole number"):
        pool_scale(user=deployer, pool=ServingPool.objects.get(name="k8s-frac"), replicas=2.5)
    assert ServingPool.objects.get(name="k8s-frac").replicas == 2
