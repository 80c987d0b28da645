"""Dashboard and admin for inference keys: the secret appears once (in the reply to the
create POST, never cached, never again), revoke asks first, another team's key is a 404,
viewers see but cannot create, an endpoint's access is switched by deployers; the admin
revokes through the service."""

import re

import pytest
from django.test import Client

from deployments.models import Endpoint, InferenceKey
from deployments.services import keys as services
from harness import factories
from registry.models import Event, Role

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _gateway_unreachable(monkeypatch):
    from serving.tritonserver import free_port

    monkeypatch.setenv("GATEWAY_METRICS_URL", f"http://127.0.0.1:{free_port()}/metrics")


@pytest.fixture
def endpoint(team_a, artifact_factory):
    return factories.endpoint(factories.pool(team_a, "pool-a", ready_replicas=1), artifact_factory(team_a), name="ctr")


def web(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_create_shows_the_secret_once(deployer, team_a, endpoint):
    client = web(deployer)
    page = client.get("/deployments/keys/")
    assert page.status_code == 200 and 'id="key-form"' in page.content.decode() and ">Keys</a>" in page.content.decode()
    response = client.post(
        "/deployments/keys/",
        {
            "team": "team-a",
            "name": "ranker",
            "endpoints": ["ctr"],
            "rate_per_s": "5",
            "burst": "",
            "max_concurrency": "3",
        },
    )
    html = response.content.decode()
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    secret = re.search(r'id="new-secret"[^>]*value="(mpk_[^"]+)"', html).group(1)
    key = InferenceKey.objects.get()
    assert key.sha256 == services.secret_hash(secret) and not key.all_endpoints and key.burst == 10.0
    assert "shown this once" in html
    again = client.get("/deployments/keys/").content.decode()
    assert secret not in again and key.prefix in again and secret[12:] not in again


def test_create_form_errors_say_what_is_wrong_and_create_nothing(deployer, team_a, endpoint):
    client = web(deployer)
    response = client.post("/deployments/keys/", {"team": "team-a", "name": "k", "rate_per_s": "-3"})
    assert response.status_code == 400 and "rate_per_s" in response.content.decode()
    response = client.post("/deployments/keys/", {"team": "team-a", "name": "k", "rate_per_s": "", "burst": "5"})
    assert response.status_code == 400 and "burst needs a rate" in response.content.decode()
    response = client.post("/deployments/keys/", {"team": "team-b", "name": "k"})
    assert response.status_code == 400
    assert not InferenceKey.objects.exists()


def test_viewer_sees_keys_but_no_form_and_cannot_post(deployer, team_a, endpoint):
    key, secret = services.inference_key_create(user=deployer, team=team_a, name="ranker")
    viewer = factories.user("vic")
    factories.member(viewer, team_a, Role.VIEWER)
    client = web(viewer)
    page = client.get("/deployments/keys/").content.decode()
    assert (
        key.prefix in page and 'id="key-form"' not in page and "needs the deployer" in page and secret[12:] not in page
    )
    assert client.post("/deployments/keys/", {"team": "team-a", "name": "mine"}).status_code == 400
    response = client.post(f"/deployments/keys/{key.pk}/revoke/", follow=True)
    assert "You need the deployer role" in response.content.decode()
    assert InferenceKey.objects.count() == 1 and InferenceKey.objects.get().active


def test_revoke_asks_then_revokes(deployer, team_a, endpoint):
    key, _ = services.inference_key_create(user=deployer, team=team_a, name="ranker")
    client = web(deployer)
    confirm = client.get(f"/deployments/keys/{key.pk}/revoke/")
    assert confirm.status_code == 200 and 'id="confirm-revoke"' in confirm.content.decode()
    assert InferenceKey.objects.get().active
    done = client.post(f"/deployments/keys/{key.pk}/revoke/", {"reason": "rotated"}, follow=True)
    assert "revoked" in done.content.decode() and not InferenceKey.objects.get().active
    assert Event.objects.get(object_type="deployments.inferencekey", action="revoked").reason == "rotated"
    assert key.prefix not in client.get("/deployments/keys/").content.decode()  # active only by default
    assert key.prefix in client.get("/deployments/keys/?show=all").content.decode()


def test_other_teams_key_pages_are_404(deployer, bob, team_a, endpoint):
    key, _ = services.inference_key_create(user=deployer, team=team_a, name="ranker")
    client = web(bob)
    assert client.get(f"/deployments/keys/{key.pk}/revoke/").status_code == 404
    assert client.post(f"/deployments/keys/{key.pk}/revoke/").status_code == 404
    assert key.prefix not in client.get("/deployments/keys/").content.decode()
    assert client.get("/deployments/keys/abc/revoke/").status_code == 404
    assert InferenceKey.objects.get().active


def test_endpoint_access_switch(deployer, alice, bob, endpoint):
    page = web(deployer).get("/deployments/endpoints/ctr/").content.decode()
    assert 'id="endpoint-access"' in page and "keys only" in page
    assert web(bob).post("/deployments/endpoints/ctr/access/", {"public": "true"}).status_code == 404
    web(alice).post("/deployments/endpoints/ctr/access/", {"public": "true"})  # a developer: refused with a message
    assert Endpoint.objects.get(name="ctr").public is False
    web(deployer).post("/deployments/endpoints/ctr/access/", {"public": "yes please"})
    assert Endpoint.objects.get(name="ctr").public is False
    response = web(deployer).post("/deployments/endpoints/ctr/access/", {"public": "true"}, follow=True)
    assert "is now public" in response.content.decode() and Endpoint.objects.get(name="ctr").public is True
    assert "public" in web(deployer).get("/deployments/endpoints/").content.decode()


def test_admin_lists_and_revokes_through_the_service(staff, deployer, team_a):
    key, secret = services.inference_key_create(user=deployer, team=team_a, name="ranker")
    admin = web(staff)
    changelist = admin.get("/admin/deployments/inferencekey/")
    assert changelist.status_code == 200 and key.prefix in changelist.content.decode()
    detail = admin.get(f"/admin/deployments/inferencekey/{key.pk}/change/").content.decode()
    assert key.sha256 not in detail and secret[12:] not in detail
    response = admin.post(
        "/admin/deployments/inferencekey/", {"action": "revoke", "_selected_action": [key.pk]}, follow=True
    )
    assert response.status_code == 200
    key.refresh_from_db()
    assert key.revoked_by == staff
    assert (
        Event.objects.filter(object_type="deployments.inferencekey", action="revoked", reason__contains="admin").count()
        == 1
    )
    assert admin.get("/admin/deployments/inferencekey/add/").status_code == 403


def test_hostile_form_input_is_refused_without_a_500(deployer, team_a, endpoint):
    client = web(deployer)
    for body in (
        {"team": "\x00", "name": "k"},
        {"team": "team-a", "name": "k\x00"},
        {"team": "team-a", "name": "k", "endpoints": ["\x00"]},
        {"team": "team-a", "name": "k", "rate_per_s": "1e999"},
        {"team": "team-a", "name": "k", "max_concurrency": "9" * 40},
    ):
        assert client.post("/deployments/keys/", body).status_code == 400, body
    assert not InferenceKey.objects.exists()
    key, _ = services.inference_key_create(user=deployer, team=team_a, name="k")
    response = client.post(f"/deployments/keys/{key.pk}/revoke/", {"reason": "x\x00y"}, follow=True)
    assert response.status_code == 200 and "no NUL" in response.content.decode() and InferenceKey.objects.get().active
