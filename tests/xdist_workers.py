"""Per-worker services when the suite runs under pytest-xdist (`make test` does, `-n` workers).

Loaded with `-p tests.xdist_workers` (pyproject's addopts) so that it runs before pytest-django
reads the settings: each worker `gwN` gets its own Redis db for the broker and the exposure
streams (db 2+N; `make test` alone uses db 0, `make run` db 1) and its own VAR_DIR (the MLflow
store, the generated secret key). pytest-django already gives each worker its own test
database (`test_<name>_gwN`), and every process a test starts listens on a free port.

Under xdist the integration and browser tests are collected first, so the longest start
first, spread over the workers, instead of several of them ending the run on one worker.
"""

import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def _own_redis_db(url: str, number: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{2 + number}"))


if WORKER.startswith("gw"):
    _number = int(WORKER[2:])
    if os.environ.get("CELERY_BROKER_URL", "").startswith("redis://"):
        os.environ["CELERY_BROKER_URL"] = _own_redis_db(os.environ["CELERY_BROKER_URL"], _number)
    if os.environ.get("EXPOSURE_STREAM_URL", "").startswith("redis://"):
        os.environ["EXPOSURE_STREAM_URL"] = _own_redis_db(os.environ["EXPOSURE_STREAM_URL"], _number)
    os.environ["VAR_DIR"] = str(Path(os.environ.get("VAR_DIR", "var")).resolve() / f"test-{WORKER}")
    Path(os.environ["VAR_DIR"]).mkdir(parents=True, exist_ok=True)


def _slow_first(item) -> int:
    return 0 if item.get_closest_marker("integration") or item.get_closest_marker("browser") else 1


def pytest_collection_modifyitems(config, items):
    if WORKER:  # every worker collects the same order (xdist checks), so this is deterministic
        items.sort(key=_slow_first)
