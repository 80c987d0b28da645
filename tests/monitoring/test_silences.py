"""Silences (Alertmanager's) and grouped notifications: a silenced alert is
recorded and shown but not notified; only the alert's own team's active silences match;
alerts of one (team, endpoint, kind) within the group window go out as one notification."""

from datetime import timedelta

import pytest
from django.utils import timezone

from kernel.errors import Conflict, Forbidden, InvalidInput
from monitoring.models import Alert, NotificationChannel, Silence
from monitoring.selectors.alerts import alert_list, open_alerts
from monitoring.selectors.silences import silence_matching
from monitoring.services.alerts import alert_raise, notification_plan
from monitoring.services.notifications import alert_payload, notification_deliver
from monitoring.services.silences import silence_create, silence_delete, silence_expire
from registry.models import Event

pytestmark = pytest.mark.django_db
HOOK = "http://127.0.0.1:9/hook"  # nothing listens: these tests never reach a delivery


def _raise(team, **extra):
    fields = dict(
        kind="rollout_rolled_back",
        reason="candidate error rate 6.9 % vs 1.0 %",
        severity="critical",
        endpoint="ctr",
        rollout_id=41,
        team=team,
    )
    fields.update(extra)
    return alert_raise(**fields)[0]


def _sends(queued) -> list:
    return [c for c in queued if not c.__qualname__.startswith("event_record.")]


def _silence(user, team, **extra):
    fields = dict(
        endpoint="ctr", kind="rollout_rolled_back", comment="rolling back by hand", duration=timedelta(hours=2)
    )
    fields.update(extra)
    return silence_create(user=user, team=team, **fields)


def test_a_silenced_alert_is_recorded_but_not_notified(team_a, alice, django_capture_on_commit_callbacks):
    NotificationChannel.objects.create(team=team_a, kind="webhook", target=HOOK)
    silence = _silence(alice, team_a)
    with django_capture_on_commit_callbacks() as queued:
        alert = _raise(team_a)
    assert _sends(queued) == [] and alert.silenced_by == silence and alert.status == "open"
    assert Alert.objects.filter(pk=alert.pk, silenced_by=silence).exists()
    with django_capture_on_commit_callbacks() as other_queued:  # another endpoint: not matched
        other = _raise(team_a, endpoint="search", rollout_id=7)
    assert len(_sends(other_queued)) == 1 and other.silenced_by is None


def test_the_banner_leaves_out_alerts_an_active_silence_holds(team_a, alice):
    alert = _raise(team_a)
    assert list(open_alerts(user=alice)) == [alert]
    silence = _silence(alice, team_a)
    assert list(open_alerts(user=alice)) == [] and list(alert_list(user=alice)) == [alert]  # still listed
    silence_expire(user=alice, silence=silence)
    assert list(open_alerts(user=alice)) == [alert]


def test_another_teams_silence_never_silences_my_alerts(team_a, team_b, bob, alice):
    _silence(bob, team_b)  # the same matchers, team B's
    alert = _raise(team_a)
    assert alert.silenced_by is None and silence_matching(alert) is None
    with pytest.raises(Forbidden):  # nor can B silence A's alerts
        _silence(bob, team_a)


def test_expired_and_pending_silences_do_not_silence(team_a, alice):
    now = timezone.now()
    pending = _silence(alice, team_a, starts_at=now + timedelta(hours=1))
    expired = _silence(alice, team_a, severity="critical")
    silence_expire(user=alice, silence=expired)
    alert = _raise(team_a)
    assert alert.silenced_by is None
    assert silence_matching(alert, now + timedelta(hours=1, seconds=1)) == pending  # once it starts, it matches
    with pytest.raises(Conflict):
        silence_expire(user=alice, silence=expired)


def test_matchers_are_exact_and_empty_means_any(team_a, alice):
    alert = _raise(team_a)
    assert silence_matching(alert) is None
    by_severity = _silence(alice, team_a, endpoint="", kind="", severity="critical")
    assert silence_matching(alert) == by_severity
    silence_expire(user=alice, silence=by_severity)
    _silence(alice, team_a, endpoint="ctr-2", kind="")  # exact: no prefix matching
    _silence(alice, team_a, endpoint="", kind="rollout_paused")
    _silence(alice, team_a, endpoint="ctr", severity="warning")
    assert silence_matching(alert) is None


def test_create_marks_open_matching_alerts_and_every_change_is_audited(team_a, alice):
    alert = _raise(team_a)
    resolved = _raise(team_a, rollout_id=42)
    Alert.objects.filter(pk=resolved.pk).update(status="resolved")
    silence = _silence(alice, team_a)
    alert.refresh_from_db()
    resolved.refresh_from_db()
    assert alert.silenced_by == silence and resolved.silenced_by is None
    silence_expire(user=alice, silence=silence)
    silence.refresh_from_db()
    assert silence.ends_at <= timezone.now() and silence.expired_by == alice
    silence_id = silence.pk
    silence_delete(user=alice, silence=silence)
    trail = Event.objects.filter(object_type="monitoring.silence", object_id=str(silence_id)).order_by("time", "id")
    assert [(e.action, e.to_state) for e in trail] == [
        ("created", "active"),
        ("status_changed", "expired"),
        ("deleted", ""),
    ]
    assert trail[0].actor == alice and trail[0].reason == "rolling back by hand"
    alert.refresh_from_db()
    assert alert.silenced_by is None  # the silence is gone; the alert stays


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(endpoint="", kind="", severity=""), "at least one matcher"),
        (dict(comment=" "), "say why"),
        (dict(severity="fatal"), "severity"),
        (dict(duration=timedelta(days=31)), "30 days"),
        (dict(duration=None, ends_at=None), "ends_at or a duration"),
    ],
)
def test_bad_silences_are_refused_with_the_reason(team_a, alice, fields, message):
    with pytest.raises(InvalidInput) as exc:
        _silence(alice, team_a, **fields)
    assert message in exc.value.detail
    assert not Silence.objects.exists()


def test_silences_api_create_list_expire_delete(alice_api, bob_api, team_a, alice):
    alert = _raise(team_a)
    created = alice_api.post(
        "/api/v1/silences/",
        {
            "team": team_a.name,
            "endpoint": "ctr",
            "check": "rollout_rolled_back",
            "duration_s": 3600,
            "comment": "fixing",
        },
        format="json",
    )
    assert created.status_code == 201, created.json()
    body = created.json()
    assert body["state"] == "active" and body["check"] == "rollout_rolled_back" and body["created_by"] == "alice"
    assert alice_api.get(f"/api/v1/alerts/{alert.pk}/").json()["silenced_by"] == body["id"]
    assert bob_api.get("/api/v1/silences/").json()["count"] == 0
    assert bob_api.post(f"/api/v1/silences/{body['id']}/expire/").status_code == 404
    refused = bob_api.post(
        "/api/v1/silences/", {"team": team_a.name, "endpoint": "ctr", "duration_s": 3600, "comment": "x"}, format="json"
    )
    assert refused.status_code == 400 and "team" in str(refused.json())
    bad = alice_api.post("/api/v1/silences/", {"team": team_a.name, "duration_s": 3600, "comment": "x"}, format="json")
    assert bad.status_code == 400 and bad.json()["code"] == "no_matcher"
    far = alice_api.post(
        "/api/v1/silences/",
        {
            "team": team_a.name,
            "endpoint": "ctr",
            "starts_at": "9999-12-31T23:59:59Z",
            "duration_s": 3600,
            "comment": "x",
        },
        format="json",
    )
    assert far.status_code == 400 and far.json()["code"] == "invalid"  # bounded at the door, never an overflow
    assert alice_api.get("/api/v1/silences/", {"state": "active"}).json()["count"] == 1
    assert alice_api.get("/api/v1/silences/", {"state": "nope"}).status_code == 400
    expired = alice_api.post(f"/api/v1/silences/{body['id']}/expire/")
    assert expired.status_code == 200 and expired.json()["state"] == "expired"
    assert alice_api.post(f"/api/v1/silences/{body['id']}/expire/").status_code == 409
    assert alice_api.delete(f"/api/v1/silences/{body['id']}/").status_code == 204
    assert not Silence.objects.exists()


# --- grouping -----------------------------------------------------------------------------------
def test_notification_plan_groups_within_the_window():
    now = timezone.now()
    alert = Alert(kind="k")
    sent = Alert(notified_at=now - timedelta(seconds=100))
    ahead = Alert(notified_at=now + timedelta(seconds=100))
    old = Alert(notified_at=now - timedelta(seconds=301))
    assert notification_plan(alert=alert, carrier=None, now=now, window_s=300) == ("now", now)
    assert notification_plan(alert=alert, carrier=old, now=now, window_s=300) == ("now", now)
    assert notification_plan(alert=alert, carrier=sent, now=now, window_s=300) == (
        "later",
        sent.notified_at + timedelta(seconds=300),
    )
    assert notification_plan(alert=alert, carrier=ahead, now=now, window_s=300) == ("carried", ahead.notified_at)
    assert notification_plan(alert=alert, carrier=sent, now=now, window_s=0) == ("now", now)
    graver = Alert(kind="k", severity="critical")
    assert notification_plan(
        alert=graver, carrier=Alert(notified_at=ahead.notified_at, severity="warning"), now=now, window_s=300
    ) == ("later", ahead.notified_at)


def test_alerts_of_one_endpoint_and_kind_go_out_as_one_notification(
    team_a, settings, django_capture_on_commit_callbacks
):
    settings.MONITORING_ALERT_GROUP_WINDOW_S = 300
    NotificationChannel.objects.create(team=team_a, kind="webhook", target=HOOK)
    with django_capture_on_commit_callbacks() as first_sends:
        first = _raise(team_a, rollout_id=1)
    with django_capture_on_commit_callbacks() as second_sends:
        second = _raise(team_a, rollout_id=2)
    with django_capture_on_commit_callbacks() as third_sends:
        third = _raise(team_a, rollout_id=3)
    with django_capture_on_commit_callbacks() as elsewhere_sends:
        elsewhere = _raise(team_a, rollout_id=4, endpoint="search")
    # the first at once; the second at the end of the first's window, carrying the third
    assert len(_sends(first_sends)) == 1 and first.notified_with is None
    assert len(_sends(second_sends)) == 1 and second.notified_at == first.notified_at + timedelta(seconds=300)
    assert _sends(third_sends) == [] and third.notified_with == second
    assert len(_sends(elsewhere_sends)) == 1 and elsewhere.notified_with is None  # another group key
    payload = alert_payload(second)
    assert [g["id"] for g in payload["grouped"]] == [third.pk] and "(+1 more rollout_rolled_back on ctr" in payload[
        "text"
    ]
    assert payload["group"] == {"key": f"{team_a.pk}:ctr:rollout_rolled_back", "window_s": 300}
    # the carried alert's own delivery (were one queued) sends nothing
    assert notification_deliver(alert_id=third.pk, kind="webhook", target=HOOK, notify_round=1) == ("skipped", 0.0)


def test_a_silence_created_while_a_notification_waits_holds_it_back(team_a, alice, settings):
    settings.MONITORING_ALERT_GROUP_WINDOW_S = 300
    _raise(team_a, rollout_id=1)
    waiting = _raise(team_a, rollout_id=2)  # queued for the end of the window
    silence = _silence(alice, team_a)
    assert notification_deliver(alert_id=waiting.pk, kind="webhook", target=HOOK, notify_round=1) == ("skipped", 0.0)
    waiting.refresh_from_db()
    assert waiting.silenced_by == silence


def test_silence_form_prefills_from_an_alert_and_says_what_is_wrong(client, alice, bob, team_a):
    alert = _raise(team_a)
    client.force_login(alice)
    page = client.get(f"/monitoring/alerts/silences/?alert={alert.pk}").content.decode()
    assert 'value="rollout_rolled_back"' in page and 'value="ctr"' in page and f"alert {alert.pk}" in page
    empty = client.post(
        "/monitoring/alerts/silences/new/",
        {"team": team_a.pk, "endpoint": "", "check": "", "severity": "", "duration_s": "3600", "comment": "x"},
    )
    assert empty.status_code == 400 and "at least one matcher" in empty.content.decode()
    made = client.post(
        "/monitoring/alerts/silences/new/",
        {
            "team": team_a.pk,
            "endpoint": "ctr",
            "duration_s": "3600",
            "comment": "fixing",
            "next": "/monitoring/alerts/",
        },
    )
    assert made.status_code == 302 and made["Location"] == "/monitoring/alerts/" and Silence.objects.count() == 1
    client.force_login(bob)  # another team: A's alert is a 404 and A is not a team bob can pick
    assert client.get(f"/monitoring/alerts/silences/?alert={alert.pk}").status_code == 404
    refused = client.post(
        "/monitoring/alerts/silences/new/", {"team": team_a.pk, "endpoint": "ctr", "duration_s": "3600", "comment": "x"}
    )
    assert refused.status_code == 400 and Silence.objects.count() == 1
    assert "fixing" not in client.get("/monitoring/alerts/silences/").content.decode()  # nor sees A's silences
