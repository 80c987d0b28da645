"""Route entries the gateway refused, turned into alerts (issue 21).

The gateway applies its route table per entry (gateway/route_checks.py) and exports one
`gateway_route_refused{kind,name,code}` series per endpoint entry or key it did not
apply. The collector reads it from the same /metrics scrape as the traffic and raises one
critical alert per refused endpoint, naming it and the reason: that endpoint answers 503
`endpoint_refused` until the control plane sends an entry the gateway accepts (its
`/status` has the full sentence). A key left out is a warning. Alerts are deduplicated
per endpoint and kind (monitoring/services/alerts.py), so a refusal that lasts is one
open alert, not one per tick.
"""

from __future__ import annotations

from django.contrib.auth.models import Group

from monitoring.models import Severity
from monitoring.services.alerts import alert_raise

REFUSED = "route_refused"  # gateway/metrics.py ROUTE_REFUSED, after the prefix

# the gateway's codes (gateway/route_checks.CODES) as words for the alert
REASONS = {
    "invalid_entry": "the entry does not match the route table schema",
    "duplicate_endpoint": "two entries have its name",
    "unknown_keys": "its auth names keys the table does not define",
    "timeout_order": "its min_timeout_ms is above its timeout_ms",
    "grpc_replicas_mismatch": "its grpc_replicas are not one per replica",
    "invalid_signature": "a variant's signature is not valid",
    "duplicate_variant_names": "two of its variants have the same name",
    "stable_count": "it does not have exactly one stable variant",
    "weights_sum": "its live weights do not sum to 10000 basis points",
    "shadow_weight": "a shadow variant has a weight",
    "invalid_key": "the key does not match the route table schema",
    "duplicate_key": "another key has the same id or sha256",
}


def _labels(inner: str) -> dict:
    out = {}
    for part in inner.split('",'):
        name, _, value = part.partition('="')
        out[name.strip()] = value.rstrip('"')
    return out


def refused_entries(text: str, prefix: str = "gateway_") -> list[tuple[str, str, str]]:
    """[(kind, name, code)] of the `{prefix}route_refused` series at 1 in exposition text.
    Label values come from the route table (names match [A-Za-z0-9_.-/]), never quoted."""
    head = f"{prefix}{REFUSED}{{"
    out = []
    for line in text.splitlines():
        if not line.startswith(head):
            continue
        series, _, value = line.rpartition(" ")
        try:
            if float(value) < 1:
                continue
        except ValueError:
            continue
        labels = _labels(series[len(head) : series.rindex("}")])
        if {"kind", "name", "code"} <= set(labels):
            out.append((labels["kind"], labels["name"], labels["code"]))
    return sorted(out)


def route_refusals_alert(refused: dict) -> int:
    """One alert per refused entry: {(gateway URL, (kind, name, code)): {endpoint: team id}}. Returns how many."""
    for (url, (kind, name, code)), endpoint_teams in sorted(refused.items()):
        why = REASONS.get(code, code)
        team_id = endpoint_teams.get(name) if kind == "endpoint" else None
        if kind == "endpoint":
            reason = (
                f"The gateway refused the route entry of endpoint {name!r} ({code}: {why}); it answers 503 "
                "endpoint_refused there while every other endpoint is served. Fix or roll back what changed it."
            )
        else:
            reason = (
                f"The gateway left key {name!r} out of its route table ({code}: {why}); the key cannot authenticate."
            )
        alert_raise(
            kind=REFUSED,
            severity=Severity.CRITICAL if kind == "endpoint" else Severity.WARNING,
            endpoint=name if kind == "endpoint" else "",
            team=Group.objects.filter(pk=team_id).first() if team_id else None,
            reason=reason,
            evidence={"gateway": url, "kind": kind, "name": name, "code": code},
        )
    return len(refused)
