"""The build API and pages: start (Idempotency-Key), read, cancel, artifacts, download,
team scoping, errors as JSON {"detail", "code"}; the live build page and its 286."""

import io
import tarfile

import pytest
from django.urls import reverse

from harness import factories
from registry.factory import runner
from registry.models import Build
from registry.services import builds as build_services
from tests.registry.build_helpers import fast_build_settings, upload_version

pytestmark = pytest.mark.django_db
# Tests that run a build in-process need committed rows: the runner's heartbeat thread has its own connection.
runs_a_build = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fast(settings):
    fast_build_settings(settings)


@pytest.fixture
def version(alice, team_a, onnx_path):
    return upload_version(alice, factories.registered_model(team_a, name="ranker"), onnx_path)


def test_start_build_is_idempotent_per_key(alice_api, version):
    url = f"/api/v1/versions/{version.pk}/builds/"
    first = alice_api.post(url, {"targets": ["onnx-fp32", "onnx-int8"]}, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == 201, first.json()
    body = first.json()
    assert body["status"] == "queued" and body["targets"] == ["onnx-fp32", "onnx-int8"] and body["progress"] == 0
    assert [s["name"] for s in body["stages"]] == [
        "canonicalize",
        "optimize",
        "variants",
        "validate",
        "benchmark",
        "package",
    ]
    again = alice_api.post(url, {"targets": ["onnx-fp32", "onnx-int8"]}, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert again.status_code == 200 and again.json()["id"] == body["id"]
    other = alice_api.post(url, {"targets": ["onnx-fp32"]}, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert other.status_code == 409 and other.json()["code"] == "idempotency_key_reused"
    assert alice_api.post(url, {}, format="json").status_code == 201  # no key: a new build with default targets
    assert Build.objects.filter(version=version).count() == 2
    listed = alice_api.get(url).json()
    assert listed["count"] == 2


def test_bad_targets_are_a_400_naming_the_field(alice_api, version):
    response = alice_api.post(f"/api/v1/versions/{version.pk}/builds/", {"targets": ["onnx-int4"]}, format="json")
    assert response.status_code == 400
    assert response.json()["detail"].startswith("targets") and "onnx-int4" in response.json()["detail"]
    assert not Build.objects.exists()


def test_other_teams_see_nothing(bob_api, alice, version):
    build, _ = build_services.build_start(user=alice, version=version)
    assert bob_api.post(f"/api/v1/versions/{version.pk}/builds/", {}, format="json").status_code == 404
    assert bob_api.get(f"/api/v1/builds/{build.pk}/").status_code == 404
    assert bob_api.post(f"/api/v1/builds/{build.pk}/cancel/").json()["code"] == "not_found"
    assert bob_api.get("/api/v1/builds/").json()["count"] == 0


def test_a_viewer_cannot_start_builds(api_for, team_a, version):
    viewer = factories.user("vera")
    factories.member(viewer, team_a, "viewer")
    response = api_for(viewer).post(f"/api/v1/versions/{version.pk}/builds/", {}, format="json")
    assert response.status_code == 403 and response.json()["code"] == "role_required"


@runs_a_build
def test_finished_build_artifacts_and_download(alice_api, alice, version, django_assert_max_num_queries):
    build, _ = build_services.build_start(user=alice, version=version)
    assert runner.run(build.pk, owner="api-test") == "published"
    body = alice_api.get(f"/api/v1/builds/{build.pk}/").json()
    assert body["status"] == "succeeded" and body["progress"] == 100 and "onnx-int8: passed" in body["log_tail"]
    assert {a["variant"]: a["status"] for a in body["artifacts"]} == {"onnx-fp32": "servable", "onnx-int8": "servable"}
    with django_assert_max_num_queries(8):
        artifacts = alice_api.get(f"/api/v1/versions/{version.pk}/artifacts/").json()["results"]
    int8 = next(a for a in artifacts if a["variant"] == "onnx-int8")
    assert int8["auc_delta"] == int8["validation"]["auc_delta"] and int8["benchmark"]["batches"]["1"]["p50_ms"] > 0
    download = alice_api.get(int8["download_url"])
    assert download.status_code == 200 and download["Content-Type"] == "application/gzip"
    with tarfile.open(fileobj=io.BytesIO(b"".join(download.streaming_content)), mode="r:gz") as tar:
        names = set(tar.getnames())
    assert {
        f"{int8['triton_model_name']}/config.pbtxt",
        f"{int8['triton_model_name']}/1/model.onnx",
        f"{int8['triton_model_name']}/1/model.py",
    } <= names
    assert alice_api.post(f"/api/v1/builds/{build.pk}/cancel/").json()["code"] == "build_finished"


def test_cancel_a_queued_build(alice_api, alice, version):
    build, _ = build_services.build_start(user=alice, version=version)
    response = alice_api.post(f"/api/v1/builds/{build.pk}/cancel/", {"reason": "changed my mind"}, format="json")
    assert (
        response.status_code == 200
        and response.json()["status"] == "cancelled"
        and response.json()["error"] == "changed my mind"
    )
    version.refresh_from_db()
    assert version.status == "registered"  # nothing was built: back to where it was
    assert runner.run(build.pk, owner="late-worker") == "nothing-to-do"


def test_schema_lists_build_endpoints(alice_api):
    schema = alice_api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    for route in (
        "/api/v1/versions/{version_id}/builds/",
        "/api/v1/builds/{id}/",
        "/api/v1/builds/{id}/cancel/",
        "/api/v1/versions/{version_id}/artifacts/",
        "/api/v1/artifacts/{id}/download/",
    ):
        assert route in schema["paths"], route


# --- pages ---------------------------------------------------------------------------------------
@runs_a_build
def test_build_page_polls_until_done_then_286(client, alice, version):
    client.force_login(alice)
    build, _ = build_services.build_start(user=alice, version=version)
    page = client.get(reverse("registry:build-detail", args=[build.pk]))
    assert (
        page.status_code == 200 and b'hx-trigger="every 2s"' in page.content and b'role="progressbar"' in page.content
    )
    partial = client.get(reverse("registry:build-detail", args=[build.pk]), HTTP_HX_REQUEST="true")
    assert partial.status_code == 200 and b"<html" not in partial.content and b"canonicalize" in partial.content
    runner.run(build.pk, owner="page-test")
    done = client.get(reverse("registry:build-detail", args=[build.pk]), HTTP_HX_REQUEST="true")
    assert done.status_code == 286 and b"every 2s" not in done.content and b"succeeded" in done.content


@runs_a_build
def test_version_page_has_start_button_variants_table_and_chart(client, alice, version):
    client.force_login(alice)
    url = reverse("registry:version-detail", args=[version.pk])
    assert b"No artifacts yet" in client.get(url).content
    response = client.post(reverse("registry:build-start", args=[version.pk]), {"targets": ["onnx-fp32", "onnx-int8"]})
    build = Build.objects.get(version=version)
    assert response.status_code == 302 and response["Location"] == reverse("registry:build-detail", args=[build.pk])
    runner.run(build.pk, owner="page-test")
    content = client.get(url).content.decode()
    assert "Start build" in content and 'id="variants"' in content and "ranker__v1__onnx-int8" in content
    assert (
        'id="latency-data"' in content
        and "vendor/chartjs/chart.umd.min.js" in content
        and '"batch_sizes": [1, 8]' in content
    )
    builds = client.get(reverse("registry:build-list")).content.decode()
    assert f"#{build.pk}" in builds and ">Builds<" in builds  # the nav item appears


def test_version_page_of_another_team_is_404(client, bob, version):
    client.force_login(bob)
    assert client.post(reverse("registry:build-start", args=[version.pk])).status_code == 404
