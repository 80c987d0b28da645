import pytest
from django.test import Client

from harness import factories
from registry.models import Event, RegisteredModel, VersionStatus
from registry.services.catalog import model_create, version_create_from_upload

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_web(staff):
    client = Client()
    client.force_login(staff)
    return client


@pytest.mark.parametrize(
    "url",
    ["registeredmodel", "modelversion", "build", "artifact", "event", "teammembership"],
)
def test_admin_changelists_render(admin_web, team_a, url):
    factories.registered_model(team_a, name="listed")
    response = admin_web.get(f"/admin/registry/{url}/")
    assert response.status_code == 200


def test_admin_add_model_goes_through_the_service(admin_web, team_a):
    response = admin_web.post(
        "/admin/registry/registeredmodel/add/",
        {
            "name": "via-admin",
            "task": "ctr",
            "team": team_a.pk,
            "description": "",
            "versions-TOTAL_FORMS": 0,
            "versions-INITIAL_FORMS": 0,
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    model = RegisteredModel.objects.get(name="via-admin")
    assert Event.objects.filter(
        object_type="registry.registeredmodel", object_id=str(model.pk), action="created"
    ).exists()


def test_admin_delete_action_refuses_models_in_use(admin_web, staff, team_a, onnx_path):
    used = factories.registered_model(team_a, name="used")
    data = onnx_path.read_bytes()
    version_create_from_upload(user=staff, model=used, filename="m.onnx", chunks=[data])
    unused = factories.registered_model(team_a, name="unused")
    admin_web.post(
        "/admin/registry/registeredmodel/", {"action": "delete_unused", "_selected_action": [used.pk, unused.pk]}
    )
    assert list(RegisteredModel.objects.values_list("name", flat=True)) == ["used"]


def test_admin_archive_action_writes_events(admin_web, staff, team_a, onnx_path):
    model = factories.registered_model(team_a, name="m")
    data = onnx_path.read_bytes()
    version = version_create_from_upload(user=staff, model=model, filename="m.onnx", chunks=[data])
    admin_web.post("/admin/registry/modelversion/", {"action": "archive", "_selected_action": [version.pk]})
    version.refresh_from_db()
    assert version.status == VersionStatus.ARCHIVED
    event = Event.objects.get(object_type="registry.modelversion", action="status_changed")
    assert (event.from_state, event.to_state, event.actor) == ("registered", "archived", staff)


def test_audit_events_are_read_only_in_admin(admin_web, staff, team_a):
    model_create(user=staff, name="x", team=team_a)
    event = Event.objects.first()
    assert admin_web.get("/admin/registry/event/add/").status_code == 403
    response = admin_web.post(f"/admin/registry/event/{event.pk}/change/", {"reason": "tampered"})
    event.refresh_from_db()
    assert event.reason == "" and response.status_code in (403, 200)
