import pytest
from django.test import Client

from harness import factories
from registry.models import ModelVersion, RegisteredModel

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice_web(alice):
    client = Client()
    client.force_login(alice)
    return client


def test_pages_need_login(client):
    response = client.get("/models/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_login_page_and_login(client, alice):
    assert client.get("/login/").status_code == 200
    response = client.post("/login/", {"username": "alice", "password": "pw-for-tests-only"})
    assert response.status_code == 302
    assert client.get("/models/").status_code == 200


def test_model_list_full_page_and_htmx_partial(alice_web, team_a, team_b):
    factories.registered_model(team_a, name="ctr-main", description="main ranker")
    factories.registered_model(team_a, name="search-rel")
    factories.registered_model(team_b, name="ctr-other-team")
    page = alice_web.get("/models/").content.decode()
    assert "<html" in page and "ctr-main" in page and "search-rel" in page and "ctr-other-team" not in page
    assert 'hx-get="/models/"' in page and 'href="/models/"' in page
    partial = alice_web.get("/models/", {"q": "ctr"}, HTTP_HX_REQUEST="true")
    body = partial.content.decode()
    assert "<html" not in body and 'id="model-rows"' in body
    assert "ctr-main" in body and "search-rel" not in body and "ctr-other-team" not in body
    assert "HX-Request" in partial["Vary"]


def test_live_search_works_without_javascript(alice_web, team_a):
    factories.registered_model(team_a, name="alpha")
    factories.registered_model(team_a, name="beta")
    body = alice_web.get("/models/", {"q": "alp"}).content.decode()
    assert "<html" in body and "alpha" in body and ">beta<" not in body


def test_register_model_form(alice_web, team_a):
    response = alice_web.post("/models/new/", {"name": "from-ui", "team": "team-a", "task": "ctr", "description": ""})
    assert response.status_code == 302 and response["Location"] == "/models/from-ui/"
    assert RegisteredModel.objects.get(name="from-ui").created_by.username == "alice"
    again = alice_web.post("/models/new/", {"name": "from-ui", "team": "team-a", "task": "ctr"})
    assert again.status_code == 200 and "already exists in team &#x27;team-a&#x27;" in again.content.decode()


def test_upload_version_form_and_pages(alice_web, team_a, onnx_path):
    model = factories.registered_model(team_a, name="ui-model")
    with open(onnx_path, "rb") as fh:
        response = alice_web.post("/models/ui-model/versions/new/", {"file": fh})
    version = ModelVersion.objects.get(model=model)
    assert response.status_code == 302 and response["Location"] == f"/models/versions/{version.pk}/"
    detail = alice_web.get(response["Location"]).content.decode()
    assert 'id="signature"' in detail and "dense" in detail and "sparse" in detail and "[-1, 26]" in detail
    model_page = alice_web.get("/models/ui-model/").content.decode()
    assert "v1" in model_page


def test_upload_form_shows_why_a_file_is_refused(alice_web, team_a, tmp_path):
    factories.registered_model(team_a, name="ui-model")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x80\x04K\x01.")
    with open(bad, "rb") as fh:
        response = alice_web.post("/models/ui-model/versions/new/", {"file": fh})
    assert response.status_code == 200 and "pickle" in response.content.decode()
    assert not ModelVersion.objects.exists()


def test_other_teams_pages_are_404(alice_web, team_b):
    factories.registered_model(team_b, name="hidden")
    assert alice_web.get("/models/hidden/").status_code == 404
    assert alice_web.get("/models/hidden/versions/new/").status_code == 404
