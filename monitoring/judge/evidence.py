"""What the judge's checks are made of: the windows it reads, its configuration, and the
evidence dict every check stores (with its `progress`: how much of the sample it needs it
has, and when at the current pace it will have it).

Pure (numpy only), so experiments' pure analysis may read `GuardrailStatus` from here.
The progress contract (shared with the endpoint page and the CLI):
`"progress": {"have": int, "need": int | None, "unit": "requests" | "samples" | "scores"}`
and `"eta_seconds": float | None` (None: cannot be estimated, e.g. no traffic yet, or
the sample is complete and the check waits for something else).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from enum import StrEnum

import numpy as np

SKIPPED = "skipped"  # a comparison with no control to compare against: neither holds nor fails a verdict


class GuardrailStatus(StrEnum):
    """An experiment arm's machine guardrails at a tick (monitoring/services/arm_guardrails.py
    says it; experiments read it: the one vocabulary both sides use)."""

    PASS = "pass"  # every check passed
    PENDING = "pending"  # a check lacks the data to conclude (or was not judged yet)
    FAIL = "fail"  # a check failed: the experiment stops for harm


@dataclass
class ArmWindow:
    """One variant over the window: per-tick (requests, errors), latency bucket counts
    {le_seconds: count} (non-cumulative) over the window and, aligned with `ticks`, per
    tick (`latency_ticks`: what the p99 guardrail counts over disjoint windows; empty when
    only the window's totals are known), and prediction-score bin counts.

    LLM endpoints add the same per tick for their requests (`llm_ticks`: gateway_llm_requests'
    requests and errors) and histograms of time to first token and inter-token latency
    (`ttft_*`, `itl_*`); `as_llm(histogram)` is the window the LLM checks read
    (monitoring/judge/llm_checks.py)."""

    ticks: list[tuple[float, float]] = field(default_factory=list)
    latency_buckets: dict[float, float] = field(default_factory=dict)
    score_bins: list[float] = field(default_factory=list)
    latency_ticks: list[dict[float, float]] = field(default_factory=list)
    llm_ticks: list[tuple[float, float]] = field(default_factory=list)
    ttft_buckets: dict[float, float] = field(default_factory=dict)
    ttft_ticks: list[dict[float, float]] = field(default_factory=list)
    itl_buckets: dict[float, float] = field(default_factory=dict)
    itl_ticks: list[dict[float, float]] = field(default_factory=list)
    # per tick, aligned with `ticks`: requests whose attempt on this variant failed and whose
    # failover failed on the stable too (the gateway's gateway_failovers_failed): neither
    # requests nor errors of this variant; empty when the source does not count them
    shared_failures: list[float] = field(default_factory=list)
    # per tick, aligned with `ticks`: those of this variant's errors whose attempt never reached
    # its model (its replica refused the connection, had not loaded it, or was ejected by the
    # gateway's breaker) and which the stable served; outage.py sets them aside only at the edge
    # of a shared outage (its recovery); empty when the source does not count them
    unreached_errors: list[float] = field(default_factory=list)
    # other counts summed over the window (windows.COUNT_METRICS: a generative recommender's
    # cache lookups and hits, beams and illegal beams; monitoring/judge/gr_guardrails.py reads them)
    counts: dict[str, float] = field(default_factory=dict)

    def as_llm(self, histogram: str | None = None) -> ArmWindow:
        """This LLM arm in the shape the tensor checks read: its LLM requests and errors
        as `ticks` and, with `histogram` ("ttft" or "itl"), that histogram as the latency
        one, so the rank tests and the SLO e-process run on it unchanged."""
        buckets = getattr(self, f"{histogram}_buckets") if histogram else {}
        per_tick = getattr(self, f"{histogram}_ticks") if histogram else []
        return ArmWindow(ticks=list(self.llm_ticks), latency_buckets=dict(buckets), latency_ticks=list(per_tick))

    @property
    def requests(self) -> float:
        return float(sum(n for n, _ in self.ticks))

    @property
    def errors(self) -> float:
        return float(sum(e for _, e in self.ticks))

    def plus(self, other: ArmWindow) -> ArmWindow:
        """Both arms as one (ticks aligned, counts added): e.g. stable and baseline, which
        serve the same artifact, as the error-rate control."""
        if len(self.ticks) != len(other.ticks):
            raise ValueError("windows must be aligned tick by tick")
        ticks = [(a + c, b + d) for (a, b), (c, d) in zip(self.ticks, other.ticks)]
        buckets = _added(self.latency_buckets, other.latency_buckets)
        bins = (
            [a + b for a, b in zip(self.score_bins, other.score_bins)]
            if self.score_bins and other.score_bins
            else (list(self.score_bins or other.score_bins))
        )
        return ArmWindow(
            ticks=ticks,
            latency_buckets=buckets,
            score_bins=bins,
            latency_ticks=_ticks_added(self.latency_ticks, other.latency_ticks),
            llm_ticks=_pairs_added(self.llm_ticks, other.llm_ticks),
            ttft_buckets=_added(self.ttft_buckets, other.ttft_buckets),
            ttft_ticks=_ticks_added(self.ttft_ticks, other.ttft_ticks),
            itl_buckets=_added(self.itl_buckets, other.itl_buckets),
            itl_ticks=_ticks_added(self.itl_ticks, other.itl_ticks),
            shared_failures=_counts_added(self.shared_failures, other.shared_failures),
            unreached_errors=_counts_added(self.unreached_errors, other.unreached_errors),
            counts=_added(self.counts, other.counts),
        )


def _ticks_added(a: list[dict], b: list[dict]) -> list[dict]:
    """Per-tick histograms of two aligned arms added (empty unless both have them)."""
    if not (a and b):
        return []
    if len(a) != len(b):
        raise ValueError("windows must be aligned tick by tick")
    return [_added(x, y) for x, y in zip(a, b)]


def _counts_added(a: list[float], b: list[float]) -> list[float]:
    if not (a and b):
        return list(a or b)
    if len(a) != len(b):
        raise ValueError("windows must be aligned tick by tick")
    return [x + y for x, y in zip(a, b)]


def _pairs_added(a: list[tuple], b: list[tuple]) -> list[tuple]:
    if not (a or b):
        return []
    if len(a) != len(b):
        raise ValueError("windows must be aligned tick by tick")
    return [(x + z, y + w) for (x, y), (z, w) in zip(a, b)]


def _added(a: dict[float, float], b: dict[float, float]) -> dict[float, float]:
    out = dict(a)
    for le, n in b.items():
        out[le] = out.get(le, 0.0) + n
    return out


@dataclass
class JudgeConfig:
    alpha: float = 0.05
    # "tensor" or "llm" (Endpoint.kind): an LLM endpoint is judged on TTFT and ITL
    # (monitoring/judge/llm_checks.py) with these SLOs instead of the request's p99
    kind: str = "tensor"
    ttft_slo_ms: float | None = None
    itl_slo_ms: float | None = None
    # LLM rank tests: a candidate is "slower" only beyond control x (1 + latency_margin) + this
    # floor. On this CPU a healthy candidate's token gaps ran 1.5 ms against the stable's
    # 0.4 ms (scheduling noise: a relative margin of a sub-ms gap is no practical
    # difference; 5 ms a token is 200 tokens/s), and 50 ms before a first token goes unseen.
    ttft_floor_ms: float = 50.0
    itl_floor_ms: float = 5.0
    slo_p99_ms: float | None = None
    slo_error_rate: float | None = None
    psi_threshold: float = 0.25
    min_requests: int = 500
    # The latency comparisons vote window by window (monitoring/judge/paired.py): a window is
    # consecutive ticks with `min_window_samples` requests on each arm; a pass needs
    # `min_latency_windows` of them (a fail needs no more than its e-value: a slower candidate
    # in every window reaches it in ~7 windows). `min_latency_samples` is what that is in
    # requests per arm (the forecast's unit).
    min_window_samples: int = 20
    min_latency_windows: int = 8
    min_latency_samples: int = 160
    # The error-rate test fails only with this many candidate requests judged: two timeouts
    # among a candidate's first 14 requests are not "14 % errors" (docs/rollouts.md).
    min_error_fail_requests: int = 50
    min_guardrail_requests: int = 100
    min_score_samples: int = 200
    guardrail_alpha: float = 0.01
    # The PSI guardrail fails only on a sustained breach (Argo's failureLimit): breaching at
    # `guardrail_failure_limit` successive looks spanning at least `guardrail_sustain_s`.
    # The p99 guardrail needs its breach in `guardrail_failure_limit` DISJOINT windows (ticks).
    guardrail_failure_limit: int = 3
    guardrail_sustain_s: float = 10.0
    # "p99 <= SLO" is "at most 1 % of requests over the SLO": the p99 guardrail's ceiling,
    # and the alternatives its e-process mixes over (multiples of the ceiling: 1.5 % .. 40 %).
    slo_exceedance_share: float = 0.01
    slo_exceedance_ratios: tuple[float, ...] = (1.5, 2.0, 3.0, 5.0, 8.0, 13.0, 20.0, 40.0)
    error_margin: float = 0.01  # absolute difference of error rates that is "no worse"
    # relative: how much slower than the control is still "no worse". None: derived from the
    # SLO's headroom over the control's p99 (monitoring/judge/paired.py margin_for): half of it,
    # within [min, max]; the default without an SLO.
    latency_margin: float | None = None
    default_latency_margin: float = 0.20
    min_latency_margin: float = 0.20
    max_latency_margin: float = 0.30
    latency_alpha: float = 0.01  # of the always-valid sign e-processes (threshold 100)
    # A tick in which most of the candidate's failed attempts failed on the stable too (the
    # pool serving both is down) is a shared outage: not judged (monitoring/judge/outage.py).
    outage_min_failures: int = 2
    # The outage's recovery: after a shared-outage tick, ticks in which most of the candidate's
    # errors never reached its model (its model still loading, or its replica still ejected by
    # the gateway's breaker, while the stable serves again) are set aside too, for at most this
    # many ticks (~30 s at the collector's 2 s; a replica's reload and the breaker's 8 s backoff
    # fit); after that such errors count (a candidate the restarted pool cannot load is its own).
    outage_recovery_ticks: int = 15
    # Large odds ratios let a small arm's first errors count: two candidate errors (none on
    # the control) are an e-value of ~61 at a 5 % share and ~25 at 10 % (> 1/α = 20); with
    # the grid ending at 8 they were 11 and 8 (docs/rollouts.md, "Detection time").
    odds_ratios: tuple[float, ...] = (1.25, 1.5, 2.0, 3.0, 5.0, 8.0, 16.0, 32.0, 64.0)

    def as_dict(self) -> dict:
        return asdict(self)


_PLAIN = frozenset({int, str, bool, type(None)})


def clean(value):
    """JSON-friendly numbers (no numpy types, no inf/nan). The exact built-in types go first:
    this runs over every check's evidence at every tick (a tenth of an experiment tick's CPU)."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is float:
        return value if math.isfinite(value) else (None if math.isnan(value) else (1e308 if value > 0 else -1e308))
    if kind is list:
        return [clean(v) for v in value]
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, (np.floating, np.integer)):
        value = value.item()
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None if math.isnan(value) else (1e308 if value > 0 else -1e308)
    return value


def make_check(name: str, kind: str, outcome: str, **evidence) -> dict:
    return {"name": name, "kind": kind, "outcome": outcome, **{k: clean(v) for k, v in evidence.items()}}


def progress(have: float, need: float | None, unit: str, seconds: float | None) -> dict:
    """The `progress` and `eta_seconds` of a check: `have` of `need` gathered over
    `seconds`; the ETA assumes the pace so far holds (None when there is no pace yet)."""
    have_i = int(round(have))
    eta = None
    if need is not None and have_i >= need:
        eta = 0.0
    elif need is not None and seconds and seconds > 0 and have > 0:
        eta = round((need - have) / (have / seconds), 1)
    return {"progress": {"have": have_i, "need": None if need is None else int(need), "unit": unit}, "eta_seconds": eta}


def sustained(
    name: str, breaching: bool, config: JudgeConfig, previous: dict | None, now_s: float | None
) -> tuple[bool, dict]:
    """(fail now?, evidence) for a guardrail that breached (or not) at this look.

    Without a clock (`now_s` None: a one-off evaluation) a breach fails at once."""
    if not breaching:
        return False, {"breaches": 0, "breach_since": None}
    if now_s is None:
        return True, {"breaches": 1, "breach_since": None}
    before = (previous or {}).get(name) or {}
    if before.get("breaches") and before.get("breach_since") is not None:
        count, since = int(before["breaches"]) + 1, float(before["breach_since"])
    else:
        count, since = 1, now_s
    held = now_s - since
    fail = count >= config.guardrail_failure_limit and held >= config.guardrail_sustain_s
    return fail, {
        "breaches": count,
        "breach_since": since,
        "breach_held_s": round(held, 2),
        "failure_limit": config.guardrail_failure_limit,
        "sustain_s": config.guardrail_sustain_s,
    }
