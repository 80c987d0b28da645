"""The beam gates: whether a variant's beams may serve, from the figures the gates stage
measured on a holdout of users against the fp32 reference (the bundle's own graphs at the
served beam width). Pure: figures and thresholds in, a verdict out.

Gates (each a figure, a threshold and a sentence when it fails):
- illegal_ids: beams whose semantic id no catalog item has, with the trie on: must be 0
  (a trie-constrained beam can only reach a leaf; a leaf that names no item means the trie
  and the item map disagree).
- beam_overlap: |variant's beam items ∩ reference's| / |reference's|, averaged over users:
  at least BUILD_GR_MIN_OVERLAP (0.86: published int8/fp8 beam sets keep 86-92 % of bf16's).
- top_in_beam: the share of users whose reference top item is in the variant's beam: at least
  BUILD_GR_MIN_TOP_IN_BEAM.
- hr_at_10: the variant's HR@10 on the holdout's next items may fall below the reference's
  by at most BUILD_GR_MAX_HR_DROP (absolute; one-sided: a variant that does better passes).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Gate(StrEnum):
    ILLEGAL_IDS = "illegal_ids"
    BEAM_OVERLAP = "beam_overlap"
    TOP_IN_BEAM = "top_in_beam"
    HR_AT_10 = "hr_at_10"


@dataclass(frozen=True)
class Thresholds:
    min_overlap: float
    min_top_in_beam: float
    max_hr_drop: float


@dataclass(frozen=True)
class GateResult:
    gate: Gate
    figure: float
    threshold: str  # as a person reads it: "= 0", ">= 0.86", "drop <= 0.02"
    passed: bool
    reason: str  # "" when passed

    def as_dict(self) -> dict:
        return {
            "gate": str(self.gate),
            "figure": self.figure,
            "threshold": self.threshold,
            "passed": self.passed,
            "reason": self.reason,
        }


def judge(figures: dict, thresholds: Thresholds) -> list[GateResult]:
    """One result per gate, in Gate order. `figures`: illegal_ids, beams, overlap, top_in_beam,
    hr_at_10, hr_at_10_reference, users, width."""
    users, width = figures["users"], figures["width"]
    illegal = int(figures["illegal_ids"])
    overlap, top = float(figures["overlap"]), float(figures["top_in_beam"])
    hr, hr_ref = float(figures["hr_at_10"]), float(figures["hr_at_10_reference"])
    drop = hr_ref - hr
    return [
        GateResult(
            Gate.ILLEGAL_IDS,
            illegal,
            "= 0",
            illegal == 0,
            "" if illegal == 0 else f"{illegal} of {figures['beams']} beams are semantic ids no catalog item has",
        ),
        GateResult(
            Gate.BEAM_OVERLAP,
            overlap,
            f">= {thresholds.min_overlap:.2f}",
            overlap >= thresholds.min_overlap,
            ""
            if overlap >= thresholds.min_overlap
            else f"beam-set overlap with fp32 is {overlap:.1%} at width {width} over {users} users "
            f"(at least {thresholds.min_overlap:.0%})",
        ),
        GateResult(
            Gate.TOP_IN_BEAM,
            top,
            f">= {thresholds.min_top_in_beam:.2f}",
            top >= thresholds.min_top_in_beam,
            ""
            if top >= thresholds.min_top_in_beam
            else f"fp32's top item is in the beam for {top:.1%} of users (at least {thresholds.min_top_in_beam:.0%})",
        ),
        GateResult(
            Gate.HR_AT_10,
            hr,
            f"drop <= {thresholds.max_hr_drop:.3f} (fp32 {hr_ref:.3f})",
            drop <= thresholds.max_hr_drop + 1e-12,
            ""
            if drop <= thresholds.max_hr_drop + 1e-12
            else f"HR@10 is {hr:.3f}, {drop:.3f} below fp32's {hr_ref:.3f} (at most {thresholds.max_hr_drop:.3f})",
        ),
    ]


def verdict(results: list[GateResult]) -> tuple[bool, str]:
    """(servable, the reason it is not: every failed gate's sentence)."""
    failed = [r.reason for r in results if not r.passed]
    return (not failed, "beam gates failed: " + "; ".join(failed) if failed else "")
