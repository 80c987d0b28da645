import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

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


# --- settings one way (kernel/conf.py) ------------------------------------------------------
APPS = ("config", "kernel", "registry", "deployments", "monitoring", "experiments")
READS = re.compile(r"""(?:\bsetting|\bconf\.get|_conf\.get|\bconf\.setting|\benv)\(\s*["']([A-Z][A-Z0-9_]+)["']""")


def test_the_configuration_page_is_the_registries():
    from config.management.commands.settings_doc import BEGIN, END, PAGE, tables

    text = PAGE.read_text()
    assert text.partition(BEGIN)[2].partition(END)[0].strip() == tables().strip(), (
        "docs/configuration.md differs from the declared settings: run `python manage.py settings_doc --write`"
    )


def test_every_setting_read_is_declared_and_settings_py_reads_the_environment_only_through_it():
    from config.management.commands.settings_doc import tables
    from kernel.conf import REGISTRY

    tables()  # imports every registry
    undeclared = set()
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            for name in READS.findall(path.read_text()):
                if name not in REGISTRY:
                    undeclared.add(f"{path.relative_to(ROOT)}: {name}")
    assert not undeclared, sorted(undeclared)
    source = (ROOT / "config" / "settings.py").read_text()
    assert "os.environ" not in source and "getenv" not in source


def test_a_value_that_does_not_parse_is_refused_by_name(monkeypatch):
    from kernel.conf import SettingError, from_environment

    monkeypatch.setenv("MAX_UPLOAD_MB", "lots")
    with pytest.raises(SettingError, match="MAX_UPLOAD_MB='lots' is not a valid int"):
        from_environment("MAX_UPLOAD_MB")
    monkeypatch.setenv("POOL_TEAM_IMAGES", "{not json")
    with pytest.raises(SettingError, match="POOL_TEAM_IMAGES"):
        from_environment("POOL_TEAM_IMAGES")
