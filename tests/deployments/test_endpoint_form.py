"""Endpoints created and edited from the dashboard's form and the admin console: both call
endpoint_create / endpoint_update (the API's rules, its audit events, the stable's load), and
a refusal comes back on the field it concerns; pools are added in the admin through pool_create."""

import pytest
from django.test import Client

from deployments.models import Endpoint, PoolModel, ServingPool
from deployments.services import endpoints as endpoint_services
from harness import factories
from registry.models import Event, EventAction

pytestmark = pytest.mark.django_db


def _web(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


FORM = {
    "slo_p99_ms": "40",
    "slo_error_rate": "0.02",
    "psi_threshold": "0.25",
    "latency_margin": "",  # empty: derived from the SLO headroom (the default)
    "on_inconclusive": "pause",
    "timeout_ms": "800",
    "sticky_header": "X-User-Id",
    "public": "false",
}


def test_create_from_the_dashboard_loads_the_stable_and_records_the_event(deployer, team_a, artifact_factory):
    pool = factories.pool(team_a, "cpu-pool", ready_replicas=1)
    stable = artifact_factory(team_a, model_name="ctr")
    web = _web(deployer)
    page = web.get("/deployments/endpoints/new/").content.decode()
    assert "cpu-pool" in page and f"ctr v1 · onnx-fp32 (#{stable.pk})" in page
    response = web.post(
        "/deployments/endpoints/new/",
        {**FORM, "name": "ads", "kind": "tensor", "pool": "cpu-pool", "stable_artifact": str(stable.pk)},
    )
    assert response.status_code == 302 and response["Location"] == "/deployments/endpoints/ads/"
    endpoint = Endpoint.objects.get(name="ads")
    assert (endpoint.pool, endpoint.stable_artifact, endpoint.slo_p99_ms, endpoint.timeout_ms) == (
        pool,
        stable,
        40,
        800,
    )
    assert endpoint.public is False and endpoint.on_inconclusive == "pause"
    assert PoolModel.objects.filter(pool=pool, artifact=stable).exists()  # the service asked the pool to load it
    assert Event.objects.filter(object_type="deployments.endpoint", action=EventAction.CREATED, actor=deployer).exists()


@pytest.mark.parametrize(
    "change, field, says",
    [
        ({"slo_error_rate": "2"}, "slo_error_rate", "give a fraction in 0..1"),
        ({"latency_margin": "9"}, "latency_margin", "0..5"),
        ({"sticky_header": "X User"}, "sticky_header", "HTTP header name"),
        ({"name": "Bad Name"}, "name", "lowercase letters"),
        ({"name": "new"}, "name", "reserved"),
        ({"stable_artifact": "gpu"}, "stable_artifact", "needs a GPU; pool 'cpu-pool' is cpu"),
        ({"pool": "elsewhere"}, "pool", "Select a valid choice"),
    ],
)
def test_refusals_are_shown_on_their_field(deployer, team_a, team_b, artifact_factory, change, field, says):
    factories.pool(team_a, "cpu-pool", ready_replicas=1)
    factories.pool(team_b, "elsewhere")  # another team's pool is no choice
    gpu = artifact_factory(team_a, model_name="ctr", variant="onnx-fp16")
    data = {**FORM, "name": "ads", "kind": "tensor", "pool": "cpu-pool", "stable_artifact": "", **change}
    if data["stable_artifact"] == "gpu":
        data["stable_artifact"] = str(gpu.pk)
    response = _web(deployer).post("/deployments/endpoints/new/", data)
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert list(errors) == [field] and says in errors[field][0], errors
    assert f'id="error-{field}"' in response.content.decode()
    assert not Endpoint.objects.exists()


def test_the_api_refuses_the_same_gpu_stable(deployer_api, team_a, artifact_factory):
    factories.pool(team_a, "cpu-pool", ready_replicas=1)
    gpu = artifact_factory(team_a, model_name="ctr", variant="onnx-fp16")
    response = deployer_api.post(
        "/api/v1/endpoints/", {"name": "ads", "pool": "cpu-pool", "stable_artifact": gpu.pk}, format="json"
    )
    assert response.status_code == 400 and response.json()["code"] == "variant_not_servable_here"


def test_llm_endpoint_with_its_slos(deployer, team_a):
    factories.pool(team_a, "cpu-pool")
    response = _web(deployer).post(
        "/deployments/endpoints/new/",
        {**FORM, "name": "chat", "kind": "llm", "pool": "cpu-pool", "ttft_slo_ms": "300", "itl_slo_ms": "40"},
    )
    assert response.status_code == 302, response.context["form"].errors
    endpoint = Endpoint.objects.get(name="chat")
    assert (endpoint.kind, endpoint.ttft_slo_ms, endpoint.itl_slo_ms) == ("llm", 300, 40)


def test_edit_changes_slos_and_access_with_events(deployer, alice, team_a):
    pool = factories.pool(team_a, "cpu-pool")
    endpoint = endpoint_services.endpoint_create(user=deployer, name="ads", pool=pool)
    web = _web(deployer)
    form = web.get("/deployments/endpoints/ads/edit/").context["form"]
    assert form.initial["slo_p99_ms"] == 50.0 and "pool" not in form.fields  # the pool and stable are fixed
    response = web.post("/deployments/endpoints/ads/edit/", {**FORM, "public": "true", "slo_p99_ms": "-1"})
    assert response.status_code == 400 and "must be positive" in response.context["form"].errors["slo_p99_ms"][0]
    response = web.post("/deployments/endpoints/ads/edit/", {**FORM, "public": "true"})
    assert response.status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.public is True and endpoint.slo_p99_ms == 40
    access = Event.objects.get(object_type="deployments.endpoint", action=EventAction.ACCESS_CHANGED)
    assert (access.from_state, access.to_state) == ("keys only", "public")
    update = Event.objects.get(object_type="deployments.endpoint", action=EventAction.UPDATED)
    assert sorted(update.data) == ["public", "slo_error_rate", "slo_p99_ms", "timeout_ms"]  # what changed
    # a developer (not a deployer) may read the endpoint but not change it
    assert _web(alice).post("/deployments/endpoints/ads/edit/", {**FORM, "public": "false"}).status_code == 403


@pytest.fixture
def admin_web(staff):
    return _web(staff)


def test_admin_adds_an_endpoint_through_the_service(admin_web, staff, team_a, artifact_factory):
    pool = factories.pool(team_a, "cpu-pool")
    stable = artifact_factory(team_a, model_name="ctr")
    fields = {**FORM, "kind": "tensor", "pool": pool.pk, "stable_artifact": stable.pk, "public": ""}
    refused = admin_web.post("/admin/deployments/endpoint/add/", {**fields, "name": "ads", "slo_error_rate": "3"})
    assert refused.status_code == 200 and "give a fraction in 0..1" in refused.content.decode()
    assert not Endpoint.objects.exists()
    response = admin_web.post("/admin/deployments/endpoint/add/", {**fields, "name": "ads"})
    assert response.status_code == 302, response.content.decode()[:3000]
    endpoint = Endpoint.objects.get(name="ads")
    assert endpoint.team == team_a and endpoint.stable_artifact == stable and endpoint.slo_p99_ms == 40
    assert PoolModel.objects.filter(pool=pool, artifact=stable).exists()
    assert Event.objects.filter(object_type="deployments.endpoint", action=EventAction.CREATED, actor=staff).exists()

    changed = admin_web.post(f"/admin/deployments/endpoint/{endpoint.pk}/change/", {**FORM, "slo_p99_ms": "25"})
    assert changed.status_code == 302, changed.content.decode()[:3000]
    endpoint.refresh_from_db()
    assert endpoint.slo_p99_ms == 25
    update = Event.objects.get(object_type="deployments.endpoint", action=EventAction.UPDATED)
    assert update.data == {"slo_p99_ms": "25.0"}  # only what changed


def test_admin_adds_a_pool_through_the_service(admin_web, staff, team_a):
    fields = {
        "team": team_a.pk,
        "driver": "local",
        "replicas": "1",
        "device_kind": "cpu",
        "gpus_per_replica": "0",
        "resources": "{}",
        "namespace": "",
        "image": "nvcr.io/nvidia/tritonserver:24.10-py3",
        "min_replicas": "1",
        "max_replicas": "4",
        "max_queue_size": "0",
        "queue_timeout_ms": "0",
        "cost_per_replica_hour": "0.5",
        "autoscale_metric": "",
        "autoscale_target": "0",
        "repository_secret": "",
    }
    refused = admin_web.post(
        "/admin/deployments/servingpool/add/", {**fields, "name": "p1", "device_kind": "nvidia-t4"}
    )
    assert refused.status_code == 200 and not ServingPool.objects.exists()
    assert "local pools run on this machine&#x27;s CPU" in refused.content.decode()
    response = admin_web.post("/admin/deployments/servingpool/add/", {**fields, "name": "p1"})
    assert response.status_code == 302, response.content.decode()[:3000]
    pool = ServingPool.objects.get(name="p1")
    assert pool.team == team_a and str(pool.cost_per_replica_hour) == "0.5000" and pool.created_by == staff
    assert Event.objects.filter(object_type="deployments.servingpool", action=EventAction.CREATED).exists()

    for page in ("servingpool/add/", f"servingpool/{pool.pk}/change/", "endpoint/add/"):
        assert admin_web.get(f"/admin/deployments/{page}").status_code == 200, page
    changed = admin_web.post(
        f"/admin/deployments/servingpool/{pool.pk}/change/",
        {
            **{k: fields[k] for k in ("resources", "image", "min_replicas", "max_replicas", "max_queue_size")},
            "queue_timeout_ms": "0",
            "replicas": "1",
            "cost_per_replica_hour": "1.25",
            **{f"{inline}-{n}": "0" for inline in ("replica_set", "models") for n in ("TOTAL_FORMS", "INITIAL_FORMS")},
        },
    )
    assert changed.status_code == 302, changed.content.decode()[:3000]
    pool.refresh_from_db()
    assert str(pool.cost_per_replica_hour) == "1.2500"
    update = Event.objects.get(object_type="deployments.servingpool", action=EventAction.UPDATED)
    assert "cost_per_replica_hour" in str(update.data)


def test_the_admin_form_refuses_a_pool_spec_outside_the_teams_confinement(admin_web, team_a):
    """The console's pool form is one more door to the same check (deployments/pool_policy.py):
    the platform's namespace, a foreign image or an unbound Secret is shown on its field."""
    fields = {
        "name": "k1",
        "team": team_a.pk,
        "driver": "kubernetes",
        "replicas": "1",
        "device_kind": "cpu",
        "gpus_per_replica": "0",
        "resources": "{}",
        "model_repository": "s3://bucket/models",
        "namespace": "",
        "image": "nvcr.io/nvidia/tritonserver:24.10-py3",
        "min_replicas": "1",
        "max_replicas": "1",
        "max_queue_size": "0",
        "queue_timeout_ms": "0",
        "cost_per_replica_hour": "0",
        "autoscale_metric": "",
        "autoscale_target": "0",
        "repository_secret": "",
    }
    for change, words in (
        ({"namespace": "modelplane"}, "the platform&#x27;s or the cluster&#x27;s own namespace"),
        ({"image": "evil.example/steal:1"}, "is not an image team"),
        ({"repository_secret": "modelplane-secrets"}, "platform&#x27;s own Secrets"),
    ):
        refused = admin_web.post("/admin/deployments/servingpool/add/", {**fields, **change})
        assert refused.status_code == 200 and words in refused.content.decode(), change
    assert not ServingPool.objects.exists()
    made = admin_web.post("/admin/deployments/servingpool/add/", fields)
    assert made.status_code == 302, made.content.decode()[:3000]
    assert ServingPool.objects.get(name="k1").namespace == "modelplane-team-team-a"


def test_a_new_llm_endpoint_gets_llm_defaults_without_javascript(deployer, team_a):
    """?kind=llm pre-fills the LLM defaults; a form posted with the tensor defaults left
    untouched (the page without its script) still gets the LLM ones from the service."""
    from deployments.forms import kind_defaults
    from deployments.services.llm_endpoints import LLM_DEFAULTS

    factories.pool(team_a, "cpu-pool", ready_replicas=1)
    stable = factories.llm_artifact(team_a, model_name="chat")
    web = _web(deployer)
    page = web.get("/deployments/endpoints/new/?kind=llm").content.decode()
    assert f'name="timeout_ms" value="{LLM_DEFAULTS["timeout_ms"]}"' in page
    assert f'name="sticky_header" value="{LLM_DEFAULTS["sticky_header"]}"' in page
    tensor = {k: "" if v is None else str(v) for k, v in kind_defaults("tensor").items()}  # None: an empty field
    response = web.post(
        "/deployments/endpoints/new/",
        {**tensor, "public": "false", "name": "chat", "kind": "llm", "pool": "cpu-pool", "stable_artifact": stable.pk},
    )
    assert response.status_code == 302, response.content.decode()[-2000:]
    endpoint = Endpoint.objects.get(name="chat")
    assert (endpoint.timeout_ms, endpoint.sticky_header) == (LLM_DEFAULTS["timeout_ms"], LLM_DEFAULTS["sticky_header"])
    typed = web.post(  # what a person typed stays: a 5 s timeout
        "/deployments/endpoints/new/",
        {**tensor, "timeout_ms": "5000", "public": "false", "name": "chat2", "kind": "llm", "pool": "cpu-pool"},
    )
    assert typed.status_code == 302 and Endpoint.objects.get(name="chat2").timeout_ms == 5000
