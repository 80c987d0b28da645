"""Quiet by default (config/log_filters.py): housekeeping — periodic Celery tasks, polling
requests in gunicorn's access log, onnxruntime's advice — is dropped at LOG_LEVEL=INFO
and shown (as DEBUG) at LOG_LEVEL=DEBUG; events, warnings and errors always pass. The
records come from the libraries' own loggers and message formats (Celery's LOG_RECEIVED
and LOG_SUCCESS, gunicorn's Logger.access), not hand-made strings."""

import io
import logging
import os
import subprocess
import sys
from datetime import timedelta
from logging.config import dictConfig
from pathlib import Path
from types import SimpleNamespace

import pytest
from celery.app.trace import LOG_RECEIVED, LOG_SUCCESS
from django.conf import settings
from gunicorn.config import Config

from config.gunicorn_logging import QuietAccessLogger

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def console():
    """Django's LOGGING with its console handler writing to a buffer; restored after."""
    stream = io.StringIO()
    config = {
        **settings.LOGGING,
        "handlers": {"console": {**settings.LOGGING["handlers"]["console"], "stream": stream}},
    }
    root = logging.getLogger()
    level, handlers = root.level, root.handlers[:]
    dictConfig(config)
    yield stream
    root.handlers[:] = handlers
    root.setLevel(level)


def _emit_celery_noise():
    logging.getLogger("celery.beat").info(
        "Scheduler: Sending due task %s (%s)", "monitoring-canary-tick", "monitoring.canary_tick"
    )
    context = {"id": "c0ffee", "name": "monitoring.canary_tick", "args": "()", "kwargs": "{}", "eta": None}
    logging.getLogger("celery.worker.strategy").info(LOG_RECEIVED, context)
    logging.getLogger("celery.app.trace").info(LOG_SUCCESS, {**context, "return_value": "0", "runtime": 0.003})
    logging.getLogger("celery.worker.request").info(
        "Discarding revoked task: %s[%s]", "monitoring.canary_tick", "c0ffee"
    )


def test_periodic_task_lines_are_dropped_and_events_and_errors_kept(console):
    _emit_celery_noise()
    logging.getLogger("modelplane.events").info("rollout 3 (demo-ctr): transition step_1 -> step_2")
    logging.getLogger("celery.app.trace").error(
        "Task %s[%s] raised unexpected: %r", "monitoring.canary_tick", "c0ffee", ValueError("x")
    )
    logging.getLogger("celery.beat").warning("beat: schedule file unreadable")
    logging.getLogger("django.request").error(
        "Service Unavailable: %s", "/healthz", extra={"status_code": 503, "request": SimpleNamespace(path="/healthz")}
    )  # /healthz answering "not up yet"
    lines = console.getvalue().splitlines()
    assert len(lines) == 3, lines
    assert "transition step_1 -> step_2" in lines[0] and "raised unexpected" in lines[1] and "unreadable" in lines[2]


def test_log_level_debug_shows_housekeeping_as_debug(console):
    logging.getLogger().setLevel(logging.DEBUG)
    _emit_celery_noise()
    lines = console.getvalue().splitlines()
    assert len(lines) == 4 and all(" DEBUG " in line for line in lines), lines


def _access(logger, path: str, status: str = "200 OK", method: str = "GET", headers=()):
    req = SimpleNamespace(method=method, path=path, query="", uri=path, version=(1, 1), headers=list(headers))
    resp = SimpleNamespace(status=status, status_code=int(status.split()[0]), response_length=0, sent=0, headers=[])
    environ = {
        "REMOTE_ADDR": "127.0.0.1",
        "RAW_URI": path,
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
    }
    logger.access(resp, req, environ, timedelta(milliseconds=3))


def test_gunicorn_access_log_leaves_out_polling():
    cfg = Config()
    cfg.set("accesslog", "-")
    logger = QuietAccessLogger(cfg)
    stream = io.StringIO()
    for handler in logger.access_log.handlers:
        handler.setStream(stream)
    _access(logger, "/api/v1/gateway/routes", "304 Not Modified")  # the gateway's poll, ~3/s
    _access(logger, "/healthz")
    _access(logger, "/healthz", "503 Service Unavailable")  # while starting: the poller reads the answer
    _access(logger, "/deployments/endpoints/demo-ctr/", headers=[("HX-REQUEST", "true")])  # an htmx refresh
    _access(logger, "/api/v1/gateway/routes", "500 Internal Server Error")  # a failing poll is news
    _access(logger, "/models/")  # a person opening a page
    _access(logger, "/api/v1/rollouts/", method="POST", headers=[("HX-REQUEST", "true")])  # an action
    # `modelplane rollout watch`: its first poll is a line, its conditional polls (304 or 200) are not
    _access(logger, "/api/v1/rollouts/7/status/")
    _access(logger, "/api/v1/rollouts/7/status/", "304 Not Modified", headers=[("IF-NONE-MATCH", '"ab"')])
    _access(logger, "/api/v1/rollouts/7/status/", headers=[("IF-NONE-MATCH", '"ab"')])
    lines = stream.getvalue().splitlines()
    assert len(lines) == 4, lines
    assert "/api/v1/gateway/routes" in lines[0] and '" 500 ' in lines[0]
    assert "GET /models/" in lines[1] and "POST /api/v1/rollouts/" in lines[2]
    assert "GET /api/v1/rollouts/7/status/" in lines[3] and '" 200 ' in lines[3]


def test_bad_log_level_is_refused_by_name(tmp_path):
    env = {**os.environ, "LOG_LEVEL": "LOUD", "VAR_DIR": str(tmp_path / "var")}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0 and "LOG_LEVEL='LOUD'" in result.stderr and "DEBUG, INFO" in result.stderr


@pytest.mark.django_db
def test_each_committed_event_is_one_line(alice, team_a, caplog, django_capture_on_commit_callbacks):
    from registry.services.catalog import model_create

    caplog.set_level(logging.INFO, logger="modelplane.events")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        model_create(user=alice, name="ctr-events", team=team_a)
    assert not [r for r in caplog.records if r.name == "modelplane.events"]  # nothing before the commit
    for callback in callbacks:
        callback()
    lines = [r.getMessage() for r in caplog.records if r.name == "modelplane.events"]
    assert lines == ["model ctr-events: created -> registered"]
