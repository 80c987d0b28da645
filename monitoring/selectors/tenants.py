"""Per inference key traffic, read live from the gateway's /metrics for the keys page.

The gateway counts each authenticated key's requests (`gateway_tenant_requests_total
{team,key,endpoint,status}`, `gateway_tenant_request_duration_seconds{team,key}`) and
every refusal of its key checks (`gateway_auth_rejections_total{endpoint,team,key,reason}`,
key "" when no valid key was sent), and LLM usage per key (issue 27: `gateway_llm_tokens_total
{endpoint,variant,team,key,kind}` with kind prompt|completion, counted from the backends'
usage, and `gateway_llm_cost_total{endpoint,variant,team,key}` from the backends' prices
per 1k tokens). Labels come from the route table (the key's
`gateway_id`, e.g. "k17"), never from client input. These are cumulative since the
gateway process started: the page says so; Prometheus (the same names) keeps history.

`key_traffic_from_text` is pure (tests feed it real exposition text); `key_traffic`
does one bounded scrape, cached for a few seconds so a busy page costs the gateway
nothing.
"""

from __future__ import annotations

import threading
import time
import urllib.error
from collections import defaultdict

from prometheus_client.parser import text_string_to_metric_families

from monitoring import conf
from monitoring.selectors.targets import gateway_metrics_url
from monitoring.services.collector import fetch_metrics

FAMILIES = (
    "gateway_tenant_requests",
    "gateway_tenant_request_duration_seconds",
    "gateway_auth_rejections",
    "gateway_llm_tokens",
    "gateway_llm_cost",
    "process_start_time_seconds",
)
CACHE_SECONDS = 3.0
_cache: dict = {"at": 0.0, "url": None, "value": None}
_lock = threading.Lock()


def _status_class(status: str) -> str:
    return f"{status[0]}xx" if len(status) == 3 and status.isdigit() else "other"


def key_traffic_from_text(text: str) -> dict:
    """{"keys": {key id: {"requests": {"2xx": n, …}, "total": n, "mean_ms": x|None,
    "rejections": {reason: n}, "prompt_tokens": n, "completion_tokens": n, "cost": x}},
    "anonymous": {endpoint: {reason: n}}, "since": unix time|None}."""
    keys: dict[str, dict] = defaultdict(
        lambda: {
            "requests": defaultdict(float),
            "total": 0.0,
            "latency_sum": 0.0,
            "latency_count": 0.0,
            "rejections": defaultdict(float),
            "prompt_tokens": 0.0,
            "completion_tokens": 0.0,
            "cost": 0.0,
        }
    )
    anonymous: dict[str, dict] = defaultdict(lambda: defaultdict(float))
    since = None
    # only these families' samples reach the (slow, pure-Python) parser; untyped is enough
    wanted = [line for line in text.splitlines() if line.startswith(FAMILIES)]
    for family in text_string_to_metric_families("\n".join(wanted) + "\n"):
        for sample in family.samples:
            labels, value = sample.labels, sample.value
            if sample.name == "gateway_tenant_requests_total":
                entry = keys[labels.get("key", "")]
                entry["requests"][_status_class(labels.get("status", ""))] += value
                entry["total"] += value
            elif sample.name == "gateway_tenant_request_duration_seconds_sum":
                keys[labels.get("key", "")]["latency_sum"] += value
            elif sample.name == "gateway_tenant_request_duration_seconds_count":
                keys[labels.get("key", "")]["latency_count"] += value
            elif sample.name == "gateway_auth_rejections_total":
                if labels.get("key"):
                    keys[labels["key"]]["rejections"][labels.get("reason", "")] += value
                else:
                    anonymous[labels.get("endpoint", "")][labels.get("reason", "")] += value
            elif sample.name == "gateway_llm_tokens_total" and labels.get("key"):
                kind = labels.get("kind", "")
                if kind in ("prompt", "completion"):
                    keys[labels["key"]][f"{kind}_tokens"] += value
            elif sample.name == "gateway_llm_cost_total" and labels.get("key"):
                keys[labels["key"]]["cost"] += value
            elif sample.name == "process_start_time_seconds":
                since = value
    out = {}
    for key_id, entry in keys.items():
        count = entry["latency_count"]
        out[key_id] = {
            "requests": dict(entry["requests"]),
            "total": entry["total"],
            "rejections": dict(entry["rejections"]),
            "mean_ms": entry["latency_sum"] / count * 1000 if count else None,
            "prompt_tokens": entry["prompt_tokens"],
            "completion_tokens": entry["completion_tokens"],
            "cost": entry["cost"],
        }
    return {"keys": out, "anonymous": {e: dict(r) for e, r in anonymous.items()}, "since": since}


def key_traffic() -> dict:
    """The gateway's per-key counters now (cached CACHE_SECONDS), or {"error": why}."""
    url = gateway_metrics_url()
    with _lock:
        if _cache["url"] == url and time.monotonic() - _cache["at"] < CACHE_SECONDS:
            return _cache["value"]
    try:
        text = fetch_metrics(url, min(1.0, conf.get("MONITORING_SCRAPE_TIMEOUT_S")), conf.get("GATEWAY_METRICS_TOKEN"))
        value = key_traffic_from_text(text)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        value = {"error": f"the gateway's metrics ({url}) could not be read: {type(exc).__name__}: {exc}"[:300]}
    with _lock:
        _cache.update(at=time.monotonic(), url=url, value=value)
    return value
