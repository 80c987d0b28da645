import os
from pathlib import Path

import pytest
from django.conf import settings
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from registry.models import Role
from tests import factories
from tests.make_onnx import write as write_onnx

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
MISSING = {s for s in os.environ.get("MODELPLANE_MISSING_SERVICES", "").split(",") if s}


def pytest_configure(config):
    if IN_CI:
        engine = settings.DATABASES["default"]["ENGINE"]
        if "postgresql" not in engine or settings.CELERY_BROKER_URL.startswith("filesystem://"):
            pytest.exit(f"CI=true needs PostgreSQL and a real broker; got {engine} and {settings.CELERY_BROKER_URL}", 3)


def require_service(*names: str) -> None:
    """Skip (laptop) or fail (CI) a test that needs a real service that is not here."""
    missing = sorted(MISSING.intersection(names))
    if missing:
        message = f"service:{','.join(missing)} not reachable"
        if IN_CI:
            pytest.fail(f"{message} (CI=true: a missing service is a failure)")
        pytest.skip(message)


@pytest.fixture(autouse=True)
def _isolated_var(tmp_path, settings):
    """Each test gets its own artifact store."""
    settings.ARTIFACT_ROOT = tmp_path / "artifacts"
    return tmp_path


@pytest.fixture(scope="session")
def onnx_path(tmp_path_factory) -> Path:
    return write_onnx(tmp_path_factory.mktemp("onnx") / "tiny_ctr.onnx")


@pytest.fixture
def team_a(db):
    return factories.team("team-a")


@pytest.fixture
def team_b(db):
    return factories.team("team-b")


@pytest.fixture
def alice(team_a):
    """A developer in team A."""
    user = factories.user("alice")
    factories.member(user, team_a, Role.DEVELOPER)
    return user


@pytest.fixture
def bob(team_b):
    """A developer in team B."""
    user = factories.user("bob")
    factories.member(user, team_b, Role.DEVELOPER)
    return user


@pytest.fixture
def staff(db):
    return factories.user("root", staff=True)


def _client_for(user) -> APIClient:
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@pytest.fixture
def api_for():
    return _client_for


@pytest.fixture
def alice_api(alice):
    return _client_for(alice)


@pytest.fixture
def bob_api(bob):
    return _client_for(bob)
