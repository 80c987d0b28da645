"""A team's Kubernetes pool stays inside the team (deployments/pool_policy.py): red's
deployer asks for the platform's namespace, a foreign image and the platform's Secret and
gets a 400 naming the field and the rule for each; a row written around the API renders
nothing (render_pool refuses naming the rule; the driver applies nothing); blue's pool
renders in blue's namespace with its own Triton admin key and nothing of the platform's.
Secrets reach a pool only through a binding a platform admin made (its API, admin-only).

The Kubernetes API server is the one fake (tests/deployments/fake_apiserver.py): no cluster
runs on these machines."""

import json
from io import StringIO

import pytest
import yaml
from django.core.management import CommandError, call_command

from deployments.drivers import spec_for
from deployments.drivers.kubernetes import render
from deployments.models import PoolSecretBinding, PoolStatus, ServingPool
from harness import factories
from registry import secret_box
from registry.models import Event, Role

pytestmark = pytest.mark.django_db
PLATFORM_KEY = "the-platforms-own-triton-admin-key"
RED_ASK = {
    "name": "red-k8s",
    "team": "red",
    "driver": "kubernetes",
    "namespace": "modelplane",
    "image": "evil.example/steal:1",
    "repository_secret": "modelplane-secrets",
    "model_repository": "s3://red-bucket/models",
    "replicas": 1,
    "max_replicas": 1,
}


@pytest.fixture(autouse=True)
def platform_key(settings, monkeypatch):
    """The platform's own key is configured: no pool may ever get it."""
    settings.TRITON_ADMIN_KEY = PLATFORM_KEY
    monkeypatch.setenv("TRITON_ADMIN_KEY", PLATFORM_KEY)


@pytest.fixture
def teams(api_for):
    red, blue = factories.team("red"), factories.team("blue")
    red_deployer, blue_deployer = factories.user("red-deployer"), factories.user("blue-deployer")
    factories.member(red_deployer, red, Role.DEPLOYER)
    factories.member(blue_deployer, blue, Role.DEPLOYER)
    return {"red": (red, api_for(red_deployer)), "blue": (blue, api_for(blue_deployer))}


@pytest.mark.parametrize(
    "field, value, code",
    [
        ("namespace", "modelplane", "namespace_protected"),
        ("namespace", "modelplane-team-blue", "namespace_not_allowed"),
        ("image", "evil.example/steal:1", "image_not_allowed"),
        ("repository_secret", "modelplane-secrets", "secret_platform"),
        ("repository_secret", "blue-s3", "secret_not_bound"),
    ],
)
def test_reds_foreign_namespace_image_and_secret_are_each_a_400_naming_the_rule(teams, field, value, code):
    _, red_api = teams["red"]
    fine = {k: v for k, v in RED_ASK.items() if k not in ("namespace", "image", "repository_secret")}
    response = red_api.post("/api/v1/pools/", {**fine, field: value}, format="json")
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == code and field in body["errors"], body
    assert body["detail"].startswith(f"{field}: ")
    assert not ServingPool.objects.exists()


def test_the_whole_red_request_is_refused_and_changes_nothing(teams):
    _, red_api = teams["red"]
    response = red_api.post("/api/v1/pools/", RED_ASK, format="json")
    assert response.status_code == 400 and response.json()["code"] == "namespace_protected", response.content
    assert not ServingPool.objects.exists() and not Event.objects.filter(object_type="deployments.servingpool")


def test_updates_go_through_the_same_rules(teams):
    blue, blue_api = teams["blue"]
    made = blue_api.post(
        "/api/v1/pools/",
        {"name": "blue-k8s", "team": "blue", "driver": "kubernetes", "model_repository": "s3://b/m", "max_replicas": 1},
        format="json",
    )
    assert made.status_code == 201, made.content
    assert made.json()["namespace"] == "modelplane-team-blue"
    for change, code in (
        ({"image": "evil.example/steal:1"}, "image_not_allowed"),
        ({"repository_secret": "modelplane-secrets"}, "secret_platform"),
        ({"repository_secret": "not-bound"}, "secret_not_bound"),
    ):
        refused = blue_api.patch("/api/v1/pools/blue-k8s/", change, format="json")
        assert refused.status_code == 400 and refused.json()["code"] == code, refused.content
    pool = ServingPool.objects.get(name="blue-k8s")
    assert (pool.image, pool.repository_secret, pool.generation) == ("nvcr.io/nvidia/tritonserver:24.10-py3", "", 1)


def _bypass(team, **fields) -> ServingPool:
    """A row written around the services (a database edit, a script): what render must still refuse."""
    values = dict(
        name="red-k8s",
        team=team,
        driver="kubernetes",
        namespace="modelplane",
        image="evil.example/steal:1",
        repository_secret="modelplane-secrets",
        model_repository="s3://red-bucket/models",
        replicas=1,
        min_replicas=1,
        max_replicas=1,
        admin_key_sealed=secret_box.seal("a-key-someone-typed"),
    )
    values.update(fields)
    return ServingPool.objects.create(**values)


def test_a_row_written_around_the_api_renders_nothing(teams):
    red, _ = teams["red"]
    _bypass(red)
    out = StringIO()
    with pytest.raises(CommandError, match=r"namespace: 'modelplane' is the platform's.*\[namespace_protected\]"):
        call_command("render_pool", "red-k8s", stdout=out)
    assert out.getvalue() == ""
    # Each rule holds on its own: in red's own namespace, the image and then the Secret still refuse.
    ServingPool.objects.filter(name="red-k8s").update(namespace="modelplane-team-red")
    with pytest.raises(CommandError, match=r"image: .*\[image_not_allowed\]"):
        call_command("render_pool", "red-k8s", stdout=StringIO())
    ServingPool.objects.filter(name="red-k8s").update(image="nvcr.io/nvidia/tritonserver:24.10-py3")
    with pytest.raises(CommandError, match=r"repository_secret: .*\[secret_platform\]"):
        call_command("render_pool", "red-k8s", stdout=StringIO())
    # Bound by an admin to blue is not bound to red.
    PoolSecretBinding.objects.create(team=teams["blue"][0], namespace="modelplane-team-red", secret_name="blue-s3")
    ServingPool.objects.filter(name="red-k8s").update(repository_secret="blue-s3")
    with pytest.raises(CommandError, match=r"\[secret_not_bound\]"):
        call_command("render_pool", "red-k8s", stdout=StringIO())
    # A row with no key of its own renders nothing either (the platform's key is never a pool's).
    ServingPool.objects.filter(name="red-k8s").update(repository_secret="", admin_key_sealed="")
    with pytest.raises(CommandError, match=r"\[admin_key_missing\]"):
        call_command("render_pool", "red-k8s", stdout=StringIO())


def test_the_driver_applies_nothing_for_a_bypassing_row(teams, tmp_path, monkeypatch):
    """The reconcile path, with the fake API server behind a kubeconfig: the pool fails with
    the rule as its reason, and the API server received no request at all."""
    from deployments.services import reconcile
    from tests.deployments.fake_apiserver import FakeApiServer

    api = FakeApiServer()
    try:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "fake",
                    "clusters": [{"name": "fake", "cluster": {"server": api.url}}],
                    "users": [{"name": "nobody", "user": {}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "nobody"}}],
                }
            )
        )
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        pool = _bypass(teams["red"][0])
        pool = reconcile.pool_reconcile(pool_id=pool.pk)
        assert pool.status == PoolStatus.FAILED
        assert "'modelplane' is the platform's or the cluster's own namespace" in pool.status_reason
        assert api.requests == []
    finally:
        api.close()


def test_blues_pool_renders_in_its_namespace_with_its_own_key_and_nothing_of_the_platforms(teams, staff):
    blue, blue_api = teams["blue"]
    red, red_api = teams["red"]
    from deployments.services.pool_secrets import pool_secret_bind

    pool_secret_bind(user=staff, team=blue, namespace="", secret_name="blue-s3")
    made = blue_api.post(
        "/api/v1/pools/",
        {
            "name": "blue-k8s",
            "team": "blue",
            "driver": "kubernetes",
            "model_repository": "s3://blue/models",
            "repository_secret": "blue-s3",
            "max_replicas": 1,
        },
        format="json",
    )
    assert made.status_code == 201, made.content
    other = red_api.post(
        "/api/v1/pools/",
        {"name": "red-k8s", "team": "red", "driver": "kubernetes", "model_repository": "s3://r/m", "max_replicas": 1},
        format="json",
    )
    assert other.status_code == 201, other.content
    blue_pool, red_pool = ServingPool.objects.get(name="blue-k8s"), ServingPool.objects.get(name="red-k8s")
    blue_spec, red_spec = spec_for(blue_pool), spec_for(red_pool)
    assert blue_spec.admin_key and red_spec.admin_key and blue_spec.admin_key != red_spec.admin_key
    assert PLATFORM_KEY not in (blue_spec.admin_key, red_spec.admin_key)
    assert blue_spec.admin_key not in blue_pool.admin_key_sealed  # sealed at rest
    objects = render(blue_spec)
    text = json.dumps(objects)
    assert {o["metadata"]["namespace"] for o in objects} == {"modelplane-team-blue"}
    assert "modelplane-secrets" not in text and PLATFORM_KEY not in text
    container = objects[0]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "nvcr.io/nvidia/tritonserver:24.10-py3"
    assert container["envFrom"] == [{"secretRef": {"name": "blue-s3"}}]
    assert container["env"] == [
        {
            "name": "TRITON_ADMIN_KEY",
            "valueFrom": {"secretKeyRef": {"name": "modelplane-triton-admin-blue-k8s", "key": "admin-key"}},
        }
    ]
    secret = next(o for o in objects if o["kind"] == "Secret")
    assert secret["stringData"] == {"admin-key": blue_spec.admin_key}
    printed = StringIO()
    call_command("render_pool", "blue-k8s", stdout=printed)
    assert blue_spec.admin_key not in printed.getvalue()  # what render_pool prints leaves the key out
    # The driver calls this pool's Triton with this pool's key.
    from deployments.drivers import driver_for

    assert driver_for(blue_pool).admin_key == blue_spec.admin_key


# --- bindings: admin-only ----------------------------------------------------------------------
def test_only_platform_admins_bind_and_members_see_their_teams_bindings(teams, staff, api_for):
    blue, blue_api = teams["blue"]
    _, red_api = teams["red"]
    admin = api_for(staff)
    asked = {"team": "blue", "namespace": "modelplane-team-blue", "secret_name": "blue-s3"}
    for client in (blue_api, red_api):
        refused = client.post("/api/v1/pool-secret-bindings/", asked, format="json")
        assert refused.status_code == 403 and refused.json()["code"] == "admin_required", refused.content
    # A non-admin learns nothing about team names from the refusal.
    ghost = red_api.post("/api/v1/pool-secret-bindings/", {**asked, "team": "no-such-team"}, format="json")
    assert ghost.status_code == 403
    made = admin.post("/api/v1/pool-secret-bindings/", asked, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["team"] == "blue" and made.json()["namespace"] == "modelplane-team-blue"
    assert [b["secret_name"] for b in blue_api.get("/api/v1/pool-secret-bindings/").json()["results"]] == ["blue-s3"]
    assert red_api.get("/api/v1/pool-secret-bindings/").json()["results"] == []
    assert red_api.get(f"/api/v1/pool-secret-bindings/{made.json()['id']}/").status_code == 404
    assert blue_api.delete(f"/api/v1/pool-secret-bindings/{made.json()['id']}/").status_code == 403
    assert Event.objects.filter(object_type="deployments.poolsecretbinding", action="created").count() == 1


@pytest.mark.parametrize(
    "asked, status, code",
    [
        ({"team": "red", "namespace": "modelplane", "secret_name": "modelplane-secrets"}, 400, "namespace_protected"),
        ({"team": "red", "namespace": "modelplane-team-blue", "secret_name": "s3"}, 400, "namespace_not_allowed"),
        ({"team": "red", "namespace": "", "secret_name": "modelplane-secrets"}, 400, "secret_platform"),
        ({"team": "red", "namespace": "", "secret_name": "Not A Name"}, 400, "bad_secret_name"),
    ],
)
def test_an_admin_cannot_bind_the_platforms_secrets_or_outside_the_teams_namespaces(
    teams, staff, api_for, asked, status, code
):
    response = api_for(staff).post("/api/v1/pool-secret-bindings/", asked, format="json")
    assert response.status_code == status and response.json()["code"] == code, response.content
    assert not PoolSecretBinding.objects.exists()


def test_a_secret_serves_one_team_and_stays_bound_while_a_pool_names_it(teams, staff, api_for, settings):
    settings.POOL_TEAM_NAMESPACES = {"red": ["shared"], "blue": ["shared"]}
    admin = api_for(staff)
    made = admin.post("/api/v1/pool-secret-bindings/", {"team": "blue", "secret_name": "s3"}, format="json")
    assert made.status_code == 201 and made.json()["namespace"] == "shared"
    again = admin.post("/api/v1/pool-secret-bindings/", {"team": "red", "secret_name": "s3"}, format="json")
    assert again.status_code == 409 and again.json()["code"] == "secret_bound_elsewhere"
    red_api, blue_api = teams["red"][1], teams["blue"][1]
    base = {"driver": "kubernetes", "model_repository": "s3://x/m", "max_replicas": 1, "repository_secret": "s3"}
    refused = red_api.post("/api/v1/pools/", {**base, "name": "red-k8s", "team": "red"}, format="json")
    assert refused.status_code == 400 and refused.json()["code"] == "secret_not_bound"
    used = blue_api.post("/api/v1/pools/", {**base, "name": "blue-k8s", "team": "blue"}, format="json")
    assert used.status_code == 201, used.content
    busy = admin.delete(f"/api/v1/pool-secret-bindings/{made.json()['id']}/")
    assert busy.status_code == 409 and busy.json()["code"] == "secret_in_use"
    assert blue_api.patch("/api/v1/pools/blue-k8s/", {"repository_secret": ""}, format="json").status_code == 200
    assert admin.delete(f"/api/v1/pool-secret-bindings/{made.json()['id']}/").status_code == 204
    assert not PoolSecretBinding.objects.exists()
