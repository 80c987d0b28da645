"""`modelplane release …` and `build start --tune-slo-ms` against a live server (no worker:
what is asserted is the request each sends and how refusals end the run; the flow itself
runs in tests/deployments/test_release_integration.py)."""

import pytest

from deployments.models import Release
from harness import factories
from modelplane_cli import exits
from registry.models import Build, ModelVersion, VersionSource

pytestmark = pytest.mark.integration


def test_release_and_tune_from_the_cli(cli_as, deployer, team_a, onnx_path, tmp_path):
    stable = factories.artifact(team_a, onnx_path, tmp_path)
    pool = factories.pool(team_a, ready_replicas=1)
    factories.endpoint(pool, stable, name="ctr", slo_p99_ms=30)
    version = ModelVersion.objects.create(
        model=stable.version.model, version=2, source=VersionSource.UPLOAD, file_sha256="0" * 64, file_path="x.onnx"
    )
    cli = cli_as(deployer)

    started = cli(
        "release", "start", "ctr", "--version", version.pk, "--tune-budget-s", "30", "--steps", "50,100", "--json"
    )
    assert started.code == 0, started
    body = started.json()
    assert (
        body["state"] == "building"
        and body["slo_p99_ms"] == 30
        and body["rollout_options"]["steps_bp"] == [5000, 10000]
    )
    build = Build.objects.get(pk=body["build"])
    assert build.tune["budget_s"] == 30 and build.tune["variants"] == ["onnx-int8"]
    shown = cli("release", "get", body["id"])
    assert shown.code == 0 and "tuned for p99 <= 30 ms" in shown.out and "building" in shown.out, shown
    assert str(body["id"]) in cli("release", "list", "--state", "building").out

    again = cli("release", "start", "ctr", "--version", version.pk)
    assert again.code == exits.API and "release in progress" in again.err, again
    nowhere = cli("release", "start", "no-such-endpoint", "--version", version.pk)
    assert nowhere.code == exits.API and "endpoint" in nowhere.err, nowhere
    assert Release.objects.count() == 1

    tuned = cli(
        "build", "start", version.pk, "--no-wait", "--tune-slo-ms", "20", "--tune-variant", "onnx-fp32", "--json"
    )
    assert tuned.code == 0, tuned
    assert tuned.json()["tune"] == {"slo_p99_ms": 20.0, "variants": ["onnx-fp32"]}
    assert [s["name"] for s in tuned.json()["stages"]][-1] == "tune"
    usage = cli("build", "start", version.pk, "--tune-variant", "onnx-fp32")
    assert usage.code == exits.USAGE and "--tune-slo-ms" in usage.err, usage
    refused = cli("build", "start", version.pk, "--no-wait", "--tune-slo-ms", "20", "--tune-variant", "onnx-fp16")
    assert refused.code == exits.API and "tune.variants" in refused.err, refused


def test_release_without_steps_takes_the_forecasts_plan_and_says_so(cli_as, deployer, team_a, onnx_path, tmp_path):
    """As `rollout start`: no --steps is the plan the rollout forecast suggests for the
    endpoint's observed traffic (at 20 req/s 50/100 %), not the server's fixed 10/25/50/100."""
    from datetime import timedelta

    from django.utils import timezone

    from monitoring.services.store import samples_store

    stable = factories.artifact(team_a, onnx_path, tmp_path)
    pool = factories.pool(team_a, ready_replicas=1)
    factories.endpoint(pool, stable, name="idle", slo_p99_ms=200)
    factories.endpoint(pool, stable, name="busy", slo_p99_ms=200)
    version = ModelVersion.objects.create(
        model=stable.version.model, version=2, source=VersionSource.UPLOAD, file_sha256="0" * 64, file_path="x.onnx"
    )
    now = timezone.now()
    for tick in range(30):  # 20 req/s over the last minute, as the collector stores it
        samples_store(rows=[("busy", "v1", "requests", 40.0)], at=now - timedelta(seconds=2 * tick))
    cli = cli_as(deployer)
    idle = cli("release", "start", "idle", "--version", version.pk, "--json")
    assert idle.code == 0, idle
    assert idle.json()["rollout_options"]["steps_bp"] == [2500, 5000, 10000]
    assert "Steps 25/50/100 % from the rollout forecast (no traffic observed yet)" in idle.err, idle
    busy = cli("release", "start", "busy", "--version", version.pk, "--json")
    assert busy.code == 0, busy
    assert busy.json()["rollout_options"]["steps_bp"] == [5000, 10000]
    assert "Steps 50/100 % from the rollout forecast (20 req/s observed)" in busy.err, busy
