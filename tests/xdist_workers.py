"""Per-worker services when the suite runs under pytest-xdist (`make test` does, `-n` workers).

Loaded with `-p tests.xdist_workers` (the Makefile's pytest line) so that it runs before pytest-django
reads the settings: each worker `gwN` gets its own Redis db for the broker and the exposure
streams (db 2+N; `make test` alone uses db 0, `make run` db 1) and its own VAR_DIR (the MLflow
store, the generated secret key). pytest-django already gives each worker its own test
database (`test_<name>_gwN`), and every process a test starts listens on a free port.

The order of the collection (below) gives every worker its share of the slow tests at the
start of its block, the longest first, so that no worker is left with several of them at
the end of the run.
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


# The longest tests (minutes each: they start the whole platform or fuzz the API), started first.
LONGEST = (
    "test_make_run.py",
    "test_demo_experiment.py",
    "test_schemathesis.py",
    "test_platform_heals.py",
    "test_rollout_low_traffic.py",
    "test_rollout_watch_browser.py",
    "test_experiment_page_browser.py",
    "test_rollout_integration.py",
)


def _rank(item) -> int:
    name = item.path.name
    if name in LONGEST:
        return LONGEST.index(name)
    return len(LONGEST) if item.get_closest_marker("integration") or item.get_closest_marker("browser") else -1


def pytest_collection_modifyitems(config, items):
    """With `--dist worksteal` each worker first gets an equal contiguous block of the collection
    (then idle workers steal from the busiest). Order it so that every block begins with its
    share of the slow tests, longest first, dealt round robin, and goes on with fast ones in
    collection order (a module's tests together). Every worker computes the same order."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if not WORKER or workers < 2:
        return
    slow = sorted((item for item in items if _rank(item) >= 0), key=_rank)
    fast = [item for item in items if _rank(item) < 0]
    dealt = [slow[n::workers] for n in range(workers)]
    ordered, remaining = [], len(items)
    for n in range(workers):
        size = remaining // (workers - n)  # worksteal's first split (xdist/scheduler/worksteal.py)
        remaining -= size
        block = dealt[n][:size]
        fill = size - len(block)
        block += fast[:fill]
        del fast[:fill]
        ordered += block
    ordered += fast  # only when the slow share overflowed a block
    items[:] = ordered
