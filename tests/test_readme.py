"""The API examples of docs/api.md work as written: its shell block runs against a live server
(only BASE is pointed at the test server) and every curl must succeed."""

import re
import subprocess
from pathlib import Path

import pytest

from deployments.models import InferenceKey
from harness import factories
from registry.models import ModelVersion, Role, TeamMembership
from registry.services.teams import team_create

ROOT = Path(__file__).resolve().parent.parent


def readme_api_block() -> str:
    text = (ROOT / "docs" / "api.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, flags=re.S)
    return next(b for b in blocks if b.startswith("BASE="))


@pytest.mark.integration
def test_readme_curl_examples(live_server, subprocess_env, tmp_path):
    admin = factories.user("admin", staff=True)
    team = team_create(user=admin, name="demo")
    TeamMembership.objects.create(user=admin, team=team, role=Role.ADMIN)
    script = re.sub(r"^BASE=.*$", f"BASE={live_server.url}", readme_api_block(), count=1, flags=re.M)
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=ROOT,
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    version = ModelVersion.objects.get(model__name="ctr-ranker")
    assert version.metrics == {"auc": 0.74} and version.signature["inputs"][0]["name"] == "dense"
    assert version.data.get(kind="validation").rows == 500  # the validation set attached as written
    assert '"count":1' in result.stdout.replace(" ", "")
    key = InferenceKey.objects.get(name="ranker-prod")  # made, listed by its prefix, revoked
    assert key.revoked_at is not None and key.prefix in result.stdout and key.rate_per_s == 200
