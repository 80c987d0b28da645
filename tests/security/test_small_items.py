"""Smaller items: redirects stay on this site, logins are throttled, errors
show no server paths, dashboard upload names are checked like the API's."""

import pytest
from django.test import Client
from django.utils import timezone

from harness import factories
from kernel.errors import InvalidInput, scrub_paths
from registry.models import ModelVersion

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice_web(alice):
    client = Client()
    client.force_login(alice)
    return client


@pytest.mark.parametrize(
    "target, expected",
    [
        ("https://evil.example/", "/monitoring/alerts/"),
        ("//evil.example/x", "/monitoring/alerts/"),
        ("javascript:alert(1)", "/monitoring/alerts/"),
        ("https://testserver.evil.example/", "/monitoring/alerts/"),
        ("/monitoring/alerts/{pk}/", "/monitoring/alerts/{pk}/"),
        ("http://testserver/monitoring/alerts/{pk}/", "http://testserver/monitoring/alerts/{pk}/"),
    ],
)
def test_next_redirects_only_to_this_site(alice_web, team_a, target, expected):
    from monitoring.services.alerts import alert_raise

    alert, _ = alert_raise(kind="canary_rollback", reason="p99 over SLO", endpoint="ctr", rollout_id=1, team=team_a)
    response = alice_web.post(f"/monitoring/alerts/{alert.pk}/acknowledge/", {"next": target.format(pk=alert.pk)})
    assert response.status_code == 302
    assert response["Location"] == expected.format(pk=alert.pk)


def test_login_next_stays_on_this_site(client, alice):
    response = client.post(
        "/login/", {"username": "alice", "password": "pw-for-tests-only", "next": "https://evil.example/"}
    )
    assert response.status_code == 302 and response["Location"] == "/models/"


def test_login_locks_out_after_repeated_failures(client, alice, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        wrong = client.post("/login/", {"username": "alice", "password": "guess"})
        assert wrong.status_code == 200 and "correct username and password" in wrong.content.decode()
    locked = client.post("/login/", {"username": "alice", "password": "guess"})
    assert locked.status_code == 429 and "Too many failed logins" in locked.content.decode()
    # now even the right password is refused, for this username from this address
    right = client.post("/login/", {"username": "alice", "password": "pw-for-tests-only"})
    assert right.status_code == 429
    assert client.get("/models/").status_code == 302  # not logged in
    # another user from the same address is not locked out
    factories.user("carol")
    assert client.post("/login/", {"username": "carol", "password": "pw-for-tests-only"}).status_code == 302
    # an operator unlocks
    from django.core.management import call_command

    call_command("axes_reset")
    assert Client().post("/login/", {"username": "alice", "password": "pw-for-tests-only"}).status_code == 302


def test_a_successful_login_resets_the_count(client, alice, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        client.post("/login/", {"username": "alice", "password": "guess"})
    assert client.post("/login/", {"username": "alice", "password": "pw-for-tests-only"}).status_code == 302
    client.post("/logout/")
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert client.post("/login/", {"username": "alice", "password": "guess"}).status_code == 200
    assert client.post("/login/", {"username": "alice", "password": "pw-for-tests-only"}).status_code == 302


def _multipart(filename: str, content: bytes, boundary: str = "XbOuNdArY") -> bytes:
    """A multipart body with the file name exactly as given (Django's test client would
    send only its base name)."""
    return (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
            f"Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + content
        + f"\r\n--{boundary}--\r\n".encode()
    )


@pytest.mark.parametrize("name", ["../../evil.onnx", "sub/model.onnx", "..\\evil.onnx"])
def test_dashboard_upload_refuses_names_with_path_parts_like_the_api(alice_web, alice_api, team_a, onnx_path, name):
    factories.registered_model(team_a, name="ui-model")
    body = _multipart(name, onnx_path.read_bytes())
    page = alice_web.post(
        "/models/ui-model/versions/new/", data=body, content_type="multipart/form-data; boundary=XbOuNdArY"
    )
    assert page.status_code == 200
    assert "has path parts; send a bare name such as model.onnx" in page.content.decode()
    api = alice_api.generic(
        "POST", "/api/v1/models/ui-model/versions/", body, content_type="multipart/form-data; boundary=XbOuNdArY"
    )
    assert api.status_code == 400 and "has path parts; send a bare name such as model.onnx" in api.json()["detail"]
    assert not ModelVersion.objects.exists()
    # a bare name still goes through
    ok = alice_web.post(
        "/models/ui-model/versions/new/",
        data=_multipart("model.onnx", onnx_path.read_bytes()),
        content_type="multipart/form-data; boundary=XbOuNdArY",
    )
    assert ok.status_code == 302 and ModelVersion.objects.get().original_filename == "model.onnx"


def test_upload_errors_show_no_server_paths(alice_api, alice_web, team_a, tmp_path, settings):
    factories.registered_model(team_a, name="ui-model")
    broken = _external_data_model()  # the ONNX checker names the absolute path where it looked for the data
    api = alice_api.post("/api/v1/models/ui-model/versions/", {"file": _file("bad.onnx", broken)}, format="multipart")
    assert api.status_code == 400
    page = alice_web.post("/models/ui-model/versions/new/", {"file": _file("bad.onnx", broken)})
    text = api.json()["detail"] + page.content.decode()
    assert "should be stored in weights.bin" in api.json()["detail"], api.json()
    for root in (str(settings.ARTIFACT_ROOT), str(settings.BASE_DIR), "/tmp/"):
        assert root not in text


def _external_data_model() -> bytes:
    from onnx import TensorProto, helper

    weights = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
    weights.data_location = TensorProto.EXTERNAL
    weights.ClearField("float_data")
    entry = weights.external_data.add()
    entry.key, entry.value = "location", "weights.bin"
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        initializer=[weights],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _file(name, content):
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile(name, content)


def test_platform_errors_and_build_failures_scrub_paths(team_a, onnx_path, tmp_path):
    assert scrub_paths("Unable to parse /srv/modelplane/var/tmp/3f2a.onnx: bad") == "Unable to parse 3f2a.onnx: bad"
    assert scrub_paths("runs:/abc123/model, http://host/a/b, 1/2") == "runs:/abc123/model, http://host/a/b, 1/2"
    assert InvalidInput("file: /var/lib/x/y.onnx is bad").detail == "file: y.onnx is bad"

    from registry.services import builds as build_services

    artifact = factories.artifact(team_a, onnx_path, tmp_path)
    build = artifact.build
    build.status, build.lease_owner, build.lease_expires_at = (
        "running",
        "w1",
        timezone.now() + timezone.timedelta(minutes=5),
    )
    build.stages = [{"name": "inspect", "status": "running", "log": ""}]
    build.save()
    build_services.build_stage_update(
        build_id=build.pk, owner="w1", stage="inspect", status="failed", log=f"loading {tmp_path}/work/model.onnx\n"
    )
    build_services.build_fail(
        build_id=build.pk, owner="w1", reason=f"inspect: internal error: OSError: {tmp_path}/work/model.onnx"
    )
    build.refresh_from_db()
    assert str(tmp_path) not in build.error and build.error.endswith("model.onnx")
    assert all(str(tmp_path) not in (s.get("log") or "") for s in build.stages)
