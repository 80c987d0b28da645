"""Alerts: dedupe per rollout, acknowledge/resolve with roles, channels, delivery attempts,
the API, the alerts page and the banner on every page."""

import pytest
from django.core import mail

from harness import factories
from kernel.errors import Conflict, Forbidden
from monitoring.models import Alert, DeliveryStatus, NotificationChannel, NotificationDelivery
from monitoring.services.alerts import alert_acknowledge, alert_raise, alert_resolve
from monitoring.services.notifications import notification_deliver, notify_backoff
from monitoring.services.store import samples_store
from registry.models import Event, Role

pytestmark = pytest.mark.django_db


def _raise(team, **extra):
    fields = dict(
        kind="canary_rollback",
        reason="candidate p99 31 ms over the SLO 25 ms",
        severity="critical",
        endpoint="ctr",
        rollout_id=41,
        team=team,
        evidence={"p99_ms": 31},
    )
    fields.update(extra)
    return alert_raise(**fields)


def _sends(queued) -> list:
    """On-commit callbacks that send notifications (not the audit trail's log lines)."""
    return [c for c in queued if not c.__qualname__.startswith("event_record.")]


def test_alert_is_deduplicated_per_rollout_and_kind(team_a, django_capture_on_commit_callbacks):
    NotificationChannel.objects.create(team=team_a, kind="webhook", target="http://127.0.0.1:9/hook")
    with django_capture_on_commit_callbacks() as queued:
        alert, notified = _raise(team_a)
    assert notified and len(_sends(queued)) == 1
    with django_capture_on_commit_callbacks() as queued_again:
        again, notified_again = _raise(team_a, evidence={"p99_ms": 35})
    assert again.pk == alert.pk and not notified_again and _sends(queued_again) == []
    again.refresh_from_db()
    assert again.occurrences == 2 and again.evidence == {"p99_ms": 35}
    other, _ = _raise(team_a, rollout_id=42)
    assert other.pk != alert.pk and Alert.objects.count() == 2
    assert Event.objects.filter(object_type="monitoring.alert", action="alert_raised").count() == 2
    assert again.links["alert"].endswith(f"/monitoring/alerts/{alert.pk}/")


def test_resolved_alert_raised_again_reopens_and_notifies_a_new_round(
    team_a, alice, django_capture_on_commit_callbacks
):
    NotificationChannel.objects.create(team=team_a, kind="email", target="oncall@example.test")
    alert, _ = _raise(team_a)
    alert_resolve(user=alice, alert=alert)
    with django_capture_on_commit_callbacks() as queued:
        reopened, notified = _raise(team_a)
    assert notified and len(_sends(queued)) == 1 and reopened.status == "open" and reopened.notify_round == 2


def test_acknowledge_needs_a_developer_of_the_team(team_a, alice, bob, staff):
    alert, _ = _raise(team_a)
    viewer = factories.user("vera")
    factories.member(viewer, team_a, Role.VIEWER)
    for outsider in (bob, viewer):
        with pytest.raises(Forbidden):
            alert_acknowledge(user=outsider, alert=alert)
    alert = alert_acknowledge(user=alice, alert=alert, note="looking")
    assert alert.status == "acknowledged" and alert.acknowledged_by == alice
    with pytest.raises(Conflict) as exc:
        alert_acknowledge(user=alice, alert=alert)
    assert exc.value.code == "alert_not_open"
    platform_alert, _ = alert_raise(kind="scrape_failed", reason="gateway unreachable")
    with pytest.raises(Forbidden):
        alert_acknowledge(user=alice, alert=platform_alert)
    assert alert_acknowledge(user=staff, alert=platform_alert).status == "acknowledged"


def test_webhook_delivery_failure_is_recorded_and_retried_until_success(team_a, webhook_receiver, settings):
    """A real local receiver answers 500 then 200: two attempts, both visible."""
    settings.OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]  # the receiver is local: the operator allows it
    webhook_receiver.statuses = [500]
    alert, _ = _raise(team_a)
    args = dict(alert_id=alert.pk, kind="webhook", target=webhook_receiver.url, notify_round=1)
    outcome, wait_s = notification_deliver(**args)
    assert outcome == "retry" and wait_s == notify_backoff(1) > 0
    assert notify_backoff(3) == 4 * notify_backoff(1)
    assert notification_deliver(**args) == ("delivered", 0.0)
    assert notification_deliver(**args) == ("skipped", 0.0)  # a duplicate task does nothing
    attempts = list(
        NotificationDelivery.objects.filter(alert=alert)
        .order_by("attempt")
        .values_list("attempt", "status", "response_code")
    )
    assert attempts == [(1, DeliveryStatus.FAILED, 500), (2, DeliveryStatus.DELIVERED, 200)]
    body = webhook_receiver.received[-1]
    assert "ctr" in body["text"] and "CRITICAL" in body["text"] and body["alert"]["rollout_id"] == 41
    assert body["alert"]["evidence"] == {"p99_ms": 31}


def test_delivery_gives_up_after_max_attempts(team_a, settings):
    settings.MONITORING_NOTIFY_MAX_ATTEMPTS = 2
    settings.OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    alert, _ = _raise(team_a)
    args = dict(alert_id=alert.pk, kind="webhook", target="http://127.0.0.1:9/closed", notify_round=1)
    assert notification_deliver(**args)[0] == "retry"
    assert notification_deliver(**args)[0] == "gave_up"
    assert notification_deliver(**args)[0] == "skipped"
    assert list(
        NotificationDelivery.objects.filter(alert=alert).values_list("status", flat=True).order_by("attempt")
    ) == [DeliveryStatus.FAILED, DeliveryStatus.GAVE_UP]
    assert "Connection refused" in NotificationDelivery.objects.filter(alert=alert).first().error


def test_email_channel_uses_djangos_email_backend(team_a, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    alert, _ = _raise(team_a)
    assert (
        notification_deliver(alert_id=alert.pk, kind="email", target="oncall@example.test", notify_round=1)[0]
        == "delivered"
    )
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["oncall@example.test"]
    assert "canary_rollback" in mail.outbox[0].subject and "31 ms" in mail.outbox[0].body


def test_channels_for_alert_team_global_severity_and_env(team_a, team_b, settings):
    from monitoring.selectors.alerts import channels_for_alert

    settings.MONITORING_ALERT_WEBHOOKS = ["http://hooks.example.test/all"]
    NotificationChannel.objects.create(team=team_a, kind="webhook", target="http://a.example.test/")
    NotificationChannel.objects.create(team=team_b, kind="webhook", target="http://b.example.test/")
    NotificationChannel.objects.create(team=None, kind="email", target="platform@example.test", min_severity="critical")
    warning, _ = _raise(team_a, severity="warning")
    assert channels_for_alert(warning) == [
        ("webhook", "http://a.example.test/"),
        ("webhook", "http://hooks.example.test/all"),
    ]
    critical, _ = _raise(team_a, rollout_id=99)
    assert ("email", "platform@example.test") in channels_for_alert(critical)


def test_alerts_api_scoping_and_actions(alice_api, bob_api, team_a):
    alert, _ = _raise(team_a)
    assert bob_api.get("/api/v1/alerts/").json()["count"] == 0
    assert bob_api.post(f"/api/v1/alerts/{alert.pk}/acknowledge/").status_code == 404
    listed = alice_api.get("/api/v1/alerts/", {"status": "open"}).json()
    assert listed["count"] == 1 and listed["results"][0]["reason"].startswith("candidate p99")
    response = alice_api.post(f"/api/v1/alerts/{alert.pk}/acknowledge/", {"note": "on it"}, format="json")
    assert response.status_code == 200 and response.json()["status"] == "acknowledged"
    again = alice_api.post(f"/api/v1/alerts/{alert.pk}/acknowledge/")
    assert again.status_code == 409 and again.json()["code"] == "alert_not_open"
    assert alice_api.post(f"/api/v1/alerts/{alert.pk}/resolve/").json()["status"] == "resolved"
    assert alice_api.get("/api/v1/alerts/", {"status": "nope"}).status_code == 400


def test_channels_api_needs_team_admin_and_valid_targets(api_for, alice_api, team_a, alice):
    admin = factories.user("ada")
    factories.member(admin, team_a, Role.ADMIN)
    api = api_for(admin)
    created = api.post(
        "/api/v1/notification-channels/",
        {"team": team_a.name, "kind": "webhook", "target": "https://hooks.example.test/x"},
        format="json",
    )
    assert created.status_code == 201, created.content
    bad = api.post(
        "/api/v1/notification-channels/",
        {"team": team_a.name, "kind": "email", "target": "not-an-address"},
        format="json",
    )
    assert bad.status_code == 400 and "target" in bad.json()["detail"]
    dup = api.post(
        "/api/v1/notification-channels/",
        {"team": team_a.name, "kind": "webhook", "target": "https://hooks.example.test/x"},
        format="json",
    )
    assert dup.status_code == 409
    denied = alice_api.post(
        "/api/v1/notification-channels/",
        {"team": team_a.name, "kind": "webhook", "target": "https://x.example.test/"},
        format="json",
    )
    assert denied.status_code == 400 and "team" in denied.json()["detail"]  # not a team alice administers
    assert alice_api.get("/api/v1/notification-channels/").json()["count"] == 1
    assert api.delete(f"/api/v1/notification-channels/{created.json()['id']}/").status_code == 204


def test_alert_pages_banner_and_htmx_acknowledge(client, alice, bob, team_a):
    alert, _ = _raise(team_a)
    client.force_login(alice)
    page = client.get("/models/")  # any dashboard page shows the banner
    assert page.status_code == 200 and b'id="alert-banner"' in page.content and b"1 open alert" in page.content
    listing = client.get("/monitoring/alerts/?status=open")
    assert listing.status_code == 200 and b"canary_rollback" in listing.content and b"Acknowledge" in listing.content
    row = client.post(f"/monitoring/alerts/{alert.pk}/acknowledge/", HTTP_HX_REQUEST="true")
    assert row.status_code == 200 and b"acknowledged" in row.content and b"<html" not in row.content
    assert b'id="alert-banner"' not in client.get("/models/").content
    detail = client.get(f"/monitoring/alerts/{alert.pk}/")
    assert (
        detail.status_code == 200
        and b"Notification attempts" in detail.content
        and b"alert_acknowledged" in detail.content
    )
    client.force_login(bob)
    assert client.get(f"/monitoring/alerts/{alert.pk}/").status_code == 404
    assert b'id="alert-banner"' not in client.get("/models/").content


def test_overview_page_lists_endpoints_with_charts(client, alice, team_a):
    from django.utils import timezone

    samples_store(
        rows=[
            ("ctr", "stable", "request_rate", 150.0),
            ("ctr", "canary", "request_rate", 10.0),
            ("ctr", "canary", "error_rate", 0.02),
        ],
        at=timezone.now(),
        team_ids={"ctr": team_a.pk},
    )
    client.force_login(alice)
    page = client.get("/monitoring/")
    assert page.status_code == 200
    assert b'data-endpoint="ctr"' in page.content and b"chart.umd.min.js" in page.content
    assert b"canary" in page.content and b"150.0" in page.content and b"2.00 %" in page.content
    partial = client.get("/monitoring/", HTTP_HX_REQUEST="true")
    assert b'id="summary"' in partial.content and b"<html" not in partial.content


def test_alert_list_query_count_is_pinned(alice_api, team_a, django_assert_max_num_queries):
    for rollout_id in range(6):
        alert, _ = _raise(team_a, rollout_id=rollout_id)
        NotificationDelivery.objects.create(
            alert=alert,
            notify_round=1,
            kind="webhook",
            target="http://x.test/",
            attempt=1,
            status=DeliveryStatus.DELIVERED,
            response_code=200,
        )
    with django_assert_max_num_queries(6):
        response = alice_api.get("/api/v1/alerts/")
    assert response.json()["count"] == 6 and all(len(a["deliveries"]) == 1 for a in response.json()["results"])
