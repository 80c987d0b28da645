"""The registry's settings read at call time, declared once each (kernel/conf.py; the build
factory's are in registry/factory/conf.py)."""

from django.conf import settings

from kernel.conf import Setting, declare, getter

SETTINGS = declare(
    "registry",
    Setting(
        "PROVIDER_SECRETS_KEY",
        "",
        "Fernet keys (comma-separated, the first encrypts) that LLM provider secrets are stored under",
        shown="(none: derived from SECRET_KEY)",
    ),
    Setting("GR_CATALOG_MAX_ITEMS", 2_000_000, "items of one generative recommender catalog version, at most"),
    Setting(
        "GR_CATALOG_MAX_MB",
        lambda: settings.MAX_UPLOAD_MB,
        "an uploaded item catalog, at most",
        kind=int,
        shown="MAX_UPLOAD_MB",
    ),
    Setting(
        "LLM_MAX_ARCHIVE_MB",
        lambda: settings.MAX_UPLOAD_MB,
        "an uploaded LLM archive, at most",
        kind=int,
        shown="MAX_UPLOAD_MB",
    ),
    Setting("LLM_MAX_FILES", 2000, "files in an uploaded LLM model directory, at most"),
    Setting("LLM_MAX_DIR_MB", 8192, "an uploaded LLM model directory unpacked, at most"),
)
get = getter(SETTINGS)
