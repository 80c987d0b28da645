"""The live API fuzzed against its own OpenAPI schema: schemathesis
(CLI, in a child process) sends schema-derived and schema-violating requests to a real
server (pytest-django's live_server over PostgreSQL), authenticated as a team admin with
seeded objects; it must find 0 server errors, 0 undocumented status codes, 0 responses
that break their schema and no invalid input accepted.

Bounded for `make test` (SCHEMATHESIS_MAX_EXAMPLES=4 per operation, at most
SCHEMATHESIS_MAX_TIME=40 s); `make security` runs a longer one.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from rest_framework.authtoken.models import Token

from harness import factories
from kernel import mlflow as mlflow_config
from monitoring.services.alerts import alert_raise
from registry.models import Role

CHECKS = ",".join(
    [
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_schema_conformance",
        "negative_data_rejection",
        "missing_required_header",
        "ignored_auth",
    ]
)


def _schemathesis() -> list[str]:
    binary = Path(sys.executable).with_name("st")
    return [str(binary)] if binary.exists() else [sys.executable, "-m", "schemathesis.cli"]


@pytest.mark.fuzz
@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_live_api_conforms_to_its_schema(live_server, onnx_path, tmp_path, settings):
    team = factories.team("fuzz-team")
    admin = factories.user("fuzz-admin")
    factories.member(admin, team, Role.ADMIN)
    factories.registered_model(team, name="fuzz-model")
    factories.artifact(team, onnx_path, tmp_path, model_name="fuzz-artifacts")
    alert_raise(kind="canary_rollback", reason="p99 over SLO", endpoint="fuzz", rollout_id=1, team=team)
    token = Token.objects.create(user=admin).key
    # A fresh MLflow store with one experiment of the team (creating the store's tables
    # takes a while: done here, not inside a fuzzed request's time limit).
    settings.MLFLOW_TRACKING_URI = f"sqlite:///{tmp_path / 'mlflow.db'}"
    settings.MLFLOW_ARTIFACT_ROOT = str(tmp_path / "mlruns")
    mlflow_config.configure.cache_clear()
    mlflow_config.experiment_id("fuzz-experiment", team=team.name)

    max_examples = os.environ.get("SCHEMATHESIS_MAX_EXAMPLES", "4")
    max_time = os.environ.get("SCHEMATHESIS_MAX_TIME", "40")
    # The live server's schema, fetched here without schemathesis's 10-s load timeout (drf-spectacular
    # builds it per request: ~10 s on two busy cores), then fuzzed against that same server.
    schema = requests.get(
        f"{live_server.url}/api/schema/?format=json", headers={"Authorization": f"Token {token}"}, timeout=120
    )
    assert schema.status_code == 200, schema.text[:300]
    (tmp_path / "schema.json").write_bytes(schema.content)
    command = [
        *_schemathesis(),
        "run",
        str(tmp_path / "schema.json"),
        "--url",
        live_server.url,
        "-H",
        f"Authorization: Token {token}",
        "--checks",
        CHECKS,
        "--phases",
        "coverage,fuzzing",
        "-n",
        max_examples,
        "--max-time",
        max_time,
        "--seed",
        os.environ.get("SCHEMATHESIS_SEED", "11"),
        # one worker: hypothesis reads its lambdas' source with ast.parse, which CPython 3.11 can
        # fail from two threads at once ("SystemError: AST constructor recursion depth mismatch")
        "-w",
        "1",
        "--request-timeout",
        "30",
        "--no-color",
        "--generation-database",
        "none",
        "--warnings",
        "off",
        "--report",
        "junit",
        "--report-dir",
        str(tmp_path / "schemathesis"),
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=int(max_time) + 240, cwd=tmp_path)
    finally:
        mlflow_config.configure.cache_clear()
    output = done.stdout + done.stderr
    assert "Tested:" in output, output[-4000:]
    assert done.returncode == 0, output[-12000:]
