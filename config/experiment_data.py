"""What `make run` says about the experiment data path: which store (EXPERIMENT_STORE, by default
chdb, owned by its child experiment-data) and which log (NATS JetStream when one answers)."""

from django.conf import settings


def experiment_data_said() -> str:
    """Which store and which log the experiment data path uses, for make run's log."""
    from experiments.store import store_kind

    url = event_log_url()
    log = f"NATS JetStream at {url} (prefix {settings.EVENT_LOG_PREFIX})" if url else "Redis Streams"
    owner = {
        "chdb": "chdb, in-process in the child experiment-data",
        "clickhouse": f"the ClickHouse server {settings.EXPERIMENT_STORE}",
        "postgres": "PostgreSQL (the relational database)",
    }[store_kind()]
    return f"experiment data: store {owner}; log {log}"


def event_log_url() -> str:
    from experiments.eventlog import log_url

    return log_url()
