"""Deployments' settings read at call time, declared once each (kernel/conf.py)."""

from kernel.conf import Setting, declare, getter

SETTINGS = declare(
    "deployments",
    Setting("POOLS_DIR", "", "where local pools keep their replicas' files", shown="`var/pools`"),
    Setting(
        "GATEWAY_STATUS_URL",
        "",
        "the gateway's /status, read by the pool pages",
        shown="`http://127.0.0.1:$GATEWAY_CONTROL_PORT/status` (the data port's when that is 0)",
    ),
)
get = getter(SETTINGS)
