"""Per inference key traffic, read live from the gateway's /metrics for the keys page.

The gateway counts each authenticated key's requests (`gateway_tenant_requests_total
{team,key,endpoint,status}`, `gateway_tenant_request_duration_seconds{team,key}`) and
every refusal of its key checks (`gateway_auth_rejections_total{endpoint,team,key,reason}`,
key "" when no valid key was sent), and LLM usage per key (`gateway_llm_tokens_total
{endpoint,variant,team,key,kind}` with kind prompt|completion, counted from the backends'
usage, and `gateway_llm_cost_total{endpoint,variant,team,key}` from the backends' prices
per 1k tokens; `gateway_llm_tenant_ttft_seconds{team,key}`, the time to first token). An LLM
call is counted in gateway_tenant_requests like a tensor one. Labels come from the route table (the key's
`gateway_id`, e.g. "k17"), never from client input. These are cumulative since the
gateway process started: the page says so; Prometheus (the same names) keeps history.

Beyond the keys page's per-key sums, each key's entry has `llm_endpoints` {endpoint:
usage}, and the result has per-team totals (`teams`, by the team label of the route table)
and public calls' (`public`, key "", per endpoint); `tenant_llm_usage` is the LLM usage of
the keys, teams and endpoints a user may see (usage = {prompt_tokens, completion_tokens,
tokens, cost}).

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
from monitoring.collection.scraper import fetch_metrics
from monitoring.selectors.targets import gateway_metrics_url

FAMILIES = (
    "gateway_tenant_requests",
    "gateway_tenant_request_duration_seconds",
    "gateway_auth_rejections",
    "gateway_llm_tokens",
    "gateway_llm_cost",
    "gateway_llm_tenant_ttft_seconds",
    "process_start_time_seconds",
)
CACHE_SECONDS = 3.0
_cache: dict = {"at": 0.0, "url": None, "value": None}
_lock = threading.Lock()


def _status_class(status: str) -> str:
    return f"{status[0]}xx" if len(status) == 3 and status.isdigit() else "other"


def _usage() -> dict:
    return {"prompt_tokens": 0.0, "completion_tokens": 0.0, "tokens": 0.0, "cost": 0.0}


def _count_usage(entry: dict, name: str, labels: dict, value: float) -> None:
    if name == "gateway_llm_cost_total":
        entry["cost"] += value
    elif labels.get("kind") in ("prompt", "completion"):
        entry[f"{labels['kind']}_tokens"] += value
        entry["tokens"] += value


# families summed per key as they come, into the entry's field
KEY_SUMS = {
    "gateway_tenant_request_duration_seconds_sum": "latency_sum",
    "gateway_tenant_request_duration_seconds_count": "latency_count",
    "gateway_llm_tenant_ttft_seconds_sum": "ttft_sum",
    "gateway_llm_tenant_ttft_seconds_count": "ttft_count",
}


def _llm_sample(keys: dict, teams: dict, public: dict, name: str, labels: dict, value: float) -> None:
    """An LLM tokens or cost sample: the key's (and its team's) usage, or a public endpoint's when no key."""
    key = labels.get("key")
    if not key:
        _count_usage(public[labels.get("endpoint", "")], name, labels, value)
        return
    if name == "gateway_llm_cost_total":
        keys[key]["cost"] += value
    elif labels.get("kind", "") in ("prompt", "completion"):
        keys[key][f"{labels['kind']}_tokens"] += value
    _llm_usage(keys[key], teams, name, labels, value)


def key_traffic_from_text(text: str) -> dict:
    """{"keys": {key id: {"requests": {"2xx": n, …}, "total": n, "mean_ms": x|None,
    "rejections": {reason: n}, "prompt_tokens": n, "completion_tokens": n, "cost": x, "ttft_mean_ms": x|None,
    "llm_endpoints": {endpoint: usage}}}, "anonymous": {endpoint: {reason: n}},
    "teams": {team label: usage}, "public": {endpoint: usage}, "since": unix time|None}."""
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
            "ttft_sum": 0.0,
            "ttft_count": 0.0,
            "llm_endpoints": defaultdict(_usage),
        }
    )
    teams: dict[str, dict] = defaultdict(_usage)
    public: dict[str, dict] = defaultdict(_usage)
    anonymous: dict[str, dict] = defaultdict(lambda: defaultdict(float))
    since = None
    # only these families' samples reach the (slow, pure-Python) parser; untyped is enough
    wanted = [line for line in text.splitlines() if line.startswith(FAMILIES)]
    for family in text_string_to_metric_families("\n".join(wanted) + "\n"):
        for sample in family.samples:
            labels, value = sample.labels, sample.value
            if sample.name in KEY_SUMS:
                keys[labels.get("key", "")][KEY_SUMS[sample.name]] += value
            elif sample.name == "gateway_tenant_requests_total":
                entry = keys[labels.get("key", "")]
                entry["requests"][_status_class(labels.get("status", ""))] += value
                entry["total"] += value
            elif sample.name == "gateway_auth_rejections_total":
                if labels.get("key"):
                    keys[labels["key"]]["rejections"][labels.get("reason", "")] += value
                else:
                    anonymous[labels.get("endpoint", "")][labels.get("reason", "")] += value
            elif sample.name in ("gateway_llm_tokens_total", "gateway_llm_cost_total"):
                _llm_sample(keys, teams, public, sample.name, labels, value)
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
            "ttft_mean_ms": entry["ttft_sum"] / entry["ttft_count"] * 1000 if entry["ttft_count"] else None,
            "llm_endpoints": dict(entry["llm_endpoints"]),
        }
    return {
        "keys": out,
        "anonymous": {e: dict(r) for e, r in anonymous.items()},
        "teams": dict(teams),
        "public": dict(public),
        "since": since,
    }


def _llm_usage(entry: dict, teams: dict, name: str, labels: dict, value: float) -> None:
    """A key's LLM sample into its per-endpoint usage and its team's."""
    _count_usage(entry["llm_endpoints"][labels.get("endpoint", "")], name, labels, value)
    _count_usage(teams[labels.get("team", "")], name, labels, value)


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


def tenant_llm_usage(*, user, traffic: dict | None = None) -> dict:
    """Tokens and cost per inference key and per team on LLM endpoints, for what `user`
    may see: {"keys": {key id ("k17"): {"key": InferenceKey, prompt_tokens,
    completion_tokens, tokens, cost, endpoints: {name: usage}}}, "teams": {team name:
    usage summed over its keys}, "public": {endpoint: usage of calls without a key to the
    user's endpoints}, "since": unix time|None} (counts since the gateway started, live
    as key_traffic), or {"error": why} when the gateway's metrics cannot be read.
    `traffic`: an already read key_traffic() (the keys page reads it once)."""
    from deployments.selectors.keys import inference_key_list
    from deployments.selectors.rollouts import endpoint_list

    traffic = traffic if traffic is not None else key_traffic()
    if "error" in traffic:
        return {"error": traffic["error"]}
    keys, teams = {}, defaultdict(_usage)
    for key in inference_key_list(user=user):
        entry = traffic["keys"].get(key.gateway_id) or {}
        if not entry.get("llm_endpoints"):
            continue
        prompt, completion = entry["prompt_tokens"], entry["completion_tokens"]
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "tokens": prompt + completion}
        keys[key.gateway_id] = {"key": key, **usage, "cost": entry["cost"], "endpoints": entry["llm_endpoints"]}
        for name in ("prompt_tokens", "completion_tokens", "tokens", "cost"):
            teams[key.team.name][name] += keys[key.gateway_id][name]
    names = set(endpoint_list(user=user).values_list("name", flat=True))
    public = {name: usage for name, usage in traffic.get("public", {}).items() if name in names}
    return {"keys": keys, "teams": dict(teams), "public": public, "since": traffic.get("since")}
