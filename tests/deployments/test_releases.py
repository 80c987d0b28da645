"""Releases (build → tune → canary) through their service and API, without processes: what
is refused at the door and why, what a release asks of the build, and how the reconcile
moves it from its build to its canary and to its end. The flow with real processes is
tests/deployments/test_release_integration.py."""

import pytest

from deployments.models import Endpoint, PoolModel, Release, ReleaseState, Rollout
from deployments.rollout_machine import State
from deployments.services import releases as services
from harness import factories
from kernel.errors import Conflict, Forbidden, InvalidInput
from monitoring.selectors.verdicts import canary_measured
from registry.models import Build, Event, ModelVersion, Role, VersionSource
from tests.deployments.release_helpers import finish_build


@pytest.fixture
def stack(team_a, deployer, onnx_path, tmp_path):
    stable = factories.artifact(team_a, onnx_path, tmp_path)
    pool = factories.pool(team_a, ready_replicas=1, max_queue_size=0, queue_timeout_ms=0)
    endpoint = factories.endpoint(pool, stable, name="ctr", slo_p99_ms=40)
    version = ModelVersion.objects.create(
        model=stable.version.model, version=2, source=VersionSource.UPLOAD, file_sha256="0" * 64, file_path="x.onnx"
    )
    return endpoint, version


def test_a_release_asks_the_build_for_a_tune_against_the_endpoints_slo_and_pool(stack, deployer):
    endpoint, version = stack
    release = services.release_start(
        user=deployer,
        endpoint=endpoint,
        version=version,
        variant="onnx-int8",
        rollout_options={"steps_bp": [5000, 10000]},
    )
    build = Build.objects.get(pk=release.build_id)
    assert build.targets == ["onnx-int8"]
    assert build.tune == {"slo_p99_ms": 40.0, "variants": ["onnx-int8"], "max_queue_size": 0, "queue_timeout_ms": 0}
    assert [s["name"] for s in build.stages][-1] == "tune"
    assert release.state == ReleaseState.BUILDING and release.slo_p99_ms == 40.0
    assert Event.objects.filter(object_type="deployments.release", object_id=str(release.pk), action="created").exists()
    with pytest.raises(Conflict):  # one active release per endpoint
        services.release_start(user=deployer, endpoint=endpoint, version=version)


@pytest.mark.parametrize(
    "changes,error,field",
    [
        ({"variant": "onnx-fp16"}, InvalidInput, "variant"),  # a GPU variant on a CPU pool
        ({"variant": "onnx-int8-tuned"}, InvalidInput, "variant"),  # the tune makes that one, not the build
        ({"variant": "../../etc"}, InvalidInput, "variant"),
        ({"rollout_options": {"steps_bp": [5000, 2500]}}, InvalidInput, "steps_bp"),
        ({"rollout_options": {"shell": "x"}}, InvalidInput, "shell"),
    ],
)
def test_bad_releases_are_refused_before_anything_starts(stack, deployer, changes, error, field):
    endpoint, version = stack
    with pytest.raises(error) as failure:
        services.release_start(user=deployer, endpoint=endpoint, version=version, **changes)
    assert failure.value.field == field
    assert not Release.objects.exists() and not Build.objects.filter(version=version).exists()


def test_a_release_needs_the_endpoints_model_a_deployer_and_no_rollout_in_flight(
    stack, deployer, alice, onnx_path, tmp_path
):
    endpoint, version = stack
    other = ModelVersion.objects.create(
        model=factories.registered_model(endpoint.team),
        version=1,
        source=VersionSource.UPLOAD,
        file_path="y.onnx",
        file_sha256="1" * 64,
    )
    with pytest.raises(InvalidInput) as failure:
        services.release_start(user=deployer, endpoint=endpoint, version=other)
    assert failure.value.code == "wrong_model"
    with pytest.raises(Forbidden):  # a developer builds, but only a deployer releases
        services.release_start(user=alice, endpoint=endpoint, version=version)
    factories.rollout(endpoint, factories.artifact(endpoint.team, onnx_path, tmp_path), state=State.CANARY)
    with pytest.raises(Conflict):
        services.release_start(user=deployer, endpoint=endpoint, version=version)


@pytest.mark.parametrize("tuned", [True, False])
def test_the_reconcile_canaries_the_tuned_variant_or_says_why_not(stack, deployer, tuned, onnx_path, tmp_path):
    endpoint, version = stack
    release = services.release_start(
        user=deployer, endpoint=endpoint, version=version, rollout_options={"steps_bp": [5000, 10000]}
    )
    assert services.release_reconcile(release_id=release.pk).state == ReleaseState.BUILDING  # the build is running
    candidate = finish_build(release, tuned=tuned, onnx_path=onnx_path, tmp_path=tmp_path)
    release = services.release_reconcile(release_id=release.pk)
    assert release.state == ReleaseState.CANARY and release.candidate_artifact_id == candidate.pk, release.reason
    rollout = Rollout.objects.get(pk=release.rollout_id)
    assert rollout.candidate_artifact_id == candidate.pk and rollout.baseline_model  # with the fair baseline
    assert list(rollout.steps_bp) == [5000, 10000]
    assert PoolModel.objects.filter(artifact=candidate).exists()  # the canary's load was asked of the pool
    assert (
        ("3.10x the default's" in release.reason) if tuned else ("untuned onnx-int8: no config beat" in release.reason)
    )
    Rollout.objects.filter(pk=rollout.pk).update(state=State.ROLLED_BACK, reason="judge: candidate p99 over the SLO")
    release = services.release_reconcile(release_id=release.pk)
    assert release.state == ReleaseState.ROLLED_BACK and "p99 over the SLO" in release.reason
    assert Endpoint.objects.get(pk=endpoint.pk).stable_artifact_id != candidate.pk
    states = list(
        Event.objects.filter(object_type="deployments.release", object_id=str(release.pk))
        .order_by("pk")
        .values_list("to_state", flat=True)
    )
    assert states == ["building", "canary", "rolled_back"]


def test_a_failed_build_fails_the_release_with_its_reason(stack, deployer):
    endpoint, version = stack
    release = services.release_start(user=deployer, endpoint=endpoint, version=version)
    finish_build(release, tuned=False, failed=True)
    release = services.release_reconcile(release_id=release.pk)
    assert release.state == ReleaseState.FAILED and "outputs NaN" in release.reason and release.finished_at


def test_promoted_when_the_canary_succeeds(stack, deployer, onnx_path, tmp_path):
    endpoint, version = stack
    release = services.release_start(user=deployer, endpoint=endpoint, version=version)
    finish_build(release, tuned=True, onnx_path=onnx_path, tmp_path=tmp_path)
    release = services.release_reconcile(release_id=release.pk)
    Rollout.objects.filter(pk=release.rollout_id).update(state=State.SUCCEEDED, reason="promoted: all steps passed")
    assert services.release_reconcile(release_id=release.pk).state == ReleaseState.PROMOTED


def test_release_api_scopes_and_bounds(stack, deployer_api, api_for, team_b, deployer):
    endpoint, version = stack
    outsider = factories.user("eve")
    factories.member(outsider, team_b, Role.DEPLOYER)
    eve = api_for(outsider)
    body = {"endpoint": "ctr", "version": version.pk, "variant": "onnx-int8", "tune_budget_s": 30}
    refused = eve.post("/api/v1/releases/", body, format="json")
    assert refused.status_code == 400 and refused.json()["code"] == "endpoint_not_found"  # another team's endpoint
    for bad, field in (
        ({**body, "tune_budget_s": 1e9}, "tune_budget_s"),
        ({**body, "slo_p99_ms": -1}, "slo_p99_ms"),
        ({**body, "version": 999_999}, "version"),
        ({**body, "variant": "x" * 500}, "variant"),
    ):
        response = deployer_api.post("/api/v1/releases/", bad, format="json")
        assert response.status_code == 400 and field in str(response.json()), response.json()
    assert not Release.objects.exists()
    created = deployer_api.post("/api/v1/releases/", body, format="json")
    assert created.status_code == 201, created.json()
    data = created.json()
    assert data["state"] == "building" and data["build_status"] == "queued" and data["prediction"] is None
    assert deployer_api.get(f"/api/v1/releases/{data['id']}/").json()["endpoint"] == "ctr"
    assert eve.get(f"/api/v1/releases/{data['id']}/").status_code == 404
    assert eve.get("/api/v1/releases/").json()["count"] == 0


def test_the_endpoint_page_shows_the_release_card_and_its_prediction(stack, deployer, client, onnx_path, tmp_path):
    endpoint, version = stack
    client.force_login(deployer)
    page = client.get(f"/deployments/endpoints/{endpoint.name}/")
    assert page.status_code == 200 and 'id="release-form"' in page.content.decode()
    release = services.release_start(user=deployer, endpoint=endpoint, version=version)
    finish_build(release, tuned=True, onnx_path=onnx_path, tmp_path=tmp_path)
    services.release_reconcile(release_id=release.pk)
    card = client.get(f"/deployments/endpoints/{endpoint.name}/release/", HTTP_HX_REQUEST="true").content.decode()
    assert "Release #" in card and 'id="predicted-gain"' in card and "3.10×" in card and "canary" in card


class _Verdict:
    def __init__(self, checks, step=0):
        from datetime import UTC, datetime

        self.checks, self.step, self.created_at, self.outcome = checks, step, datetime.now(UTC), "inconclusive"
        self.candidate_variant, self.stable_variant = "v2-onnx-int8-tuned", "v1-onnx-fp32-baseline"


def test_canary_measured_reads_the_latest_verdict_with_both_arms():
    empty = _Verdict([{"name": "latency", "quantiles_ms": {"candidate": {"p50": None}, "stable": {"p50": None}}}])
    full = _Verdict(
        [
            {
                "name": "latency",
                "quantiles_ms": {"candidate": {"p50": 1.0, "p99": 4.0}, "stable": {"p50": 2.0, "p99": 8.0}},
                "samples": {"candidate": 300, "stable": 310},
            },
            {"name": "error_rate", "rates": {"candidate": 0.0, "stable": 0.001}},
        ]
    )
    measured = canary_measured([empty, full])
    assert measured["p50_ratio"] == 0.5 and measured["p99_ratio"] == 0.5 and measured["candidate_requests"] == 300
    assert measured["control_variant"] == "v1-onnx-fp32-baseline" and measured["control_error_rate"] == 0.001
    assert canary_measured([empty]) is None
