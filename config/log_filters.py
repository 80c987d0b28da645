"""Quiet by default: `make run` prints one line per event a person cares about (startup,
a build's stages, a rollout's steps, an alert — the audit trail's `modelplane.events`
lines), and the platform's per-second housekeeping only at LOG_LEVEL=DEBUG.

Housekeeping is: Celery beat sending a periodic task; the worker receiving or finishing
a task (a periodic one every second; what a build or a rollout does is already an event
line) or discarding an expired periodic one; the gunicorn access line of a request that
polls (the gateway's route table, /healthz, a page's htmx refresh, a chart's metrics
fetch); onnxruntime's quantizer advice on every INT8 build. A failed task is never
housekeeping: its ERROR line stays, and so does any other warning.
"""

from __future__ import annotations

import logging

# Access-log lines of these paths are polling: the gateway fetches its route table about
# three times a second, and health checks and charts poll too.
POLLED_PATHS = ("/api/v1/gateway/routes", "/api/v1/metrics/")
HEALTH_PATH = "/healthz"

_periodic: frozenset[str] | None = None


def periodic_task_names() -> frozenset[str]:
    """The task names in Celery beat's schedule (config/celery.py), read once."""
    global _periodic
    if _periodic is None:
        from config.celery import app

        _periodic = frozenset(entry["task"] for entry in app.conf.beat_schedule.values())
    return _periodic


def _task_name(record: logging.LogRecord) -> str | None:
    args = record.args  # "Discarding revoked task: %s[%s]" (name, id): an expired periodic task
    return args[0] if isinstance(args, tuple) and args else None


def is_housekeeping(record: logging.LogRecord) -> bool:
    """Whether `record` is routine noise (never an error, and a warning only where it is
    a library's standing advice)."""
    name = record.name
    if name == "django.request" and getattr(getattr(record, "request", None), "path", "") == HEALTH_PATH:
        return getattr(record, "status_code", None) == 503  # "not all components up" is an answer, not an error
    if name == "root" and "/onnxruntime/quantization/" in (record.pathname or ""):
        # the quantizer's advice, through the root logger, on every INT8 build
        return record.levelno <= logging.WARNING
    if record.levelno >= logging.WARNING:
        return False
    if name == "celery.beat":
        return str(record.msg).startswith("Scheduler: Sending due task")
    if name in ("celery.app.trace", "celery.worker.strategy"):
        from celery.app.trace import LOG_RECEIVED, LOG_SUCCESS  # loaded already where these loggers log

        return record.msg in (LOG_RECEIVED, LOG_SUCCESS)
    if name == "celery.worker.request":
        return _task_name(record) in periodic_task_names()
    if name == "gunicorn.access":
        return _is_polling(record)
    return False


def _is_polling(record: logging.LogRecord) -> bool:
    atoms = record.args if isinstance(record.args, dict) else {}
    path = atoms.get("U", "")
    status = str(atoms.get("s", ""))
    if path == HEALTH_PATH:
        return True  # its answer is the state (503 while starting); whoever polls reads it
    if status.startswith(("4", "5")) and status != "404":
        return False  # a failing poll is worth a line
    if path.startswith(POLLED_PATHS):
        return True
    headers = {k.lower(): v for k, v in atoms.items() if isinstance(k, str) and k.startswith("{") and k.endswith("}i")}
    if atoms.get("m") == "GET" and headers.get("{if-none-match}i", "-") not in ("", "-"):
        return True  # a conditional GET is a poll (`modelplane rollout watch`): 304 while nothing changed
    return atoms.get("m") == "GET" and headers.get("{hx-request}i") == "true"


class QuietHousekeeping(logging.Filter):
    """Drops housekeeping records unless the root logger is at DEBUG (LOG_LEVEL=DEBUG),
    where they are shown, relabelled DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not is_housekeeping(record):
            return True
        if logging.getLogger().isEnabledFor(logging.DEBUG):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return True
        return False


class QuietKombuHostname(logging.Filter):
    """kombu warns "No hostname was supplied" on every connection of the filesystem
    broker `make run` uses by default; there is no hostname to supply."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("No hostname was supplied")
