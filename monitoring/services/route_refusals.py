"""Route entries the gateway refused, turned into alerts.

The gateway applies its route table per entry (gateway/table/checks.py) and exports one
`gateway_route_refused{kind,name,code}` series per endpoint entry or key it did not
apply. The collector reads it from the same /metrics scrape as the traffic and raises one
critical alert per refused endpoint, naming it and the reason: that endpoint answers 503
`endpoint_refused` until the control plane sends an entry the gateway accepts (its
`/status` has the full sentence). A key left out is a warning. Alerts are deduplicated
per endpoint and kind (monitoring/services/alerts.py), so a refusal that lasts is one
open alert, not one per tick.

The control plane's own side (`route_problems_alert`, the same tick): an endpoint whose
rows the route table builder could not turn into the entry they ask for (a rollout whose
plan does not hold, say) is served with its stable alone or left out of the table
(deployments/routes.py); each is a `route_degraded` alert naming the endpoint and why
(critical when left out), and a key left out is a `route_key_left_out` warning.
"""

from __future__ import annotations

from django.contrib.auth.models import Group

from deployments.selectors.gateway_routes import ROUTE_LOADING as LOADING
from deployments.selectors.gateway_routes import route_table_problems
from monitoring.models import Severity
from monitoring.services.alerts import alert_raise, alerts_clear

REFUSED = "route_refused"  # gateway/telemetry/metrics.py ROUTE_REFUSED, after the prefix

# the gateway's codes (gateway/table/checks.py CODES) as words for the alert
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
    "invalid_secret": "the secret does not match the route table schema",
    "duplicate_secret": "another secret has the same id",
    "unknown_secret": "a backend names a secret the table does not carry",
    "duplicate_backend_ids": "two of its backends have the same id",
    "credentials_in_url": "a backend URL carries credentials (name a secret instead)",
}
ENTRY_KINDS = ("endpoint", "llm_endpoint")  # tensor and LLM endpoints: one namespace


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


def route_refusals_alert(refused: dict, *, complete: bool = False) -> int:
    """One alert per refused entry: {(gateway URL, (kind, name, code)): {endpoint: team id}}.
    `complete`: every gateway answered this tick, so an entry not refused now is accepted:
    its alert resolves itself. Returns how many are refused."""
    for (url, (kind, name, code)), endpoint_teams in sorted(refused.items()):
        why = REASONS.get(code, code)
        entry = kind in ENTRY_KINDS
        team_id = endpoint_teams.get(name) if entry else None
        if entry:
            reason = (
                f"The gateway refused the route entry of endpoint {name!r} ({code}: {why}); it answers 503 "
                "endpoint_refused there while every other endpoint is served. Fix or roll back what changed it."
            )
        elif kind == "secret":
            reason = (
                f"The gateway left secret {name!r} out of its route table ({code}: {why}); the LLM endpoints whose "
                "backends name it are refused."
            )
        else:
            reason = (
                f"The gateway left key {name!r} out of its route table ({code}: {why}); the key cannot authenticate."
            )
        alert_raise(
            kind=REFUSED,
            severity=Severity.CRITICAL if entry else Severity.WARNING,
            endpoint=name if entry else "",
            team=Group.objects.filter(pk=team_id).first() if team_id else None,
            reason=reason,
            evidence={"gateway": url, "kind": kind, "name": name, "code": code},
        )
    if complete:
        names = {name for (_, (kind, name, _)) in refused if kind in ENTRY_KINDS}
        if any(kind not in ENTRY_KINDS for (_, (kind, _, _)) in refused):
            names.add("")  # a key or secret still left out: the alert of those stays
        alerts_clear(kind=REFUSED, keep=names, reason="the gateway accepts the route entry again")
    return len(refused)


DEGRADED = "route_degraded"
KEY_LEFT_OUT = "route_key_left_out"


def route_problems_alert() -> int:
    """One alert per endpoint (and key) the route table builder could not build as its rows
    ask; an endpoint whose model is still loading is waiting, not broken: no alert (its page
    says it is loading). The alerts of endpoints built as asked again resolve themselves.
    Returns how many problems there are."""
    problems = route_table_problems()
    loading = {name for name, p in problems["endpoints"].items() if p["code"] == LOADING}
    teams = {
        team.pk: team
        for team in Group.objects.filter(
            pk__in={p["team_id"] for kind in problems.values() for p in kind.values() if p["team_id"]}
        )
    }
    for name, problem in sorted(problems["endpoints"].items()):
        if name in loading:
            continue
        alert_raise(
            kind=DEGRADED,
            severity=Severity.CRITICAL if problem["served"] == "none" else Severity.WARNING,
            endpoint=name,
            team=teams.get(problem["team_id"]),
            reason=problem["reason"] + " Fix or roll back the row that changed it.",
            evidence={"endpoint": name, "code": problem["code"], "served": problem["served"]},
        )
    for name, problem in sorted(problems["keys"].items()):
        alert_raise(
            kind=KEY_LEFT_OUT,
            severity=Severity.WARNING,
            endpoint="",
            team=teams.get(problem["team_id"]),
            reason=problem["reason"],
            evidence={"key": name, "code": problem["code"]},
        )
    alerts_clear(
        kind=DEGRADED,
        keep=set(problems["endpoints"]) - loading,
        reason="the route table carries the endpoint's entry as its rows ask again, or it waits for its model to load",
    )
    alerts_clear(
        kind=KEY_LEFT_OUT, keep={""} if problems["keys"] else set(), reason="every key is in the route table again"
    )
    return len(problems["endpoints"]) + len(problems["keys"])
