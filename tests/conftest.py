import os
import socket
from pathlib import Path

import pytest
from django.conf import settings
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from harness import factories
from harness.onnx import write as write_onnx
from harness.processes import CeleryWorker
from registry.models import Role

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
_HELD_SOCKETS: list[socket.socket] = []
MISSING = {s for s in os.environ.get("MODELPLANE_MISSING_SERVICES", "").split(",") if s}


def pytest_configure(config):
    # Test users' passwords are hashed once per user made and per login: PBKDF2's million
    # rounds cost ~0.4 s of CPU each, minutes over the suite. Servers started as processes
    # of their own (make run) keep the real hashers; none takes a password hashed here.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # Gateways the tests start serve /metrics without a token unless a test gives one
    # (gateway/process/settings.py refuses to start otherwise; tests of the closed default unset this).
    os.environ.setdefault("GATEWAY_METRICS_OPEN", "1")
    # Every gateway a test starts without a gRPC port of its own takes this run's free one, not
    # 8081: gRPC binds with SO_REUSEPORT, so two runs (or xdist workers) on 8081 would share it.
    # This process holds the port (bound with SO_REUSEPORT, not listening) for the whole run,
    # so no free_port() hands it to a server that binds it alone while no gateway has it.
    if "GATEWAY_GRPC_PORT" not in os.environ:
        hold = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        hold.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        hold.bind(("127.0.0.1", 0))
        _HELD_SOCKETS.append(hold)
        os.environ["GATEWAY_GRPC_PORT"] = str(hold.getsockname()[1])
    # The suite's experiment store is PostgreSQL (make run's default, the embedded chdb, is owned
    # by one process: the tests that need it open it or start its owner themselves).
    if "EXPERIMENT_STORE" not in os.environ:
        os.environ["EXPERIMENT_STORE"] = settings.EXPERIMENT_STORE = "postgres"
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


@pytest.fixture(autouse=True)
def _fresh_route_cache():
    """No route table built by an earlier test (its rows were rolled back with it)."""
    from deployments.routes import route_cache_clear

    route_cache_clear()


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


@pytest.fixture
def deployer(team_a):
    """A deployer in team A."""
    user = factories.user("dora")
    factories.member(user, team_a, Role.DEPLOYER)
    return user


@pytest.fixture
def deployer_api(deployer, api_for):
    return api_for(deployer)


@pytest.fixture
def artifact_factory(onnx_path, tmp_path):
    """factories.artifact bound to this test's ONNX file and directory."""

    def make(team, **kwargs):
        return factories.artifact(team, onnx_path, tmp_path, **kwargs)

    return make


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


# --- real processes ------------------------------------------------------------------------
def database_url_for_subprocess() -> str:
    """The URL of the database this test session uses (the test database), for children."""
    from django.db import connection

    cfg = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{cfg['NAME']}"
    user = cfg.get("USER") or "postgres"
    password = f":{cfg['PASSWORD']}" if cfg.get("PASSWORD") else ""
    return f"postgres://{user}{password}@{cfg.get('HOST') or '127.0.0.1'}:{cfg.get('PORT') or 5432}/{cfg['NAME']}"


@pytest.fixture
def subprocess_env(transactional_db, settings, tmp_path) -> dict:
    """Environment for a child process (worker, web, gateway) that shares this test's
    database, broker and artifact store. Tests using it see committed data only."""
    env = dict(os.environ)
    env.update(
        DATABASE_URL=database_url_for_subprocess(),
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
        ARTIFACT_ROOT=str(settings.ARTIFACT_ROOT),
        MLFLOW_TRACKING_URI=settings.MLFLOW_TRACKING_URI,
        VAR_DIR=str(settings.VAR_DIR),
        DJANGO_SETTINGS_MODULE="config.settings",
        PYTHONUNBUFFERED="1",
    )
    return env


@pytest.fixture
def celery_worker(subprocess_env, tmp_path):
    """Start a real worker (after purging stale messages); stopped at teardown."""
    from config.celery import app

    with app.connection_for_write() as conn:
        for queue in ("control", "build-cpu", "build-gpu"):
            try:
                conn.default_channel.queue_purge(queue)
            except Exception:  # a queue that does not exist yet has nothing to purge
                pass
    workers = []

    def start(**kwargs) -> CeleryWorker:
        worker = CeleryWorker(subprocess_env, tmp_path / f"worker-{len(workers)}.log", **kwargs).start()
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.stop()


# --- browser -------------------------------------------------------------------------------
CHROMIUM = os.environ.get("CHROMIUM_BIN", "/usr/bin/chromium")


@pytest.fixture
def browser_page(monkeypatch):
    """A page of Debian's Chromium driven by Playwright (never `playwright install`)."""
    import shutil

    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        if IN_CI:
            pytest.fail("chromium is not installed (apt-get install chromium); CI=true makes this a failure")
        pytest.skip("service:chromium not installed (apt-get install chromium)")
    # Playwright's sync API runs an event loop in this thread; the ORM calls the tests make
    # are plain synchronous test code. Scoped to the test: a leak would reach every child
    # process later tests start (and `check --deploy` rightly refuses it).
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--disable-quic",
            ],
        )
        yield browser.new_page(viewport={"width": 1280, "height": 900})
        browser.close()
