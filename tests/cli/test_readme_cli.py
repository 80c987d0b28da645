"""The CLI example of docs/cli.md works as written: its shell block runs against a live server
(only BASE is pointed at the test server) with a real Celery build worker. The demo pool
`demo-cpu` is a pool row without processes (no tritonserver is needed to start and roll
back a rollout that is still loading). `modelplane` on PATH is this checkout's CLI (a
two-line shim running `python -m modelplane_cli`), because the shared test virtualenv
may hold another checkout's install; tests/cli/test_units.py checks the wheel's entry point."""

import re
import subprocess
import sys

import pytest

from deployments.models import Endpoint, Rollout
from harness import factories
from registry.models import ModelVersion, Role, TeamMembership
from registry.services.teams import team_create
from tests.cli.conftest import ROOT
from tests.registry.build_helpers import fast_build_env

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def readme_cli_block() -> str:
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "docs" / "cli.md").read_text(), flags=re.S)
    return next(b for b in blocks if b.startswith("BASE=") and "modelplane login" in b)


def test_readme_cli_example(live_server, subprocess_env, celery_worker, tmp_path):
    admin = factories.user("admin", staff=True)
    team = team_create(user=admin, name="demo")
    TeamMembership.objects.create(user=admin, team=team, role=Role.ADMIN)
    factories.pool(team, "demo-cpu", ready_replicas=1)
    subprocess_env.update(fast_build_env())
    celery_worker(queues="build-cpu,build-gpu")

    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "modelplane").write_text(f'#!/bin/sh\ncd "{ROOT}" && exec "{sys.executable}" -m modelplane_cli "$@"\n')
    (shims / "modelplane").chmod(0o755)
    env = {k: v for k, v in subprocess_env.items() if not k.startswith("MODELPLANE_")}
    env.update(HOME=str(tmp_path / "home"), PATH=f"{shims}:{env['PATH']}")
    script = re.sub(r"^BASE=.*$", f"BASE={live_server.url}", readme_cli_block(), count=1, flags=re.M)
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    version = ModelVersion.objects.get(model__name="ctr-cli")
    assert version.metrics == {"auc": 0.74}
    assert "stage package succeeded" in result.stdout and "Logged in to" in result.stdout
    endpoint = Endpoint.objects.get(name="ctr-cli")
    assert endpoint.stable_artifact.variant == "onnx-fp32" and endpoint.pool.name == "demo-cpu"
    rollout = Rollout.objects.get(endpoint=endpoint)
    assert rollout.candidate_artifact.variant == "onnx-int8" and rollout.steps_bp == [500, 2500, 5000, 10000]
    assert rollout.state == "rolling_back" and rollout.reason == "stopped from the README"
    assert (tmp_path / "home" / ".config" / "modelplane" / "config.json").stat().st_mode & 0o077 == 0
