"""Builds in a box. The stages of a build run in one child process with
memory and CPU-time limits; the ConstantOfShape bomb (a few hundred bytes asking for
16 GiB) fails its build with a clear reason through the real upload and build path, the
process that ran it goes on (the next build succeeds), and the box costs little."""

import os
import time

import pytest

from harness import factories
from registry.factory import runner
from registry.models import Artifact, BuildStatus
from registry.services import builds as build_services
from tests.registry.build_helpers import constant_of_shape_onnx, fast_build_settings, upload_version

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fast(settings):
    fast_build_settings(settings)


def _build(user, version):
    build, created = build_services.build_start(user=user, version=version)
    assert created
    outcome = runner.run(build.pk, owner="box-test")
    build.refresh_from_db()
    return outcome, build


def test_the_constant_of_shape_bomb_fails_with_the_memory_reason_and_the_next_build_succeeds(
    alice, team_a, tmp_path, onnx_path, settings
):
    settings.BUILD_MEMORY_LIMIT_MB = 1024
    bomb_path = constant_of_shape_onnx(tmp_path / "bomb.onnx")
    assert bomb_path.stat().st_size < 400
    model = factories.registered_model(team_a, name="bomb")
    outcome, build = _build(alice, upload_version(alice, model, bomb_path))
    assert outcome == "failed" and build.status == BuildStatus.FAILED
    assert "needs more than 1024 MiB of memory" in build.error and "internal error" not in build.error
    failed = [s for s in build.stages if s["status"] == "failed"]
    assert len(failed) == 1 and "needs more than 1024 MiB" in failed[0]["log"]
    assert not Artifact.objects.filter(build=build).exists()

    good = factories.registered_model(team_a, name="good")
    outcome, build = _build(alice, upload_version(alice, good, onnx_path))
    assert outcome == "published" and build.status == BuildStatus.SUCCEEDED, build.error


def test_a_build_over_its_cpu_time_fails_with_the_cpu_reason(alice, team_a, onnx_path, settings):
    settings.BUILD_CPU_LIMIT_S = 1
    settings.BUILD_BENCH_SECONDS, settings.BUILD_BENCH_MAX_ITERS = (
        3.0,
        10**9,
    )  # the benchmark spins 3 s per (variant, batch)
    model = factories.registered_model(team_a, name="slow")
    outcome, build = _build(alice, upload_version(alice, model, onnx_path))
    assert outcome == "failed", build.error
    assert "used more than 1 s of CPU time" in build.error


def test_the_stages_run_in_a_child_process_not_in_the_worker(alice, team_a, onnx_path):
    model = factories.registered_model(team_a, name="where")
    started = time.monotonic()
    outcome, build = _build(alice, upload_version(alice, model, onnx_path))
    elapsed = time.monotonic() - started
    assert outcome == "published", build.error
    child_pids = {
        line.split("pid ")[1].split(")")[0]
        for s in build.stages
        for line in s["log"].splitlines()
        if "build process pid" in line
    }
    assert len(child_pids) == 1 and child_pids != {str(os.getpid())}
    print(f"boxed build: {elapsed:.2f}s")
