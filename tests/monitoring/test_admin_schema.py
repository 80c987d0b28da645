"""Admin console pages of monitoring and the OpenAPI schema of its API."""

import pytest
from django.utils import timezone

from monitoring.models import Alert
from monitoring.services.alerts import alert_raise
from monitoring.services.store import samples_store

pytestmark = pytest.mark.django_db


def test_admin_pages_render_and_acknowledge_action_uses_the_service(client, staff, team_a):
    alert, _ = alert_raise(kind="canary_rollback", reason="p99 over SLO", endpoint="ctr", rollout_id=1, team=team_a)
    samples_store(rows=[("ctr", "stable", "request_rate", 1.0)], at=timezone.now())
    client.force_login(staff)
    for name in (
        "metricsample",
        "metricrollup",
        "scrapestate",
        "verdict",
        "alert",
        "notificationchannel",
        "notificationdelivery",
    ):
        assert client.get(f"/admin/monitoring/{name}/").status_code == 200, name
    assert client.get(f"/admin/monitoring/alert/{alert.pk}/change/").status_code == 200
    response = client.post("/admin/monitoring/alert/", {"action": "acknowledge", "_selected_action": [alert.pk]})
    assert response.status_code == 302
    alert = Alert.objects.get(pk=alert.pk)
    assert alert.status == "acknowledged" and alert.acknowledged_by == staff


def test_openapi_schema_lists_the_monitoring_endpoints(alice_api):
    response = alice_api.get("/api/schema/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    for path in (
        "/api/v1/metrics/",
        "/api/v1/alerts/",
        "/api/v1/alerts/{id}/acknowledge/",
        "/api/v1/verdicts/",
        "/api/v1/notification-channels/",
        "/api/v1/score-samples/",
        "/api/v1/silences/",
        "/api/v1/silences/{id}/expire/",
    ):
        assert path in paths, path
    params = {p["name"] for p in paths["/api/v1/metrics/"]["get"]["parameters"]}
    assert {"endpoint", "variant", "metric", "since"} <= params


def test_admin_names_are_proper_english_plurals(client, staff):
    """The admin index lists "Notification deliveries", not Django's default "+s"."""
    import re

    from django.contrib import admin

    client.force_login(staff)
    page = client.get("/admin/").content.decode()
    assert "Notification deliveries" in page and "deliverys" not in page.lower()
    for model in admin.site._registry:
        plural = str(model._meta.verbose_name_plural)
        assert not re.search(r"[^aeiou]ys$|(ss|sh|ch|x)s$", plural), f"{model._meta.label}: {plural!r}"
