"""Monitoring's settings, declared once each (kernel/conf.py: a Django setting of the same name
wins, then the environment, then the default here; config/settings.py needs no monitoring
section)."""

from django.conf import settings

from kernel.conf import Setting, declare, getter, setting

SETTINGS = declare(
    "monitoring",
    Setting(
        "MONITORING_SCRAPE_TIMEOUT_S", 1.0, "per target without progress (connect, between bytes); ticks every 2 s"
    ),
    Setting("MONITORING_SCRAPE_DEADLINE_S", 5.0, "per target in all (the tick's task has a 10 s soft limit)"),
    Setting("MONITORING_SCRAPE_MAX_TARGETS", 2000, "targets per tick at most (make bench-collector measures 1,000)"),
    Setting(
        "MONITORING_SCRAPE_CONCURRENCY",
        128,
        "scrapes in flight at once on the one loop (more, on a busy CPU: timeouts fire before replies are read)",
    ),
    Setting("MONITORING_SCRAPE_KEEP_ALIVE", True, "keep each target's connection open between ticks (as Prometheus)"),
    Setting("MONITORING_SCRAPE_MAX_BYTES", 16 * 1024 * 1024, "a reply past this is that target's error"),
    Setting("MONITORING_SCRAPE_ALERT_AFTER_S", 30.0, "a target failing this long raises a scrape_failed alert"),
    Setting("MONITORING_RAW_RETENTION_HOURS", 24, "raw samples are kept this long"),
    Setting("MONITORING_ROLLUP_RETENTION_DAYS", 30, "rolled-up samples are kept this long"),
    Setting("MONITORING_RETENTION_BATCH", 50_000, "rows deleted per table per sweep"),
    Setting("MONITORING_GATEWAY_METRIC_PREFIX", "gateway_", "the prefix of the gateway's metric names"),
    Setting("MONITORING_NOTIFY_MAX_ATTEMPTS", 5, "deliveries of one notification at most"),
    Setting("MONITORING_NOTIFY_BACKOFF_S", 2.0, "a notification's first retry after this, doubling each time"),
    Setting("MONITORING_NOTIFY_TIMEOUT_S", 5.0, "one delivery's deadline"),
    Setting(
        "MONITORING_ALERT_GROUP_WINDOW_S",
        300.0,
        "alerts of one team, endpoint and kind inside this window go out as one notification (the first at once, "
        "the rest together at its end); 0: each on its own",
    ),
    Setting("MONITORING_PSI_THRESHOLD", 0.25, "the score-drift (PSI) threshold of a canary"),
    Setting("MONITORING_JUDGE_ALPHA", 0.05, "the judge's error rate per decision"),
    Setting("MONITORING_ALERT_WEBHOOKS", [], "webhook URLs that receive every team's alerts"),
    Setting("MONITORING_ALERT_EMAILS", [], "addresses that receive every team's alerts"),
    Setting(
        "MONITORING_TARGETS", [], "more scrape targets, a JSON list (monitoring/collection/targets.py)", kind="json"
    ),
    Setting(
        "MONITORING_PUBLIC_URL",
        lambda: f"http://localhost:{settings.PORT}",
        "the dashboard's base URL for links in notifications",
        shown="`http://localhost:$PORT`",
    ),
    Setting(
        "GATEWAY_METRICS_URL",
        "",
        "the gateway's /metrics, where the collector reads it",
        shown="`http://127.0.0.1:$GATEWAY_CONTROL_PORT/metrics` (the data port's when that is 0)",
    ),
    Setting("GATEWAY_METRICS_TOKEN", "", "the bearer token the gateway's /metrics and /status need"),
    Setting(
        "PROMETHEUS_URL", "", "read series from this Prometheus instead of the platform's store (docs/operations.md)"
    ),
    Setting("PROMETHEUS_TIMEOUT_S", 5.0, "one Prometheus query's deadline"),
    Setting("PROMETHEUS_STEP_S", 2.0, "Prometheus's scrape interval, the step of its range queries"),
)
get = getter(SETTINGS)


def targets_json() -> list[dict]:
    """MONITORING_TARGETS: a JSON list of scrape targets (see monitoring/collection/targets.py)."""
    return list(setting("MONITORING_TARGETS"))


def public_url() -> str:
    """Base URL of the dashboard for links in notifications (MONITORING_PUBLIC_URL)."""
    return setting("MONITORING_PUBLIC_URL").rstrip("/")
