"""What the collector scrapes. `scrape_targets()` asks every source named in
MONITORING_TARGET_SOURCES (dotted paths of functions returning `ScrapeTarget`s); the
default source reads MONITORING_TARGETS (JSON). Deployments adds a source that lists
the gateway and each pool replica with its endpoint x variant model map.

A MONITORING_TARGETS entry:
  {"kind": "gateway", "url": "http://127.0.0.1:8080/metrics", "endpoint_teams": {"ctr": 3}}
  {"kind": "triton", "url": "http://127.0.0.1:8002/metrics", "cost_per_replica_hour": 0.5,
   "models": {"ctr__v2__onnx": {"endpoint": "ctr", "variant": "candidate", "instances": 1}},
   "endpoint_teams": {"ctr": 3}}
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.utils.module_loading import import_string

from monitoring import conf
from monitoring.collection.triton_samples import TritonModelMap

KINDS = ("gateway", "triton")


@dataclass
class ScrapeTarget:
    kind: str  # "gateway" | "triton"
    url: str  # the /metrics URL
    models: dict[str, TritonModelMap] | None = None  # triton only; None = model name is the endpoint
    cost_per_replica_hour: float = 0.0
    endpoint_teams: dict[str, int] = field(default_factory=dict)  # endpoint -> team id (read scoping)
    metric_prefix: str = ""  # gateway only; default MONITORING_GATEWAY_METRIC_PREFIX

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.url}"[:255]

    @classmethod
    def from_dict(cls, data: dict) -> ScrapeTarget:
        kind = data.get("kind")
        if kind not in KINDS:
            raise ValueError(f"scrape target kind must be one of {KINDS}, got {kind!r}")
        if not str(data.get("url", "")).startswith(("http://", "https://")):
            raise ValueError(f"scrape target url must be http(s), got {data.get('url')!r}")
        models = None
        if data.get("models") is not None:
            models = {name: TritonModelMap(**spec) for name, spec in data["models"].items()}
        return cls(
            kind=kind,
            url=data["url"],
            models=models,
            cost_per_replica_hour=float(data.get("cost_per_replica_hour", 0.0)),
            endpoint_teams={str(k): int(v) for k, v in (data.get("endpoint_teams") or {}).items()},
            metric_prefix=str(data.get("metric_prefix", "")),
        )


def targets_from_settings() -> list[ScrapeTarget]:
    return [ScrapeTarget.from_dict(item) for item in conf.targets_json()]


def scrape_targets() -> list[ScrapeTarget]:
    """Every target of every source, deduplicated by key, in a stable order."""
    seen: dict[str, ScrapeTarget] = {}
    for path in conf.get("MONITORING_TARGET_SOURCES"):
        for target in import_string(path)():
            seen.setdefault(target.key, target)
    return list(seen.values())
