import pytest
from django.utils import timezone

from config.models import ComponentHeartbeat

pytestmark = pytest.mark.django_db


def test_healthz_names_each_component(client):
    response = client.get("/healthz")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["status"] == "ok"
    assert body["components"]["database"]["state"] == "up"
    assert body["components"]["broker"]["state"] == "up"


def test_healthz_is_503_when_the_broker_does_not_answer(client, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["components"]["broker"]["state"] == "down"


def test_healthz_waits_for_expected_background_components(client, settings):
    settings.HEALTHZ_EXPECT = ["worker", "beat"]
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["components"]["worker"] == {"state": "down", "error": "RuntimeError: no heartbeat yet"}
    for name in ("worker", "beat"):
        ComponentHeartbeat.objects.create(name=name, seen_at=timezone.now())
    assert client.get("/healthz").status_code == 200
    ComponentHeartbeat.objects.filter(name="worker").update(seen_at=timezone.now() - timezone.timedelta(minutes=5))
    response = client.get("/healthz")
    assert response.status_code == 503 and "last heartbeat" in response.json()["components"]["worker"]["error"]


def test_heartbeat_task_records_worker_and_beat():
    from config.tasks import heartbeat

    heartbeat()
    assert set(ComponentHeartbeat.objects.values_list("name", flat=True)) == {"worker", "beat"}
