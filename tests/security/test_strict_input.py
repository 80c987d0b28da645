"""Input the schema calls invalid is refused with a 400 that says where
(the schemathesis findings on the merged API, each reproduced here with the request it sent):
a number where the schema says string, NUL characters (PostgreSQL text cannot hold them:
they used to reach a lookup and end in a 500) in a JSON body, a query parameter, the URL
path or a dashboard form, JSON nested past any sane depth, and a garbage `ordering`."""

import json
from datetime import UTC, datetime
from urllib.parse import urlencode

import pytest
from django.test import Client
from drf_spectacular.generators import SchemaGenerator

from harness import factories
from monitoring.services.alerts import alert_raise
from registry.models import RegisteredModel, Role

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_api(team_a, api_for):
    admin = factories.user("ada")
    factories.member(admin, team_a, Role.ADMIN)
    return api_for(admin)


@pytest.mark.parametrize("method", ["put", "patch"])
def test_a_number_where_the_schema_says_string_is_a_400_and_nothing_changes(admin_api, team_a, method):
    factories.registered_model(team_a, name="strict-model", description="before")
    response = getattr(admin_api, method)(
        "/api/v1/models/strict-model/", {"description": 0, "task": "ctr"}, format="json"
    )
    assert response.status_code == 400, response.content
    assert response.json()["detail"] == "description: give a string, not a int."
    assert RegisteredModel.objects.get(name="strict-model").description == "before"


def test_an_alert_note_must_be_a_string(admin_api, team_a):
    alert, _ = alert_raise(kind="canary_rollback", reason="p99 over SLO", endpoint="e", rollout_id=1, team=team_a)
    response = admin_api.post(f"/api/v1/alerts/{alert.pk}/resolve/", {"note": 0}, format="json")
    assert response.status_code == 400 and response.json()["detail"] == "note: give a string, not a int."
    alert.refresh_from_db()
    assert alert.status == "open"
    assert admin_api.post(f"/api/v1/alerts/{alert.pk}/resolve/", {"note": "fixed"}, format="json").status_code == 200


def test_nul_in_a_json_body_is_a_400_naming_where(admin_api, team_a):
    body = {"team": "\x1ao\x00", "kind": "webhook", "target": "https://hooks.example.com/x", "min_severity": "info"}
    response = admin_api.post("/api/v1/notification-channels/", body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["detail"] == "team: NUL characters (U+0000) are not allowed."
    nested = admin_api.post("/api/v1/notification-channels/", {"errors": {"a": [{"b": "x\x00"}]}}, format="json")
    assert nested.status_code == 400 and nested.json()["detail"].startswith("errors.a[0].b:")
    key = admin_api.post("/api/v1/notification-channels/", {"te\x00am": "x"}, format="json")
    assert key.status_code == 400 and "\\u0000" in key.json()["detail"]


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/events/?action=x%00y",
        "/api/v1/events/?ordering=%00",
        "/api/v1/rollout-forecast/?endpoint=a%00b",
    ],
)
def test_nul_in_a_query_is_a_json_400_before_any_query(admin_api, path):
    response = admin_api.get(path)
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "nul_character"


@pytest.mark.parametrize("path", ["/api/v1/endpoints/a%00b/", "/api/v1/inference-keys/%00/revoke/"])
def test_nul_in_an_api_path_is_a_json_404(admin_api, path):
    response = admin_api.get(path)
    assert response.status_code == 404 and response.json()["detail"].startswith("URL path: NUL")


def test_nul_in_a_dashboard_form_is_a_plain_400(team_a):
    user = factories.user("formy")
    factories.member(user, team_a, Role.ADMIN)
    client = Client()
    client.force_login(user)
    response = client.post(
        "/models/new/",
        urlencode({"name": "x\x00", "team": str(team_a.pk)}),
        content_type="application/x-www-form-urlencoded",
    )
    assert response.status_code == 400 and b"NUL characters" in response.content


def test_json_nested_past_any_sane_depth_is_a_400(admin_api):
    deep = "[" * 100_000 + "]" * 100_000
    response = admin_api.generic("POST", "/api/v1/notification-channels/", deep, content_type="application/json")
    assert response.status_code == 400 and "nested deeper" in response.json()["detail"]
    moderate = (
        json.dumps({"a": "[" * 80 + "]" * 80}).replace('"[', "[").replace(']"', "]")
    )  # 80 levels, under Python's limit
    response = admin_api.generic("POST", "/api/v1/notification-channels/", moderate, content_type="application/json")
    assert response.status_code == 400 and "nested deeper" in response.json()["detail"]


@pytest.mark.parametrize("ordering", ["__", "-", ",", "time,,", "-time__year", "?", "x" * 300, "time%2C-time"])
def test_a_garbage_ordering_is_never_a_500(admin_api, ordering):
    assert admin_api.get(f"/api/v1/events/?ordering={ordering}").status_code in (200, 400)


def test_the_forecast_documents_its_404():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    responses = schema["paths"]["/api/v1/rollout-forecast/"]["get"]["responses"]
    assert {"200", "400", "401", "404"} <= set(responses)


@pytest.mark.parametrize(
    "since, status",
    [
        ("2282-01-31T22:02:08%2B17:54", 200),  # an offset Python takes and PostgreSQL does not: compared in UTC
        ("7746-10-12T12:35:37-19:32", 200),
        ("9999-12-31T23:00:00-05:00", 400),  # past year 9999 in UTC
    ],
)
def test_a_time_with_any_offset_is_compared_in_utc(admin_api, since, status):
    response = admin_api.get(f"/api/v1/events/?since={since}")
    assert response.status_code == status, response.content


def test_metrics_times_with_far_offsets_are_read_in_utc(admin_api):
    far = admin_api.get("/api/v1/metrics/?endpoint=e&since=2026-01-01T00:00:00%2B17:54")
    assert far.status_code in (200, 404), far.content  # never a 500
    assert admin_api.get("/api/v1/metrics/?endpoint=e&since=9999-12-31T23:00:00-05:00").status_code == 400


def test_max_length_counts_the_string_as_sent(admin_api, team_a):
    key = admin_api.post("/api/v1/inference-keys/", {"team": team_a.name, "name": "k"}, format="json").json()
    response = admin_api.post(
        f"/api/v1/inference-keys/{key['id']}/revoke/", {"reason": "\f" + "*" * 2000}, format="json"
    )
    assert response.status_code == 400 and "2000" in response.json()["detail"]
    assert admin_api.get(f"/api/v1/inference-keys/{key['id']}/").json()["active"] is True


def test_feedback_times_are_stored_in_utc():

    from experiments.feedback import FeedbackError, parse_events

    now = datetime(
        2020, 1, 1, tzinfo=UTC
    )  # events must lie in a window around now (gateway/contracts/feedback.schema.json)
    [event] = parse_events(
        [{"event_id": "e1", "type": "click", "unit_key": "u", "time": "2020-01-01T00:00:00+17:54"}], now=now
    )
    assert event["time"].tzinfo == UTC and event["time"].isoformat() == "2019-12-31T06:06:00+00:00"
    with pytest.raises(FeedbackError, match="out of range"):
        parse_events([{"event_id": "e1", "type": "click", "unit_key": "u", "time": "9999-12-31T23:00:00-05:00"}])


@pytest.mark.parametrize("query", ["since=", "until=", "resolution=", "since=%20"])
def test_an_empty_query_parameter_is_a_400_not_its_default(admin_api, query):
    response = admin_api.get(f"/api/v1/metrics/?endpoint=e&{query}")
    assert response.status_code == 400 and "give a value" in response.json()["detail"], response.content
    assert admin_api.get("/api/v1/rollout-forecast/?endpoint=").status_code == 400


@pytest.mark.parametrize("name", ["0-hNiI0_gZe-Xa", "-x", "a" * 65, "a.b"])
def test_an_endpoint_name_its_urls_cannot_hold_is_refused_and_nothing_is_created(admin_api, team_a, name):
    from deployments.models import Endpoint

    factories.pool(team_a, name="strict-pool")
    response = admin_api.post("/api/v1/endpoints/", {"pool": "strict-pool", "name": name}, format="json")
    assert response.status_code == 400 and response.json()["detail"].startswith("name:"), response.content
    assert not Endpoint.objects.exists()
