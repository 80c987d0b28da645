"""What the monitoring page's charts show, built here only: each panel's human title, its
unit and scale, its SLO line, and the page's shared time ranges. The view hands these to
the chart script as JSON, so the titles, units and SLOs a person reads come from one place."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from deployments.selectors.rollouts import endpoint_list

# The one time range every panel of a page uses (the selector at the top of the page).
TIME_RANGES = {
    "15m": timedelta(minutes=15),
    "1h": timedelta(hours=1),
    "6h": timedelta(hours=6),
    "24h": timedelta(hours=24),
}
DEFAULT_RANGE = "1h"


@dataclass(frozen=True)
class ChartSpec:
    metric: str  # the stored metric id (what /api/v1/metrics/ calls it)
    title: str  # what a person reads
    unit: str  # shown on the axis and in the tooltip
    scale: float = 1.0  # stored value x scale = shown value (a fraction shown in %)
    decimals: int = 1
    slo: str | None = None  # the endpoint's SLO this panel draws as a line (an Endpoint field)


CHART_SPECS = (
    ChartSpec("request_rate", "Requests per second", "req/s", decimals=1),
    ChartSpec("error_rate", "Error rate (server errors)", "%", scale=100.0, decimals=2, slo="slo_error_rate"),
    ChartSpec("latency_p99_ms", "Latency p99", "ms", decimals=1, slo="slo_p99_ms"),
    ChartSpec("latency_p50_ms", "Latency p50 (median)", "ms", decimals=1),
    ChartSpec("queue_ms", "Time queued in Triton", "ms", decimals=2),
    ChartSpec("utilization", "Replica utilization", "%", scale=100.0, decimals=1),
)
# An LLM endpoint's panels (Endpoint.kind "llm"): what its judge reads (monitoring/judge/llm_checks.py)
LLM_CHART_SPECS = (
    ChartSpec("llm_request_rate", "Requests per second", "req/s", decimals=1),
    ChartSpec("llm_error_rate", "Error rate (server errors)", "%", scale=100.0, decimals=2, slo="slo_error_rate"),
    ChartSpec("ttft_p99_ms", "Time to first token p99", "ms", decimals=1, slo="ttft_slo_ms"),
    ChartSpec("ttft_p50_ms", "Time to first token p50 (median)", "ms", decimals=1),
    ChartSpec("itl_p99_ms", "Inter-token latency p99", "ms", decimals=2, slo="itl_slo_ms"),
    ChartSpec("tokens_per_s", "Completion tokens per second", "tokens/s", decimals=1),
)


def specs_for(kind: str) -> tuple[ChartSpec, ...]:
    """The panels of an endpoint of `kind` ("tensor" or "llm")."""
    return LLM_CHART_SPECS if kind == "llm" else CHART_SPECS


# The endpoint page's candidate-vs-stable charts during a rollout: what the judge decides on.
ROLLOUT_METRICS = {
    "tensor": ("request_rate", "error_rate", "latency_p99_ms"),
    "llm": ("llm_request_rate", "llm_error_rate", "ttft_p99_ms", "itl_p99_ms"),
}


def rollout_panels(endpoint) -> list[dict]:
    """The rollout charts' panels of `endpoint`: title, unit, scale and its SLO (in the shown
    unit, None where it sets none) per metric the judge decides on for its kind."""
    specs = {spec.metric: spec for spec in specs_for(endpoint.kind)}
    panels = []
    for metric in ROLLOUT_METRICS["llm" if endpoint.kind == "llm" else "tensor"]:
        spec = specs[metric]
        slo = getattr(endpoint, spec.slo) if spec.slo else None
        panels.append({**asdict(spec), "slo": None if slo is None else slo * spec.scale})
    return panels


def time_range(value: str | None) -> str:
    """The page's time range: a known one, or the default for anything else."""
    return value if value in TIME_RANGES else DEFAULT_RANGE


def range_start(name: str, now: datetime) -> datetime:
    return now - TIME_RANGES[time_range(name)]


def endpoint_kinds(*, user, endpoints: list[str]) -> dict[str, str]:
    """{endpoint: "tensor" | "llm"} of the endpoints the user may see (which panels it gets)."""
    return dict(endpoint_list(user=user).filter(name__in=endpoints).values_list("name", "kind"))


def chart_config(*, user, endpoints: list[str]) -> dict:
    """The chart script's configuration: the panels (tensor and LLM ones; each endpoint's
    card shows its kind's) and each endpoint's SLO lines (in the panel's shown unit, where
    the endpoint sets one), for the endpoints on the page that the user may see."""
    slos: dict[str, dict[str, float]] = {}
    for endpoint in endpoint_list(user=user).filter(name__in=endpoints):
        slos[endpoint.name] = {
            spec.metric: getattr(endpoint, spec.slo) * spec.scale
            for spec in specs_for(endpoint.kind)
            if spec.slo and getattr(endpoint, spec.slo) is not None
        }
    return {"panels": [asdict(spec) for spec in (*CHART_SPECS, *LLM_CHART_SPECS)], "slos": slos}
