"""Per-worker services when the suite runs under pytest-xdist (`make test` does, `-n` workers).

Loaded with `-p tests.xdist_workers` (the Makefile's pytest line) so that it runs before pytest-django
reads the settings: each worker `gwN` gets its own Redis db for the broker and the exposure
streams (db 2+N; `make test` alone uses db 0, `make run` db 1) and its own VAR_DIR (the MLflow
store, the generated secret key). pytest-django already gives each worker its own test
database (`test_<name>_gwN`), and every process a test starts listens on a free port.

The order of the collection (below) starts the longest modules first, so that no worker is
left with one of them at the end of the run.
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
    _shared = Path(os.environ.get("VAR_DIR", "var")).resolve()
    os.environ.setdefault("TINY_LLM_CACHE", str(_shared / "llm-cache"))  # one tiny LLM for every worker
    os.environ.setdefault("GR_CACHE", str(_shared / "gr-cache"))  # one tiny recommender for every worker

    os.environ["VAR_DIR"] = str(_shared / f"test-{WORKER}")
    Path(os.environ["VAR_DIR"]).mkdir(parents=True, exist_ok=True)


# The longest tests (minutes each: they start the whole platform or fuzz the API), started first.
LONGEST = (
    "test_make_run.py",
    "test_schemathesis.py",
    "test_rollout_low_traffic.py",
    "test_rollout_watch_browser.py",
    "test_experiment_page_browser.py",
    "test_rollout_integration.py",
    "test_mlflow_scope.py",  # a real MLflow store per test: ~80 s under load since the one-rule tests
    "test_backends.py",  # tritonserver, transformers serve and the provider stand-in, directly and via the gateway
    "test_release_integration.py",  # build, tune and two canaries on real processes
    "test_readme_gr.py",  # the README's GR block: a live server, a real build worker and tritonserver
)


def pytest_collection_modifyitems(config, items):
    """With `--dist loadscope --no-loadscope-reorder` a module's tests run on one worker, in order
    (several share one started stack, and some go on from what the one before did), and each idle
    worker takes the next module in this order (xdist's own reorder would put the modules with
    most tests first, and the longest single tests last). Order the modules so that the longest start first and the slow ones before the
    quick: a module's rank is its best item's; within a module the order stays the collection's.
    Every worker computes the same order."""
    if not WORKER:
        return
    rank: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        rank[module] = min(rank.get(module, 1 << 30), _order(item))
    first_seen = {module: n for n, module in enumerate(dict.fromkeys(item.nodeid.split("::", 1)[0] for item in items))}
    items.sort(key=lambda item: (rank[m := item.nodeid.split("::", 1)[0]], first_seen[m]))


def _order(item) -> int:
    """0.. for the longest (LONGEST's order), then the other slow ones, then the rest."""
    if item.path.name in LONGEST:
        return LONGEST.index(item.path.name)
    slow = item.get_closest_marker("integration") or item.get_closest_marker("browser")
    return len(LONGEST) if slow else len(LONGEST) + 1
