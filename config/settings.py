"""Settings, all from the environment (see docs/configuration.md).

Defaults make one machine work with nothing running: SQLite, kombu's filesystem
broker and a local MLflow store, all under VAR_DIR. Set DATABASE_URL,
CELERY_BROKER_URL and MLFLOW_TRACKING_URI to use real services.

Why this is one long module: Django reads one settings module; each block is a few
settings of one concern, read top to bottom, and splitting them would hide the defaults.
"""

import os
import secrets
from datetime import timedelta
from pathlib import Path

import dj_database_url

from config import client_ip as _client_ip
from config.env import BASE_DIR, env

VAR_DIR = Path(env("VAR_DIR")).resolve()
VAR_DIR.mkdir(parents=True, exist_ok=True)


def _secret_key() -> str:
    """SECRET_KEY from the environment, else generated once into VAR_DIR."""
    if env("SECRET_KEY"):
        return env("SECRET_KEY")
    key_file = VAR_DIR / "secret_key"
    if not key_file.exists():
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(64))
    return key_file.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = env("DEBUG")
# PRODUCTION=1 turns on the HTTPS-only settings that `manage.py check --deploy` asks for.
PRODUCTION = env("PRODUCTION")
ALLOWED_HOSTS = env("ALLOWED_HOSTS")
CSRF_TRUSTED_ORIGINS = env("CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",
    "django_htmx",
    "template_partials",
    "config",
    "registry",
    "experiments",
    "deployments",
    "monitoring",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "kernel.csp.ContentSecurityPolicyMiddleware",  # every reply: only this server's scripts (kernel/csp.py)
    "kernel.middleware.RejectNulMiddleware",  # PostgreSQL text cannot hold U+0000
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "registry.parsers.UploadNamesMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "axes.middleware.AxesMiddleware",  # last: turns a lockout into the 429 page
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "config.context_processors.platform",
            ],
            "builtins": ["template_partials.templatetags.partials", "registry.templatetags.figures"],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env("DATABASE_URL"),
        conn_max_age=env("DB_CONN_MAX_AGE"),
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # Web, worker, beat and the pool supervisor share one SQLite file: WAL lets readers
    # run beside a writer, IMMEDIATE transactions take the write lock up front (so the
    # busy timeout applies instead of a "database is locked" on a read→write upgrade).
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        timeout=20, transaction_mode="IMMEDIATE", init_command="PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
    )
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    # A file (not :memory:) so worker processes started by integration tests see it.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test-db.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# --- login throttling (django-axes) -----------------------------------------------------
# LOGIN_FAILURE_LIMIT wrong passwords for one username from one address lock that pair out
# for LOGIN_LOCKOUT_MINUTES (the right password included: 429 with the lockout page); the
# same username from another address is not locked; a successful login resets the count.
# The address is the peer's, or behind TRUSTED_PROXIES the client's from X-Forwarded-For
# (config/client_ip.py); TRUSTED_ADMIN_NETWORKS are never locked out. `manage.py
# axes_reset_username NAME` unlocks one username, `manage.py axes_reset` everyone.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = env("LOGIN_FAILURE_LIMIT")
AXES_COOLOFF_TIME = timedelta(minutes=env("LOGIN_LOCKOUT_MINUTES"))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
TRUSTED_PROXIES = _client_ip.parse_networks("TRUSTED_PROXIES", env("TRUSTED_PROXIES"))
TRUSTED_ADMIN_NETWORKS = _client_ip.parse_networks("TRUSTED_ADMIN_NETWORKS", env("TRUSTED_ADMIN_NETWORKS"))
AXES_CLIENT_IP_CALLABLE = "config.client_ip.client_ip"
AXES_WHITELIST_CALLABLE = "config.client_ip.never_locked"
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "auth/locked.html"
AXES_VERBOSE = False

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "registry:model-list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
FORMAT_MODULE_PATH = ["config.formats"]  # a 24-hour clock everywhere (config/formats/en/formats.py)
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "config.staticfiles.FastCompressedStaticFilesStorage"},  # config/staticfiles.py
}

# --- platform -------------------------------------------------------------------------
ARTIFACT_ROOT = Path(env("ARTIFACT_ROOT")).resolve()
MAX_UPLOAD_MB = env("MAX_UPLOAD_MB")
VERSION_DATA_MAX_MB = env("VERSION_DATA_MAX_MB")  # a version's example / validation set
VERSION_DATA_MAX_ROWS = env("VERSION_DATA_MAX_ROWS")
# Uploads stream to disk past 2.5 MB; the request-size check happens before that.
FILE_UPLOAD_MAX_MEMORY_SIZE = 2_621_440
FILE_UPLOAD_TEMP_DIR = None
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024

MLFLOW_TRACKING_URI = env("MLFLOW_TRACKING_URI")
MLFLOW_ARTIFACT_ROOT = env("MLFLOW_ARTIFACT_ROOT")

# /healthz: components besides database and broker that must be up (set by `make run`).
HEALTHZ_EXPECT = env("HEALTHZ_EXPECT")
HEALTHZ_MAX_AGE_S = env("HEALTHZ_MAX_AGE_S")
# /healthz tells anyone ok/degraded; the components (hosts, pids, errors) only to staff or to
# `Authorization: Bearer $HEALTHZ_TOKEN` (`make run` makes one: VAR_DIR/healthz_token)
HEALTHZ_TOKEN = env("HEALTHZ_TOKEN")
# Hosts that user-configured outbound URLs (alert webhooks) may reach even when they
# resolve to loopback/private/link-local addresses (kernel/outbound.py); exact names.
OUTBOUND_ALLOWED_HOSTS = env("OUTBOUND_ALLOWED_HOSTS")
# Networks (CIDR, comma-separated; default none) that tenant URLs may reach although they are
# internal (e.g. 10.20.0.0/16 where the teams' vLLM servers run): LLM backend base URLs,
# webhooks, provider secrets' origins. Checked at registration and by the gateway at connect
# (it gets them in its route table). The platform's own listeners stay refused whatever is listed.
OUTBOUND_ALLOWED_NETWORKS = env("OUTBOUND_ALLOWED_NETWORKS")
# The platform's listeners on other hosts ("host:port", comma-separated; default none), refused
# as a tenant URL like this host's PORT, GATEWAY_PORT, GATEWAY_GRPC_PORT and every pool replica
# (OUTBOUND_LISTENER_SOURCES: callables returning "host:port"/URL entries).
OUTBOUND_PLATFORM_LISTENERS = env("OUTBOUND_PLATFORM_LISTENERS")
OUTBOUND_LISTENER_SOURCES = env("OUTBOUND_LISTENER_SOURCES")
# The longest first-token timeout an LLM endpoint may set (ms, default 60000): enforced when an
# endpoint is saved and by the gateway (route table `llm_rules`), so a backend that never answers
# holds a connection this long at most.
LLM_FIRST_TOKEN_TIMEOUT_MAX_MS = env("LLM_FIRST_TOKEN_TIMEOUT_MAX_MS")
# `make run` restarts a child that dies after 0, 1, 2, 4, ... s, at most this long; the
# streak resets once the child stayed up SUPERVISOR_STABLE_AFTER_S.
SUPERVISOR_BACKOFF_MAX_S = env("SUPERVISOR_BACKOFF_MAX_S")
SUPERVISOR_STABLE_AFTER_S = env("SUPERVISOR_STABLE_AFTER_S")

# Local pool replicas are probed each supervisor tick (GET /v2/health/live with this
# deadline) and judged on consecutive failures (deployments/drivers/liveness.py): not ready
# after UNREADY_AFTER, killed and restarted after KILL_AFTER spanning KILL_WINDOW_S.
POOL_PROBE_TIMEOUT_S = env("POOL_PROBE_TIMEOUT_S")
POOL_PROBE_UNREADY_AFTER = env("POOL_PROBE_UNREADY_AFTER")
POOL_PROBE_KILL_AFTER = env("POOL_PROBE_KILL_AFTER")
POOL_PROBE_KILL_WINDOW_S = env("POOL_PROBE_KILL_WINDOW_S")

# What a team's Kubernetes pool may declare (deployments/pool_policy.py, docs/pools.md): the
# namespace the platform assigns each team ({team}: its name as a DNS label), or, for the teams
# an operator lists, exactly the namespaces listed (JSON {"team": ["ns", ...]}, the first being
# its default); the images every team may run and those a team may run besides (patterns
# "registry/repository:tag-glob" or "registry/repository@sha256:digest"); the addresses pool
# pods may open connections to besides DNS (the object store, CIDRs); the namespace the
# platform runs in and Prometheus's, never a pool's.
POOL_NAMESPACE_TEMPLATE = env("POOL_NAMESPACE_TEMPLATE")
POOL_TEAM_NAMESPACES = env("POOL_TEAM_NAMESPACES")
POOL_IMAGES = env("POOL_IMAGES")
POOL_TEAM_IMAGES = env("POOL_TEAM_IMAGES")
POOL_EGRESS_CIDRS = env("POOL_EGRESS_CIDRS")
KUBERNETES_PLATFORM_NAMESPACE = env("KUBERNETES_PLATFORM_NAMESPACE")
KUBERNETES_PROMETHEUS_NAMESPACE = env("KUBERNETES_PROMETHEUS_NAMESPACE")

GATEWAY_PORT = env("GATEWAY_PORT")
GATEWAY_GRPC_PORT = env("GATEWAY_GRPC_PORT")  # KServe v2 gRPC; 0: none
# /metrics, /status and health answered off the gateway's event loop (gateway/process/control.py): what the
# collector scrapes, so samples are not lost while the data path is saturated; 0: none (the data port)
GATEWAY_CONTROL_PORT = env("GATEWAY_CONTROL_PORT")
# What monitoring's collector scrapes: targets from MONITORING_TARGETS (JSON) and, from
# deployments, the gateway and each pool replica serving an endpoint.
MONITORING_TARGET_SOURCES = env("MONITORING_TARGET_SOURCES")
PORT = env("PORT")

# --- Celery -----------------------------------------------------------------------------
CELERY_BROKER_URL = env("CELERY_BROKER_URL")
# Redis Streams the gateway writes exposures and feedback to (experiments/services/ingest.py drains them);
# defaults to the broker when that is Redis. Empty: no exposure log (feedback via the API still works).
EXPOSURE_STREAM_URL = env("EXPOSURE_STREAM_URL")
# The exposure and feedback store (experiments/store.py): `postgres` (the relational database),
# `chdb` (ClickHouse's engine embedded, under VAR_DIR/experiment-store, owned by the
# experiment-data process), `chdb:<path>`, or a ClickHouse server `clickhouse://host:8123/db`;
# EXPERIMENT_STORE_DB is the ClickHouse database the tables live in.
EXPERIMENT_STORE = env("EXPERIMENT_STORE")
# The durable log between the gateway and the store: a NATS JetStream server (`nats://host:4222`,
# streams and subjects under EVENT_LOG_PREFIX, gateway/contracts/log_contract.py); empty, or a server that
# does not answer: the Redis Streams of EXPOSURE_STREAM_URL. `make run` sets it when one answers.
EVENT_LOG_URL = env("EVENT_LOG_URL")
EVENT_LOG_PREFIX = env("EVENT_LOG_PREFIX")
EXPERIMENT_STORE_DB = env("EXPERIMENT_STORE_DB")
# Online-experiment feedback: events per second one inference key (or member) may send at each
# door; how long rows are kept (unknown ones, matching no exposure, sooner; ended experiments'
# rows after their end; dead letters); docs/experiments.md.
FEEDBACK_EVENTS_PER_S_PER_KEY = env("FEEDBACK_EVENTS_PER_S_PER_KEY")
# The ingest's work per run (experiments.ingest, every second): exposure records, then feedback
# events shared fairly across every endpoint's and key's stream, and no new work past the time;
# an endpoint whose feedback waited longer than FEEDBACK_LAG_ALERT_S is alerted and /healthz says so.
EXPOSURE_INGEST_RECORDS_PER_RUN = env("EXPOSURE_INGEST_RECORDS_PER_RUN")
FEEDBACK_INGEST_EVENTS_PER_RUN = env("FEEDBACK_INGEST_EVENTS_PER_RUN")
FEEDBACK_INGEST_RUN_S = env("FEEDBACK_INGEST_RUN_S")
FEEDBACK_LAG_ALERT_S = env("FEEDBACK_LAG_ALERT_S")
# The API's door for feedback without a key (exposure tokens), per endpoint; the gateway's door
# sizes the same budget from the experiment's exposures (docs/experiments.md).
FEEDBACK_TOKEN_EVENTS_PER_S_PER_ENDPOINT = env("FEEDBACK_TOKEN_EVENTS_PER_S_PER_ENDPOINT")
FEEDBACK_UNKNOWN_RETENTION_DAYS = env("FEEDBACK_UNKNOWN_RETENTION_DAYS")
EXPERIMENT_DATA_RETENTION_DAYS = env("EXPERIMENT_DATA_RETENTION_DAYS")
DEAD_LETTER_RETENTION_DAYS = env("DEAD_LETTER_RETENTION_DAYS")
CELERY_BROKER_TRANSPORT_OPTIONS: dict = {}
if CELERY_BROKER_URL.startswith("filesystem://"):
    _broker_dir = VAR_DIR / "broker"
    for sub in ("in", "processed", "control"):
        (_broker_dir / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "in"),
        "data_folder_out": str(_broker_dir / "in"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "control"
CELERY_TASK_QUEUES_NAMES = ("control", "build-cpu", "build-gpu")
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_TASK_ALWAYS_EAGER = False

# --- REST API ---------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "kernel.api.Pagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": [
        "kernel.api.StrictFilterBackend",
        "rest_framework.filters.OrderingFilter",
        "rest_framework.filters.SearchFilter",
    ],
    "DEFAULT_SCHEMA_CLASS": "kernel.schema.AutoSchema",
    "EXCEPTION_HANDLER": "kernel.api.exception_handler",
    # JSON bodies only (anything else is a 415); the version upload adds multipart itself.
    "DEFAULT_PARSER_CLASSES": ["kernel.parsers.StrictJSONParser"],
}
# API docs grouped by area: each operation's tag is that of the last resource word in its
# path found here (/endpoints/{name}/rollouts/ -> rollouts; /versions/{id}/builds/ -> builds),
# kernel.schema.AutoSchema.get_tags; tests/security/test_api_docs.py checks every operation
# has a tag of SPECTACULAR_SETTINGS["TAGS"] and none is left under "v1".
API_RESOURCE_TAGS = {
    "models": "registry",
    "versions": "registry",
    "data": "registry",
    "aliases": "registry",
    "llm-versions": "registry",
    "item-catalogs": "registry",
    "secrets": "keys",
    "events": "audit",
    "teams": "teams",
    "builds": "builds",
    "artifacts": "builds",
    "pools": "deployments",
    "pool-secret-bindings": "deployments",
    "endpoints": "deployments",
    "gateway": "deployments",
    "inference-keys": "keys",
    "rollouts": "rollouts",
    "rollout-forecast": "rollouts",
    "releases": "releases",
    "metrics": "monitoring",
    "score-samples": "monitoring",
    "verdicts": "monitoring",
    "alerts": "alerts",
    "silences": "alerts",
    "notification-channels": "alerts",
    "experiments": "experiments",
    "feedback": "feedback",
    "training-experiments": "training",
    "datasets": "datasets",
}
API_TAGS = [
    ("registry", "Registered models, their versions (uploads and MLflow sources), signatures and data."),
    ("builds", "The artifact factory: builds of a version into serving variants, and their artifacts."),
    ("deployments", "Serving pools, endpoints, and the gateway's route table."),
    ("keys", "Inference keys: who may call a team's endpoints, at what rate."),
    ("rollouts", "Canary rollouts of an endpoint's candidate, their steps, and the traffic forecast."),
    ("releases", "Releases: build, tune and canary a version in one request."),
    ("monitoring", "Per-variant metrics, score samples and the canary judge's verdicts."),
    ("alerts", "Alerts, their notification channels."),
    ("experiments", "Online A/B experiments on endpoints: arms, results, ship and stop."),
    ("feedback", "Clicks, conversions and values fed back for online experiments."),
    ("training", "MLflow training experiments and runs of your teams."),
    ("datasets", "Training datasets built from an endpoint's captured requests joined with their clicks."),
    ("teams", "Your teams and your role in each."),
    ("audit", "The audit trail: who changed what, when, from and to."),
]

SPECTACULAR_SETTINGS = {
    "TITLE": "modelplane API",
    "TAGS": [{"name": name, "description": description} for name, description in API_TAGS],
    "DESCRIPTION": "Registry, builds, serving pools, rollouts and monitoring for online inference.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Swagger UI and Redoc from drf-spectacular-sidecar's pinned copies, served by this
    # server (whitenoise): the docs work offline and load nothing from a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # One stable schema name per choice set (several models have a "status").
    "ENUM_NAME_OVERRIDES": {
        f"{name}Enum": f"{app}.models.{name}"
        for app, names in {
            "registry": [
                "Role",
                "Task",
                "VersionSource",
                "Framework",
                "VersionStatus",
                "BuildStatus",
                "ArtifactStatus",
            ],
            "deployments": ["PoolDriver", "DeviceKind", "PoolStatus", "ReplicaStatus", "PoolModelState"],
            "monitoring": ["VerdictOutcome", "Severity", "AlertStatus", "ChannelKind", "DeliveryStatus"],
        }.items()
        for name in names
    }
    | {
        "DataKindEnum": "registry.models.DataKind",
        "OnInconclusiveEnum": "deployments.models.rollouts.ON_INCONCLUSIVE_CHOICES",
        "GuardrailStatusEnum": "experiments.api.results_schema.GUARDRAIL_STATUS",
        "BuildVariantEnum": "registry.factory.VARIANTS",  # a release's variant and a tune's variants
        "BuildTargetEnum": "registry.factory.BUILD_TARGETS",  # what a build may ask for (GR targets too)
        "RolloutArmRoleEnum": "deployments.selectors.rollout_page.ARM_ROLES",
    },
}

# --- security (PRODUCTION=1 behind HTTPS) ------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
if PRODUCTION:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env("SECURE_SSL_REDIRECT")
    SECURE_HSTS_SECONDS = env("SECURE_HSTS_SECONDS")
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True

EMAIL_BACKEND = env("EMAIL_BACKEND")
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL")

# LOG_LEVEL (INFO): one line per meaningful event; DEBUG adds the per-second housekeeping
# (periodic Celery tasks, polling requests) that config/log_filters.py otherwise drops.
LOG_LEVEL = env("LOG_LEVEL").strip().upper()
if LOG_LEVEL not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(f"LOG_LEVEL={LOG_LEVEL!r}: use one of DEBUG, INFO, WARNING, ERROR, CRITICAL.")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s", "datefmt": "%Y-%m-%d %H:%M:%S"}
    },
    "filters": {
        "housekeeping": {"()": "config.log_filters.QuietHousekeeping"},
        "kombu_hostname": {"()": "config.log_filters.QuietKombuHostname"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "filters": ["housekeeping", "kombu_hostname"],
        }
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"django.server": {"level": "WARNING"}},
}
