"""The API's docs and errors are true: documented error
responses with one body, nullable fields marked nullable, 400s naming bad query
parameters, JSON 404s under /api/, Swagger UI and Redoc that work with no network."""

from urllib.parse import urlparse

import pytest
from django.test import Client

from harness import factories
from monitoring.services.alerts import alert_raise
from registry.models import Event

pytestmark = pytest.mark.django_db

ERROR_REF = "#/components/schemas/Error"


@pytest.fixture
def schema(alice_api):
    response = alice_api.get("/api/schema/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    return response.json()


def _operations(schema):
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            if method in {"get", "post", "put", "patch", "delete"}:
                yield path, method, op


def test_every_operation_documents_its_errors_with_one_body(schema):
    assert set(schema["components"]["schemas"]["Error"]["required"]) == {"detail", "code"}
    for path, method, op in _operations(schema):
        responses = op["responses"]
        errors = {code: r for code, r in responses.items() if code.startswith(("4", "5"))}
        assert "401" in errors, (method, path)
        if "{" in path:
            assert "404" in errors, (method, path)
        if method != "get":
            assert {"400", "403"} <= set(errors), (method, path)
        for code, response in errors.items():
            assert response["content"]["application/json"]["schema"]["$ref"] == ERROR_REF, (method, path, code)
        if method == "get":
            assert "201" not in responses, path  # a GET creates nothing
    upload = schema["paths"]["/api/v1/models/{model_name}/versions/"]["post"]["responses"]
    assert "413" in upload


def test_nullable_fields_are_marked_and_really_null(schema, alice_api, alice, team_a):
    components = schema["components"]["schemas"]
    assert components["Event"]["properties"]["actor"].get("nullable") is True
    assert components["Alert"]["properties"]["acknowledged_by"].get("nullable") is True
    assert components["Version"]["properties"]["created_by"].get("nullable") is True
    assert "nullable" not in components["Event"]["properties"]["object_type"]
    alert, _ = alert_raise(kind="canary_rollback", reason="p99", endpoint="ctr", rollout_id=1, team=team_a)
    body = alice_api.get(f"/api/v1/alerts/{alert.pk}/").json()
    assert body["acknowledged_by"] is None
    assert Event.objects.filter(actor__isnull=True, team=team_a).exists()  # the alert's own event has no actor
    events = alice_api.get("/api/v1/events/").json()["results"]
    assert any(e["actor"] is None for e in events)


@pytest.mark.parametrize(
    "query, parameter",
    [
        ("page_size=null", "page_size"),
        ("page_size=0", "page_size"),
        ("page_size=501", "page_size"),
        ("page_size=1.5", "page_size"),
        ("page=abc", "page"),
        ("page=0", "page"),
        ("status=bogus", "status"),
        ("framework=", "framework"),
    ],
)
def test_invalid_query_parameters_are_400_naming_the_parameter(alice_api, team_a, query, parameter):
    factories.registered_model(team_a, name="m")
    response = alice_api.get(f"/api/v1/versions/?{query}")
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["detail"].startswith(f"{parameter}:") and parameter in body["errors"], body


@pytest.mark.parametrize("value, status", [("null", 400), ("maybe", 400), ("true", 200), ("false", 200), ("1", 200)])
def test_boolean_filters_take_only_true_or_false(alice_api, team_a, value, status):
    response = alice_api.get(f"/api/v1/inference-keys/?active={value}")
    assert response.status_code == status, response.content
    if status == 400:
        assert response.json()["detail"].startswith("active:")


def test_valid_paging_still_works_and_a_page_past_the_end_is_404(alice_api, team_a):
    for i in range(3):
        factories.registered_model(team_a, name=f"m{i}")
    page = alice_api.get("/api/v1/models/?page_size=2&page=2").json()
    assert page["count"] == 3 and len(page["results"]) == 1
    past = alice_api.get("/api/v1/models/?page_size=2&page=3")
    assert past.status_code == 404 and past.json()["code"] == "not_found"


@pytest.mark.parametrize("path", ["/api/v1/nope/", "/api/v2/models/", "/api/", "/api/v1/models/x/y/z/"])
def test_unmatched_api_paths_answer_json_404(alice_api, path):
    response = alice_api.get(path)
    assert response.status_code == 404 and response["Content-Type"].startswith("application/json")
    assert response.json() == {"detail": f"No API route for GET {path}.", "code": "not_found"}


def test_unmatched_pages_stay_html(alice):
    client = Client()
    client.force_login(alice)
    response = client.get("/no-such-page/")
    assert response.status_code == 404 and response["Content-Type"].startswith("text/html")


def test_docs_pages_reference_only_local_assets(alice):
    client = Client()
    client.force_login(alice)
    for url in ("/api/docs/", "/api/redoc/"):
        html = client.get(url).content.decode()
        assert "/static/drf_spectacular_sidecar/" in html, url
        assert "cdn.jsdelivr.net" not in html and "unpkg.com" not in html, url


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_swagger_ui_renders_offline(live_server, browser_page, alice):
    """Every request that is not to the test server is aborted (no network): Swagger UI
    must still render the operations from its locally served assets."""
    server = urlparse(live_server.url)
    blocked: list[str] = []

    def route(route_):
        url = urlparse(route_.request.url)
        if url.hostname == server.hostname and url.port == server.port:
            return route_.continue_()
        blocked.append(route_.request.url)
        return route_.abort()

    page = browser_page
    page.route("**/*", route)
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "pw-for-tests-only")
    page.click("button[type=submit]")
    page.goto(f"{live_server.url}/api/docs/")
    page.wait_for_selector(".opblock-summary-path", timeout=20_000)
    paths = page.locator(".opblock-summary-path").all_inner_texts()
    assert any("/api/v1/models/" in p for p in paths), paths
    assert page.locator(".swagger-ui .info .title").inner_text().startswith("modelplane API")
    assert blocked == []  # nothing even tried to leave the server
    page.goto(f"{live_server.url}/api/redoc/")
    page.wait_for_selector("redoc [role=menuitem], .menu-content", timeout=20_000)
    assert blocked == []


def test_every_operation_is_tagged_by_its_area(schema):
    """All 76 operations sat under one "v1" tag. Each now has one tag, a declared
    one with a description, and the docs group the areas a user looks for."""
    declared = {tag["name"]: tag.get("description", "") for tag in schema["tags"]}
    assert all(declared.values()), declared
    used = {}
    for path, method, op in _operations(schema):
        assert op.get("tags") and len(op["tags"]) == 1, (method, path, op.get("tags"))
        (tag,) = op["tags"]
        assert tag in declared and tag != "v1", (method, path, tag)
        used.setdefault(tag, []).append(f"{method.upper()} {path}")
    assert {"registry", "builds", "deployments", "keys", "rollouts", "releases", "monitoring", "alerts"} <= set(used)
    assert {"experiments", "feedback", "teams", "training", "audit"} <= set(used)
    assert set(used) == set(declared), f"declared but unused: {set(declared) - set(used)}"
    # nested paths go with what they act on
    assert "POST /api/v1/endpoints/{name}/rollouts/" in used["rollouts"]
    assert "GET /api/v1/versions/{version_id}/builds/" in used["builds"]
    assert "POST /api/v1/models/{model_name}/versions/" in used["registry"]
