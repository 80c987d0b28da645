"""The platform's settings that Django's settings module reads at start-up, declared once each
(kernel/conf.py says how settings are declared, read and documented): config/settings.py reads
every one of them with `env(NAME)`, and docs/configuration.md's first table is generated from
this list."""

from __future__ import annotations

import os
from pathlib import Path

from kernel.conf import Setting, declare, from_environment

BASE_DIR = Path(__file__).resolve().parent.parent


def var_dir() -> Path:
    return Path(os.environ.get("VAR_DIR") or BASE_DIR / "var").resolve()


def _broker() -> str:
    return os.environ.get("CELERY_BROKER_URL") or "filesystem://"


PLATFORM = declare(
    "platform",
    # --- the process and its data
    Setting("VAR_DIR", lambda: str(BASE_DIR / "var"), "where the platform keeps its data", kind="path", shown="`var/`"),
    Setting(
        "DATABASE_URL",
        lambda: f"sqlite:///{var_dir() / 'db.sqlite3'}",
        "the relational database, e.g. `postgres://user@host:5432/db` (psycopg 3)",
        shown="`sqlite:///var/db.sqlite3`",
    ),
    Setting("DB_CONN_MAX_AGE", 60, "seconds a database connection is kept for reuse"),
    Setting(
        "CELERY_BROKER_URL",
        "filesystem://",
        "the task broker, `redis://…` or `amqp://…`",
        shown="`filesystem://` (folders under `var/broker/`); `make run`: `redis://127.0.0.1:6379/1` when that Redis answers",
    ),
    Setting(
        "MLFLOW_TRACKING_URI",
        lambda: f"sqlite:///{var_dir() / 'mlflow.db'}",
        "an MLflow tracking server or store",
        shown="`sqlite:///var/mlflow.db`",
    ),
    Setting(
        "MLFLOW_ARTIFACT_ROOT", lambda: str(var_dir() / "mlruns"), "MLflow's artifact store", shown="`var/mlruns/`"
    ),
    Setting("SECRET_KEY", "", "Django's secret key", shown="generated once into `var/secret_key`"),
    Setting("DEBUG", False, "`DEBUG=1` for development"),
    Setting(
        "PRODUCTION",
        False,
        "`PRODUCTION=1` behind HTTPS: HSTS, secure cookies, SSL redirect (`manage.py check --deploy` is clean)",
    ),
    Setting("SECURE_SSL_REDIRECT", True, "with PRODUCTION: redirect plain HTTP to HTTPS"),
    Setting("SECURE_HSTS_SECONDS", 31536000, "with PRODUCTION: the Strict-Transport-Security max-age"),
    Setting("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"], "host names the web server answers"),
    Setting("CSRF_TRUSTED_ORIGINS", [], "origins (scheme and host) trusted for unsafe requests behind a proxy"),
    Setting(
        "LOG_LEVEL", "INFO", "`DEBUG`, `INFO`, `WARNING`, `ERROR` or `CRITICAL` (anything else is refused at startup)"
    ),
    Setting("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend", "how alert e-mails are sent"),
    Setting("DEFAULT_FROM_EMAIL", "modelplane@localhost", "the sender of alert e-mails"),
    # --- logins
    Setting(
        "LOGIN_FAILURE_LIMIT", 5, "wrong passwords for one username from one address before that pair is locked out"
    ),
    Setting("LOGIN_LOCKOUT_MINUTES", 15.0, "how long a lockout lasts"),
    Setting(
        "TRUSTED_PROXIES",
        [],
        "addresses or networks (`10.0.0.0/8,192.168.1.5`) of the reverse proxies in front of the web server: only "
        "from them is `X-Forwarded-For` read for the client's address (login lockout)",
    ),
    Setting(
        "TRUSTED_ADMIN_NETWORKS", [], "client networks never locked out by wrong passwords (a bastion, the admins' VPN)"
    ),
    # --- uploads and artifacts
    Setting(
        "ARTIFACT_ROOT",
        lambda: str(var_dir() / "artifacts"),
        "the content-addressed artifact store",
        kind="path",
        shown="`var/artifacts`",
    ),
    Setting("MAX_UPLOAD_MB", 512, "larger uploads get 413"),
    Setting("VERSION_DATA_MAX_MB", 256, "a version's example or validation set, at most"),
    Setting("VERSION_DATA_MAX_ROWS", 1_000_000, "rows of a version's example or validation set, at most"),
    # --- health
    Setting(
        "HEALTHZ_EXPECT", [], "components besides database and broker that `/healthz` requires (set by `make run`)"
    ),
    Setting("HEALTHZ_MAX_AGE_S", 20, "a component's heartbeat older than this is down"),
    Setting(
        "HEALTHZ_TOKEN",
        "",
        "`Authorization: Bearer` value that reads `/healthz`'s components (staff sessions read them too; anyone "
        "else the status alone)",
        shown="(none; `make run`: one kept in `var/healthz_token`)",
    ),
    # --- what tenant URLs may reach
    Setting(
        "OUTBOUND_ALLOWED_HOSTS",
        [],
        "hosts that tenant URLs (alert webhooks, LLM backends, provider secrets' origins) may reach although they "
        "resolve to internal addresses; the platform's own listeners stay refused (docs/llm-endpoints.md)",
    ),
    Setting("OUTBOUND_ALLOWED_NETWORKS", [], "networks (CIDR) tenant URLs may reach although internal, as above"),
    Setting(
        "OUTBOUND_PLATFORM_LISTENERS",
        [],
        "the platform's listeners on other hosts (`host:port`), refused as tenant URLs",
    ),
    Setting(
        "OUTBOUND_LISTENER_SOURCES",
        ["deployments.selectors.pools.replica_listeners"],
        "callables returning more of the platform's listeners (every pool replica)",
    ),
    Setting("LLM_FIRST_TOKEN_TIMEOUT_MAX_MS", 60000, "the ceiling of an LLM endpoint's first-token timeout"),
    # --- make run's supervisor and local pools
    Setting("SUPERVISOR_BACKOFF_MAX_S", 30.0, "`make run`: the longest wait before restarting a crashing child"),
    Setting("SUPERVISOR_STABLE_AFTER_S", 60.0, "`make run`: a child's uptime that resets its crash streak"),
    Setting("POOL_PROBE_TIMEOUT_S", 2.0, "local pool replicas: one liveness probe's deadline (docs/pools.md)"),
    Setting("POOL_PROBE_UNREADY_AFTER", 2, "local pool replicas: consecutive failed probes before not ready"),
    Setting("POOL_PROBE_KILL_AFTER", 3, "local pool replicas: consecutive failed probes before killed and restarted"),
    Setting("POOL_PROBE_KILL_WINDOW_S", 6.0, "local pool replicas: the failures before a kill span at least this"),
    # --- Kubernetes pools (deployments/pool_policy.py, docs/pools.md)
    Setting("POOL_NAMESPACE_TEMPLATE", "modelplane-team-{team}", "the namespace each team's pools run in"),
    Setting("POOL_TEAM_NAMESPACES", {}, 'teams\' own namespaces, JSON `{"team": ["ns", …]}`', kind="json"),
    Setting("POOL_IMAGES", ["nvcr.io/nvidia/tritonserver:*-py3"], "images every team's pool may run (patterns)"),
    Setting("POOL_TEAM_IMAGES", {}, 'images a team may run besides, JSON `{"team": [pattern, …]}`', kind="json"),
    Setting("POOL_EGRESS_CIDRS", [], "where pool pods may connect besides DNS (the object store, CIDRs)"),
    Setting("KUBERNETES_PLATFORM_NAMESPACE", "modelplane", "the namespace the platform runs in, never a pool's"),
    Setting("KUBERNETES_PROMETHEUS_NAMESPACE", "monitoring", "Prometheus's namespace, never a pool's"),
    # --- ports
    Setting("PORT", 8000, "the web server's port"),
    Setting("GATEWAY_PORT", 8080, "the gateway's HTTP port (KServe v2, OpenAI API)"),
    Setting("GATEWAY_GRPC_PORT", 8081, "the gateway's KServe v2 gRPC port (0: none)"),
    Setting(
        "GATEWAY_CONTROL_PORT",
        8082,
        "the gateway's control port: `/metrics`, `/status`, health off its event loop; what the collector scrapes "
        "(0: none, the data port)",
    ),
    Setting(
        "MONITORING_TARGET_SOURCES",
        ["monitoring.collection.targets.targets_from_settings", "monitoring.selectors.targets.from_deployments"],
        "where the collector's scrape targets come from",
    ),
    # --- experiments' data path (docs/experiments.md)
    Setting(
        "EXPOSURE_STREAM_URL",
        lambda: _broker() if _broker().startswith("redis") else "",
        "the Redis Streams the gateway writes exposures and feedback to; empty: none",
        shown="the broker when it is Redis",
    ),
    Setting(
        "EXPERIMENT_STORE",
        "chdb",
        "the exposure and feedback store: `postgres`, `chdb`, `chdb:<path>` or `clickhouse://host:8123/db`",
        shown="`chdb` (`make run`: owned by its child experiment-data); the test suite: `postgres`",
    ),
    Setting("EXPERIMENT_STORE_DB", "modelplane", "the ClickHouse database the experiment tables live in"),
    Setting(
        "EVENT_LOG_URL",
        "",
        "the durable log between the gateway and the store, a NATS JetStream server (`nats://host:4222`); empty: the "
        "Redis Streams",
        shown="(none); `make run`: `nats://127.0.0.1:4222` when it answers",
    ),
    Setting("EVENT_LOG_PREFIX", "modelplane", "the log's streams and subjects start with this"),
    Setting(
        "FEEDBACK_EVENTS_PER_S_PER_KEY", 50000, "feedback events per second one key (or member) may send at each door"
    ),
    Setting("EXPOSURE_INGEST_RECORDS_PER_RUN", 100000, "exposure records the ingest takes per run"),
    Setting("FEEDBACK_INGEST_EVENTS_PER_RUN", 20000, "feedback events the ingest takes per run, shared fairly"),
    Setting("FEEDBACK_INGEST_RUN_S", 8.0, "an ingest run starts no new work past this"),
    Setting("FEEDBACK_LAG_ALERT_S", 30.0, "an endpoint whose feedback waited longer is alerted and `/healthz` says so"),
    Setting("FEEDBACK_TOKEN_EVENTS_PER_S_PER_ENDPOINT", 200, "the API's door for feedback without a key, per endpoint"),
    Setting("FEEDBACK_UNKNOWN_RETENTION_DAYS", 7, "feedback matching no exposure is kept this long"),
    Setting("EXPERIMENT_DATA_RETENTION_DAYS", 90, "ended experiments' rows are kept this long after their end"),
    Setting("DEAD_LETTER_RETENTION_DAYS", 30, "dead letters are kept this long"),
)


def env(name: str):
    """A platform setting's value at start-up (the environment, else its declared default)."""
    return from_environment(name)
