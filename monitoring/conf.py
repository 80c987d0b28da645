"""Monitoring settings: a Django setting of the same name wins, then the environment,
then the default here (kernel.conf.setting; config/settings.py needs no monitoring section)."""

import json
import os

from django.conf import settings

from kernel.conf import setting

DEFAULTS = {
    "MONITORING_SCRAPE_TIMEOUT_S": 1.0,  # per target without progress (connect, between bytes); ticks every 2 s
    "MONITORING_SCRAPE_DEADLINE_S": 5.0,  # per target in all (the tick's task has a 10 s soft limit)
    "MONITORING_SCRAPE_MAX_TARGETS": 2000,  # bounded batch per tick (make bench-collector measures 1,000)
    "MONITORING_SCRAPE_CONCURRENCY": 128,  # in flight at once on the one loop (more, on a busy CPU: timeouts fire before replies are read)
    "MONITORING_SCRAPE_KEEP_ALIVE": True,  # keep each target's connection open between ticks (as Prometheus)
    "MONITORING_SCRAPE_MAX_BYTES": 16 * 1024 * 1024,  # a reply past this is that target's error
    "MONITORING_SCRAPE_ALERT_AFTER_S": 30.0,  # a target failing this long raises a scrape_failed alert
    "MONITORING_RAW_RETENTION_HOURS": 24,
    "MONITORING_ROLLUP_RETENTION_DAYS": 30,
    "MONITORING_RETENTION_BATCH": 50_000,  # rows deleted per table per sweep
    "MONITORING_GATEWAY_METRIC_PREFIX": "gateway_",
    "MONITORING_NOTIFY_MAX_ATTEMPTS": 5,
    "MONITORING_NOTIFY_BACKOFF_S": 2.0,  # first retry after this, doubling each time
    "MONITORING_NOTIFY_TIMEOUT_S": 5.0,
    # Alerts of one team, endpoint and kind inside this window go out as one notification
    # (the first at once, the rest together at the end of the window); 0: each on its own.
    "MONITORING_ALERT_GROUP_WINDOW_S": 300.0,
    "MONITORING_PSI_THRESHOLD": 0.25,
    "MONITORING_JUDGE_ALPHA": 0.05,
    # lists: comma-separated in the environment
    "MONITORING_ALERT_WEBHOOKS": [],  # webhook URLs that receive every team's alerts
    "MONITORING_ALERT_EMAILS": [],
    "MONITORING_TARGET_SOURCES": ["monitoring.targets.targets_from_settings"],
    # the gateway's /metrics: where (default: this machine's GATEWAY_PORT) and its bearer token
    "GATEWAY_METRICS_URL": "",
    "GATEWAY_METRICS_TOKEN": "",
}


def get(name: str):
    return setting(name, DEFAULTS[name])


def targets_json() -> list[dict]:
    """MONITORING_TARGETS: a JSON list of scrape targets (see monitoring/targets.py)."""
    if hasattr(settings, "MONITORING_TARGETS"):
        return list(settings.MONITORING_TARGETS)
    raw = os.environ.get("MONITORING_TARGETS", "").strip()
    return json.loads(raw) if raw else []


def public_url() -> str:
    """Base URL of the dashboard for links in notifications (MONITORING_PUBLIC_URL)."""
    return setting("MONITORING_PUBLIC_URL", f"http://localhost:{settings.PORT}").rstrip("/")
