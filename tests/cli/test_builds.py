"""`modelplane build …` with a real Celery worker on the real broker: a build waited for
with one line per stage (exit 0), a build that fails (exit 10, its error and log tail on
stderr), giving up at --timeout (exit 6) and following it again."""

import pytest

from harness import factories
from modelplane_cli import exits
from registry.models import Build
from tests.registry.build_helpers import fast_build_env

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_build_wait_success_and_failure(celery_worker, subprocess_env, cli_as, alice, team_a, onnx_path):
    subprocess_env.update(fast_build_env())
    factories.registered_model(team_a, name="ranker")
    cli = cli_as(alice)
    version_id = cli("version", "upload", "ranker", onnx_path, "--field", "id").out.strip()

    queued = cli("build", "start", version_id, "--no-wait", "--idempotency-key", "ci-42", "--json")
    assert queued.code == 0 and queued.json()["status"] in ("queued", "running"), queued
    build_id = queued.json()["id"]
    same = cli("build", "start", version_id, "--no-wait", "--idempotency-key", "ci-42", "--field", "id")
    assert same.out.strip() == str(build_id) and Build.objects.count() == 1, same

    gave_up = cli("build", "wait", build_id, "--timeout", "1", "--interval", "0.3")  # no worker yet: it stays queued
    assert gave_up.code == exits.TIMEOUT and "gave up waiting for build" in gave_up.err, gave_up
    assert gave_up.out.splitlines()[0] == f"build {build_id} of ranker v1: queued"

    celery_worker(queues="build-cpu,build-gpu")

    done = cli("build", "wait", build_id, "--interval", "0.5", timeout=240)
    assert done.code == 0, done
    lines = done.out.splitlines()
    stages = [line.split()[1] for line in lines if line.startswith("  stage ")]
    assert stages == ["canonicalize", "optimize", "variants", "validate", "benchmark", "package"], done.out
    assert all(" succeeded in " in line for line in lines if line.startswith("  stage "))
    assert "\r" not in done.out  # not a TTY: no redrawn bar, one line per event
    assert "onnx-int8" in done.out and "servable" in done.out  # the summary's artifact table

    as_json = cli("build", "get", build_id, "--json")
    assert as_json.json()["status"] == "succeeded" and {a["variant"] for a in as_json.json()["artifacts"]} == {
        "onnx-fp32",
        "onnx-int8",
    }
    listed = cli("build", "list", "--version", version_id)
    assert listed.code == 0 and "succeeded" in listed.out, listed

    # a GPU-only build on this CPU worker fails with the reason: exit 10, JSON still on stdout
    failed = cli("build", "start", version_id, "--target", "onnx-fp16", "--interval", "0.5", "--json", timeout=240)
    assert failed.code == exits.BUILD_FAILED, failed
    assert failed.json()["status"] == "failed"
    assert f"build {failed.json()['id']} failed: no variant passed validation: onnx-fp16" in failed.err, failed.err
    assert failed.err.splitlines()[-2] == f"build {failed.json()['id']} of ranker v1: failed"  # progress went to stderr

    unknown = cli("build", "start", "999999")
    assert unknown.code == exits.API and "HTTP 404" in unknown.err, unknown
    bad_target = cli("build", "start", version_id, "--target", "onnx-int3")
    assert bad_target.code == exits.API and "targets" in bad_target.err, bad_target
