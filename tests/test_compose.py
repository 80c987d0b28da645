"""docker-compose.yml is for users (no Docker engine runs here): parse it, validate it
against the Compose Specification schema, and check it is wired to this project."""

import json
import re
import shlex
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_file_is_valid_against_the_spec():
    schema = json.loads((ROOT / "tests/schemas/compose-spec.json").read_text())
    jsonschema.validate(COMPOSE, schema)


def test_every_part_of_the_stack_is_there():
    assert {"postgres", "redis", "web", "worker", "beat", "mlflow", "pools", "gateway"} <= set(COMPOSE["services"])


@pytest.mark.parametrize("name", ["web", "worker", "beat", "mlflow", "migrate", "pools", "gateway"])
def test_platform_services_share_the_environment_contract(name):
    env = COMPOSE["services"][name]["environment"]
    for key in ("DATABASE_URL", "CELERY_BROKER_URL", "MLFLOW_TRACKING_URI", "SECRET_KEY", "VAR_DIR"):
        assert key in env, f"{name} lacks {key}"
    assert env["DATABASE_URL"].startswith("postgres://") and "@postgres:" in env["DATABASE_URL"]
    assert env["CELERY_BROKER_URL"].startswith("redis://redis:")


@pytest.mark.parametrize("name", ["web", "worker", "beat", "mlflow", "migrate", "pools", "gateway"])
def test_every_command_exists_in_the_project(name):
    service = COMPOSE["services"][name]
    command = service["command"]
    args = command if isinstance(command, list) else shlex.split(command)
    assert args[0] == "python"
    if args[1] == "manage.py":
        from django.core.management import get_commands

        assert args[2] in get_commands(), f"no management command {args[2]}"
    elif args[1:3] == ["-m", "gunicorn"]:
        module, _, attr = args[3].partition(":")
        assert (ROOT / (module.replace(".", "/") + ".py")).exists()
        import importlib

        assert hasattr(importlib.import_module(module), attr or "application")
    elif args[1:3] == ["-m", "celery"]:
        assert args[3:5] == ["-A", "config"] and args[5] in {"worker", "beat"}
        from config.celery import app

        queues = args[args.index("-Q") + 1].split(",") if "-Q" in args else []
        assert set(queues) <= {q.name for q in app.conf.task_queues}
    elif args[1:3] == ["-m", "mlflow"]:
        import mlflow  # noqa: F401  (installed by pyproject.toml)
    elif args[1:3] == ["-m", "gateway"]:
        assert (ROOT / "gateway" / "__main__.py").exists()
        assert service["environment"]["GATEWAY_ROUTES_URL"].startswith("http://web:8000/api/v1/gateway/routes")
    else:
        pytest.fail(f"unknown command {args}")
    dockerfile = ROOT / service["build"]["dockerfile"]
    assert dockerfile.exists()


def test_published_ports_match_settings_defaults():
    assert "8000:8000" in COMPOSE["services"]["web"]["ports"]
    assert re.match(r"^\d+$", COMPOSE["services"]["web"]["environment"]["PORT"])


def test_the_gateway_is_published_on_loopback_unless_asked():
    """Compose published the gateway on all interfaces."""
    ports = COMPOSE["services"]["gateway"]["ports"]
    assert ports == [
        "${GATEWAY_PUBLISH_ADDR:-127.0.0.1}:8080:8080",
        "${GATEWAY_PUBLISH_ADDR:-127.0.0.1}:8081:8081",  # KServe v2 gRPC
    ]
    assert "GATEWAY_METRICS_TOKEN" in COMPOSE["services"]["gateway"]["environment"]
    assert "GATEWAY_METRICS_TOKEN" in COMPOSE["services"]["worker"]["environment"]  # the collector sends it


LONG_RUNNING = ["postgres", "redis", "mlflow", "web", "worker", "beat", "pools", "gateway"]


@pytest.mark.parametrize("name", LONG_RUNNING)
def test_long_running_services_restart_and_have_a_health_check(name):
    """One dead process must not stay dead (compose's side of `make run`'s supervisor)."""
    service = COMPOSE["services"][name]
    assert service["restart"] in {"unless-stopped", "always", "on-failure"}, f"{name} is not restarted"
    test = service["healthcheck"]["test"]
    assert test[0] in {"CMD", "CMD-SHELL"} and len(test) > 1


def test_the_one_shot_migration_is_not_restarted():
    assert COMPOSE["services"]["migrate"]["restart"] == "no"


@pytest.mark.parametrize("name", ["web", "worker", "beat", "pools", "gateway", "mlflow"])
def test_health_checks_probe_what_the_service_serves(name):
    """A check names the service's own port or component, and any management command
    it runs exists."""
    test = COMPOSE["services"][name]["healthcheck"]["test"]
    text = " ".join(test[1:])
    if "manage.py" in test:
        from django.core.management import get_commands

        args = test[test.index("manage.py") + 1 :]
        assert args[0] in get_commands() and args[1] == name
    elif "celery" in text:
        assert "inspect ping" in text
    else:
        ports = {"web": "8000", "gateway": "8080", "mlflow": "5000"}
        assert f"127.0.0.1:{ports[name]}/" in text
