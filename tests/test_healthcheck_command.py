"""`manage.py healthcheck NAME`: what container health checks run (docker-compose.yml)."""

from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from config.heartbeats import heartbeat_record

pytestmark = pytest.mark.django_db


def test_a_fresh_heartbeat_is_healthy(capsys):
    heartbeat_record(name="pools", detail={})
    call_command("healthcheck", "pools", "database")
    assert capsys.readouterr().out.strip() == "ok"


def test_a_stale_or_missing_heartbeat_fails_naming_why():
    heartbeat_record(name="beat", detail={}, at=timezone.now() - timedelta(minutes=10))
    with pytest.raises(
        CommandError, match=r"beat: RuntimeError: last heartbeat \d+s ago; pools: RuntimeError: no heartbeat yet"
    ):
        call_command("healthcheck", "beat", "pools")
