"""The generative recommender example of README.md works as written: its command block runs
against a live server (only the URL is pointed at the test server) with a real Celery build
worker: the tiny recommender trained and registered, built through its beam gates, an
endpoint on the demo pool (a pool row without processes, as in tests/cli/test_readme_cli.py)
and a canary of its int8 variant. The request the README shows next is sent through a real
gateway by tests/gr/test_affinity_routing.py."""

import re
import subprocess
import sys

import pytest

from deployments.models import Endpoint, Rollout
from harness import factories
from registry.models import Role, TeamMembership
from registry.services.teams import team_create
from tests.cli.conftest import ROOT
from tests.registry.build_helpers import fast_build_env

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def readme_gr_block() -> str:
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    return next(b for b in blocks if "train_gr_model" in b)


def test_readme_gr_example(live_server, subprocess_env, celery_worker, tmp_path):
    admin = factories.user("admin", staff=True)
    team = team_create(user=admin, name="demo")
    TeamMembership.objects.create(user=admin, team=team, role=Role.ADMIN)
    factories.pool(team, "demo-cpu", ready_replicas=1)
    subprocess_env.update(fast_build_env(), BUILD_GR_HOLDOUT_USERS="48")
    celery_worker(queues="build-cpu,build-gpu")

    shims = tmp_path / "bin"  # .venv/bin/modelplane: this checkout's CLI (see tests/cli/test_readme_cli.py)
    (shims / ".venv" / "bin").mkdir(parents=True)
    cli = shims / ".venv" / "bin" / "modelplane"
    cli.write_text(f'#!/bin/sh\ncd "{ROOT}" && exec "{sys.executable}" -m modelplane_cli "$@"\n')
    cli.chmod(0o755)
    script = readme_gr_block().replace(".venv/bin/modelplane", str(cli))
    script = script.replace("http://127.0.0.1:8000", live_server.url)
    env = {k: v for k, v in subprocess_env.items() if not k.startswith("MODELPLANE_")}
    env.update(HOME=str(tmp_path / "home"))
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=280
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    endpoint = Endpoint.objects.get(name="recs")
    assert endpoint.stable_artifact.variant == "gr-fp32-c1" and endpoint.public
    rollout = Rollout.objects.get(endpoint=endpoint)
    assert rollout.candidate_artifact.variant == "gr-int8-c1" and rollout.plan.baseline  # judged beside a cold copy
