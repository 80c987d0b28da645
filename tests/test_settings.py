import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _manage(*args, env_extra: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG", "PRODUCTION"}}
    env.update(VAR_DIR=str(tmp_path / "var"), **env_extra)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_check_deploy_is_clean_with_production_settings(tmp_path):
    result = _manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        tmp_path=tmp_path,
        env_extra={
            "PRODUCTION": "1",
            "SECRET_KEY": "k" * 20 + os.urandom(24).hex(),
            "ALLOWED_HOSTS": "models.example.com",
        },
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_flags_debug(tmp_path):
    result = _manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        tmp_path=tmp_path,
        env_extra={"PRODUCTION": "1", "DEBUG": "1", "SECRET_KEY": os.urandom(32).hex()},
    )
    assert result.returncode != 0 and "DEBUG" in result.stderr + result.stdout


def test_secret_key_is_generated_once_into_var(tmp_path):
    code = "from django.conf import settings; print(settings.SECRET_KEY); print(settings.DEBUG)"
    env = {"DJANGO_SETTINGS_MODULE": "config.settings"}
    first = _manage("shell", "--no-imports", "-c", code, tmp_path=tmp_path, env_extra=env)
    second = _manage("shell", "--no-imports", "-c", code, tmp_path=tmp_path, env_extra=env)
    assert first.returncode == 0, first.stderr
    key_file = tmp_path / "var" / "secret_key"
    assert key_file.exists() and oct(key_file.stat().st_mode & 0o777) == "0o600"
    assert first.stdout == second.stdout and first.stdout.splitlines()[0] == key_file.read_text().strip()
    assert first.stdout.splitlines()[1] == "False"


def test_openapi_schema_validates_without_warnings(tmp_path):
    """Every endpoint appears in /api/schema/ with request and response shapes."""
    result = _manage(
        "spectacular",
        "--validate",
        "--fail-on-warn",
        "--file",
        str(tmp_path / "schema.yaml"),
        tmp_path=tmp_path,
        env_extra={},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    schema = (tmp_path / "schema.yaml").read_text()
    for path in (
        "/api/v1/models/",
        "/api/v1/pools/",
        "/api/v1/endpoints/",
        "/api/v1/rollouts/{id}/rollback/",
        "/api/v1/gateway/routes",
        "/api/v1/metrics/",
        "/api/v1/alerts/",
        "/api/v1/training-experiments/",
    ):
        assert f"  {path}:" in schema, path


def test_models_and_migrations_agree(tmp_path):
    """No model change without its migration (run twice: a set-valued default or condition
    would produce a new migration on every run)."""
    for _ in range(2):
        result = _manage("makemigrations", "--check", "--dry-run", tmp_path=tmp_path, env_extra={})
        assert result.returncode == 0, result.stdout + result.stderr
