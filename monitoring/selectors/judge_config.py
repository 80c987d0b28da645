"""The judge's configuration an endpoint's fields and the MONITORING_JUDGE_ALPHA setting make."""

from __future__ import annotations

from monitoring import conf
from monitoring.judge.evidence import JudgeConfig


def judge_config_for(endpoint) -> JudgeConfig:
    """The endpoint's SLOs, PSI threshold and latency margin as the judge reads them, for its
    rollouts (services/canary.py) and an experiment's arms (services/arm_guardrails.py) alike;
    an LLM endpoint is judged on TTFT/ITL against its ttft_slo_ms / itl_slo_ms
    (monitoring/judge/llm_checks.py)."""
    return JudgeConfig(
        alpha=conf.get("MONITORING_JUDGE_ALPHA"),
        kind=endpoint.kind,
        ttft_slo_ms=endpoint.ttft_slo_ms,
        itl_slo_ms=endpoint.itl_slo_ms,
        slo_p99_ms=endpoint.slo_p99_ms,
        slo_error_rate=endpoint.slo_error_rate,
        psi_threshold=endpoint.psi_threshold,
        latency_margin=endpoint.latency_margin,
    )
