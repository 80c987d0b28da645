"""The Prometheus source: the gateway's and Triton's own series read back over PromQL (the
HTTP API's `query_range`), turned into the same derived samples the built-in collector
stores, then into the judge's windows (monitoring/judge/windows.py) and the dashboards' series.

Why raw counters and not `increase()`/`rate()`: the judge's error-rate e-process needs
per-tick counts from disjoint intervals, exactly like the collector's successive scrapes.
`query_range` at a step of the scrape interval gives each series' last sample at each
step; the differences of successive samples of one instance are exact counts (a drop is a
restart: counted from zero, as the collector does), and `increase()` would extrapolate to
the window's edges. So each step of each instance becomes a snapshot
(gateway_samples.gateway_snapshot_samples / triton_snapshot_samples), successive snapshots give
deltas (gateway_samples.gateway_deltas / triton_deltas), instances add up (collect.merge) and
collect.derive names the metrics: the rows the store would hold, so a chart and the judge
read the same numbers. Triton replicas are matched to their endpoint x variant by the
collector's own targets (the `instance` label is the replica's metrics host:port). The
recording rules in platform/prometheus/modelplane.rules.yml serve alerts and the HPA.

Resolution: "raw" is one point per scrape interval (PROMETHEUS_STEP_S, 2 s); "1m" one per
minute, each the derived value of that whole minute (the store's roll-up is the mean of its
ticks: request counts and rates agree, a minute's p99 is of the minute, not a mean of p99s).
Only the families the asked metrics need are queried.

Why this is one long module: the PromQL reads, the rebuilding of the collector's rows and
the MetricSource methods over them are one source; its map of derived metrics to gateway
families (tensor and LLM) must stay beside the query that uses it.
"""

from __future__ import annotations

import re
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import requests

from kernel.conf import setting
from kernel.errors import PlatformError
from monitoring.collection import collect, gateway_samples, triton_samples
from monitoring.judge.evidence import ArmWindow
from monitoring.judge.windows import (
    BUCKET_PREFIXES,
    COUNT_METRICS,
    LLM_TICK_METRICS,
    PER_TICK_COUNTS,
    TICK_METRICS,
    arms_from_rows,
    wanted,
)

MAX_QUERY_POINTS = 10_000  # per series and query (Prometheus refuses more than 11,000)
MAX_POINTS = 2000  # per series shown (as the store's metric_series)
MAX_SERIES = 20_000  # series in one answer; past this it is refused, not read
MINUTE_S = 60.0

# the Triton-derived metrics (collect.derive): only these need Triton's series
TRITON_METRICS = frozenset(
    "triton_requests triton_failures triton_inference_rate triton_in_flight triton_error_rate queue_ms compute_ms"
    " compute_infer_ms server_ms queue_share utilization batch_size cost_per_1k_inferences"
    " gr_cache_lookups gr_cache_hits gr_beams gr_illegal_beams gr_cache_hit_rate gr_illegal_rate".split()
)


class PrometheusError(PlatformError):
    """Prometheus did not answer, or answered with an error: a 503 at the API."""

    status = 503
    code = "metric_source_unavailable"


def _selector_value(value: str) -> str:
    """A PromQL string literal (label values are the platform's own names, but quote anyway)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _alternatives(values) -> str:
    """An RE2 alternation matching exactly these strings (PromQL's =~ is anchored)."""
    return "(" + "|".join(re.escape(v) for v in values) + ")"


# a failed-over attempt is its variant's error, a timed-out one a slow request, one the stable failed too neither
_REQUESTS = ("requests", "shadow_requests", "failovers", "failovers_failed")
_LATENCY = ("latency", "shadow_latency")
# derived metric -> the GatewayNames fields (families) it is computed from
_GATEWAY_EXACT = {
    **dict.fromkeys(
        (
            "requests",
            "errors",
            "request_rate",
            "error_rate",
            "client_faults",
            "shared_failures",
            "unreached_errors",
            "failovers_in",
            "failovers_in_failed",
        ),
        _REQUESTS,
    ),
    **{name: (name,) for name in ("retries", "failovers", "upstream_errors", "shadow_dropped", "in_flight")},
    "upstream_mean_ms": ("upstream",),
    "upstream_p99_ms": ("upstream",),
    # LLM endpoints (collect.derive_llm)
    **dict.fromkeys(
        ("llm_requests", "llm_errors", "llm_error_rate", "llm_request_rate", "llm_client_faults"),
        ("llm_requests", "llm_rescued"),  # a request the fallbacks served for a variant is its error
    ),
    **dict.fromkeys(("prompt_tokens", "completion_tokens", "tokens_per_s"), ("llm_tokens",)),
    "cost": ("llm_cost",),
    "llm_fallbacks": ("llm_fallbacks",),
    "llm_streams_in_flight": ("llm_streams",),
    "llm_queue_mean_ms": ("llm_queue",),
    "llm_queue_p99_ms": ("llm_queue",),
}
_GATEWAY_PREFIX = (
    ("latency_", (*_LATENCY, "failovers", "failovers_failed")),  # a timed-out failover is a slow request
    ("score_bin:", ("prediction_score",)),
    ("ttft_", ("llm_ttft",)),
    ("itl_", ("llm_itl",)),
)
_ALL_GATEWAY = tuple(
    sorted({f for fields in (*_GATEWAY_EXACT.values(), *(n for _, n in _GATEWAY_PREFIX)) for f in fields})
)


def _gateway_fields(metrics: set[str] | None) -> tuple[str, ...]:
    """The gateway's families (GatewayNames fields) the derived `metrics` come from; all of
    them for None or for a metric this map does not know (a new one is never missed)."""
    if metrics is None:
        return _ALL_GATEWAY
    fields: set[str] = set()
    for metric in metrics:
        needs = _GATEWAY_EXACT.get(metric) or next((n for p, n in _GATEWAY_PREFIX if metric.startswith(p)), None)
        if needs is None and metric not in TRITON_METRICS:
            return _ALL_GATEWAY
        fields.update(needs or ())
    return tuple(sorted(fields))


def _keeps(metrics: set[str] | None):
    """A filter for derived metric names: None keeps all; a name ending in ':' keeps its
    family of buckets ("latency_bucket:")."""
    if metrics is None:
        return lambda metric: True
    prefixes = tuple(m for m in metrics if m.endswith(":"))
    return lambda metric: metric in metrics or (bool(prefixes) and metric.startswith(prefixes))


class PrometheusSource:
    name = "prometheus"

    def __init__(self, url: str, *, timeout_s: float | None = None, step_s: float | None = None):
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s or float(setting("PROMETHEUS_TIMEOUT_S"))
        self.step_s = step_s or float(setting("PROMETHEUS_STEP_S"))  # the scrape interval
        self.names = gateway_samples.GatewayNames(prefix=setting("MONITORING_GATEWAY_METRIC_PREFIX"))

    # --- PromQL ---------------------------------------------------------------------------
    def query_range(self, query: str, start: datetime, end: datetime, step_s: float) -> list[dict]:
        try:
            reply = requests.get(
                f"{self.url}/api/v1/query_range",
                params={"query": query, "start": start.timestamp(), "end": end.timestamp(), "step": step_s},
                timeout=self.timeout_s,
            )
            body = reply.json()
        except (requests.RequestException, ValueError) as exc:
            raise PrometheusError(f"Prometheus at {self.url} did not answer: {exc}") from None
        if body.get("status") != "success":
            raise PrometheusError(f"Prometheus refused {query!r}: {body.get('error', reply.status_code)}")
        result = body["data"]["result"]
        if len(result) > MAX_SERIES:
            raise PrometheusError(f"{len(result)} series for {query!r}: more than {MAX_SERIES}")
        return result

    def _gateway_query(self, fields, endpoints: list[str] | None) -> str:
        families = _alternatives(self.names.name(getattr(self.names, f)).removesuffix("_total") for f in fields)
        # the samples a family exposes, not its _created series
        matchers = [f"__name__=~{_selector_value(families + '(_total|_bucket|_sum|_count)?')}"]
        if endpoints is not None:
            matchers.append(f"{self.names.endpoint_label}=~{_selector_value(_alternatives(endpoints))}")
        return "{" + ", ".join(matchers) + "}"

    @staticmethod
    def _triton_targets(endpoints: list[str] | None) -> dict[str, object]:
        """{host:port: ScrapeTarget} of the Triton replicas serving `endpoints` (all if None),
        from the collector's own target sources."""
        from monitoring.collection.targets import scrape_targets

        out = {}
        for target in scrape_targets():
            if target.kind != "triton":
                continue
            if endpoints is not None and target.models is not None:
                if not any(m.endpoint in endpoints for m in target.models.values()):
                    continue
            out[urlsplit(target.url).netloc] = target
        return out

    # --- the collector's rows, rebuilt ----------------------------------------------------
    @staticmethod
    def _instants(series: list[dict], instance_of) -> dict:
        """{instance key: {step time: [(name, labels, value)]}}; series whose instance
        `instance_of` does not know are left out."""
        instants: dict = defaultdict(lambda: defaultdict(list))
        for entry in series:
            labels = dict(entry["metric"])
            name = labels.pop("__name__", "")
            key = instance_of(labels)
            if key is None:
                continue
            for at, value in entry["values"]:
                instants[key][float(at)].append((name, labels, float(value)))
        return instants

    @staticmethod
    def _deltas_by_step(instants: dict, first_step: float, step: float, snapshot, deltas) -> dict[float, list]:
        parts_by_time: dict[float, list] = defaultdict(list)
        for key, steps in instants.items():
            times = sorted(steps)
            # Series already there at the window's first step are its baseline; series that
            # appear later were born inside it (a new variant, a new pod) and count from
            # zero, as the collector counts a counter it had not seen.
            previous, previous_at = (None, None) if abs(times[0] - first_step) < step / 2 else ({}, first_step)
            for at in times:
                current = snapshot(steps[at])
                if previous is not None:
                    parts_by_time[at].append(deltas(key, previous, current, at - previous_at))
                previous, previous_at = current, at
        return parts_by_time

    def rows(
        self, *, endpoints: list[str] | None, since: datetime, until: datetime, step_s: float, metrics=None
    ) -> list[tuple[str, str, str, datetime, float]]:
        """(endpoint, variant, metric, time, value) rows over [since, until], one time per
        step, as the collector would have stored them; `endpoints` None is every endpoint,
        `metrics` None every metric."""
        metrics = None if metrics is None else set(metrics)
        if endpoints is not None and not endpoints:
            return []
        keep, first_step, parts_by_time = _keeps(metrics), since.timestamp(), defaultdict(list)
        fields = _gateway_fields(metrics)
        if fields:
            series = self.query_range(self._gateway_query(fields, endpoints), since, until, step_s)
            instants = self._instants(
                series, lambda labels: (labels.pop("instance", ""), labels.pop("job", ""), labels.pop("pod", ""))
            )
            for at, parts in self._deltas_by_step(
                instants,
                first_step,
                step_s,
                lambda samples: gateway_samples.gateway_snapshot_samples(samples, self.names),
                lambda _, prev, cur, seconds: gateway_samples.gateway_deltas(
                    prev, cur, seconds=seconds, names=self.names
                ),
            ).items():
                parts_by_time[at] += parts
        if metrics is None or metrics & TRITON_METRICS:
            self._triton_parts(endpoints, since, until, step_s, parts_by_time)
        rows = []
        for at in sorted(parts_by_time):
            when = datetime.fromtimestamp(at, tz=UTC)
            for (endpoint, variant), totals in collect.merge(*parts_by_time[at]).items():
                if endpoints is not None and endpoint not in endpoints:
                    continue
                for metric, value in collect.derive(totals).items():
                    if keep(metric):
                        rows.append((endpoint, variant, metric, when, value))
        return rows

    def _triton_parts(self, endpoints, since, until, step_s, parts_by_time) -> None:
        targets = self._triton_targets(endpoints)
        if not targets:
            return
        families, instances = _alternatives(triton_samples.TRITON_FAMILIES), _alternatives(targets)
        query = f"{{__name__=~{_selector_value(families)}, instance=~{_selector_value(instances)}}}"
        series = self.query_range(query, since, until, step_s)
        instants = self._instants(series, lambda labels: labels.pop("instance", None))

        def deltas(instance, prev, cur, seconds):
            target = targets[instance]
            return triton_samples.triton_deltas(
                prev, cur, seconds=seconds, models=target.models, cost_per_replica_hour=target.cost_per_replica_hour
            )

        for at, parts in self._deltas_by_step(
            instants, since.timestamp(), step_s, triton_samples.triton_snapshot_samples, deltas
        ).items():
            parts_by_time[at] += parts

    # --- MetricSource ---------------------------------------------------------------------
    def judge_arms(self, *, endpoint, variants, since, until=None) -> dict[str, ArmWindow]:
        until = until or datetime.now(tz=UTC)
        step = max(self.step_s, (until - since).total_seconds() / MAX_QUERY_POINTS)
        judged = {*TICK_METRICS, *PER_TICK_COUNTS, *LLM_TICK_METRICS, *BUCKET_PREFIXES, *COUNT_METRICS}
        rows = self.rows(endpoints=[endpoint], since=since, until=until, step_s=step, metrics=judged)
        return arms_from_rows([row[1:] for row in rows if wanted(row[2])], variants)

    @staticmethod
    def _visible(user, endpoint: str | None = None) -> list[str] | None:
        """The endpoint names the user may see (None: every one, staff); one if asked."""
        from deployments.selectors.rollouts import endpoint_list
        from registry.selectors.teams import team_ids_for

        if team_ids_for(user) is None:
            return None if endpoint is None else [endpoint]
        names = endpoint_list(user=user).values_list("name", flat=True)
        if endpoint is not None:
            names = names.filter(name=endpoint)
        return list(names)

    def _resolution(self, since: datetime, until: datetime, resolution: str) -> tuple[str, float]:
        span = max((until - since).total_seconds(), 0.0)
        if resolution == "auto":
            resolution = "raw" if span / self.step_s <= MAX_POINTS else "1m"
        step = self.step_s if resolution == "raw" else MINUTE_S
        return resolution, max(step, span / MAX_QUERY_POINTS)

    def metric_series(
        self, *, user, endpoint=None, variant=None, metrics=None, since, until=None, resolution="auto"
    ) -> list[dict]:
        until = until or datetime.now(tz=UTC)
        resolution, step = self._resolution(since, until, resolution)
        endpoints = self._visible(user, endpoint)
        grouped: dict[tuple, list] = defaultdict(list)
        for ep, var, metric, when, value in self.rows(
            endpoints=endpoints, since=since, until=until, step_s=step, metrics=metrics
        ):
            if variant is None or var == variant:
                grouped[(ep, var, metric)].append({"time": when, "value": value})
        return [
            {"endpoint": ep, "variant": var, "metric": metric, "resolution": resolution, "points": points[-MAX_POINTS:]}
            for (ep, var, metric), points in sorted(grouped.items())
        ]

    def series_index(self, *, user, since) -> list[dict]:
        until = datetime.now(tz=UTC)
        _, step = self._resolution(since, until, "auto")
        rows = self.rows(
            endpoints=self._visible(user),
            since=since,
            until=until,
            step_s=step,
            metrics={"request_rate", "triton_inference_rate", "llm_request_rate"},
        )
        endpoints: dict[str, dict] = {}
        for ep, var, _, when, _ in sorted(rows):
            if ep == collect.UNKNOWN_ENDPOINT:
                continue
            entry = endpoints.setdefault(ep, {"endpoint": ep, "variants": [], "last": when})
            if var not in entry["variants"]:
                entry["variants"].append(var)
            entry["last"] = max(entry["last"], when)
        return list(endpoints.values())

    def unknown_traffic(self, *, user, since) -> dict | None:
        if self._visible(user) is not None:  # such requests belong to no team: staff only
            return None
        until = datetime.now(tz=UTC)
        _, step = self._resolution(since, until, "auto")
        rows = self.rows(
            endpoints=[collect.UNKNOWN_ENDPOINT],
            since=since,
            until=until,
            step_s=step,
            metrics={"requests", "client_faults"},
        )
        total = sum(row[4] for row in rows)
        if not total:
            return None
        seconds = max((until - since).total_seconds(), 1.0)
        return {"requests": int(total), "rate": total / seconds}

    def latest_values(self, *, user, endpoint, since, metrics) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = defaultdict(dict)
        for series in self.metric_series(user=user, endpoint=endpoint, metrics=metrics, since=since):
            if series["points"]:
                out[series["variant"]][series["metric"]] = series["points"][-1]["value"]
        return dict(out)

    def endpoint_request_rate(self, *, endpoint, window_s, now) -> float | None:
        since = now - timedelta(seconds=window_s)
        rows = self.rows(
            endpoints=[endpoint], since=since, until=now, step_s=self.step_s, metrics={*TICK_METRICS, *LLM_TICK_METRICS}
        )
        requests_rows = [row for row in rows if row[2] in ("requests", "llm_requests")]  # an LLM endpoint's are llm_
        total = sum(row[4] for row in requests_rows)
        if not total:
            return None
        times = sorted({row[3] for row in requests_rows})
        # each step covers the step before it, as each stored tick covers its interval
        return total / max((times[-1] - times[0]).total_seconds() + self.step_s, 1e-9)
