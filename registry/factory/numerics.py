"""How a variant's outputs compare with the original's: error statistics, AUC and
logloss deltas, and the tolerance each kind of variant is held to. No Django imports:
the build's validate stage and `python -m bench gpu` (on a GPU host without Django) use
the same functions.

Tolerances (the build's settings override the defaults; see registry/factory/conf.py):

- exact fp32 variants (`onnx-fp32` on the CPU, `onnx-fp32-gpu` on CUDA with TF32 off):
  max abs error <= FP32_MAX_ABS against the original on the CPU.
- fp16 variants (`onnx-fp16`, `tensorrt` with FP16 engines): max abs error <=
  FP16_MAX_ABS and, for classifiers, an AUC loss <= FP16_MAX_AUC_LOSS; other models a
  max relative error <= LOWP_MAX_REL.
- int8 (`onnx-int8`): AUC loss <= LOWP_MAX_AUC_LOSS for classifiers, else max relative
  error <= LOWP_MAX_REL.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from registry.quality import auc, logloss

FP32_MAX_ABS = 1e-5
FP16_MAX_ABS = 1e-2
FP16_MAX_AUC_LOSS = 1e-4
LOWP_MAX_AUC_LOSS = 1e-3
LOWP_MAX_REL = 0.05  # non-classifiers: 5 % relative error


# The tolerance kind each variant is held to; unknown variants are low precision.
VARIANT_KIND = {
    "onnx-fp32": "exact",
    "onnx-fp32-gpu": "exact",
    "onnx-fp16": "fp16",
    "tensorrt": "fp16",
    "onnx-int8": "lowp",
}


@dataclass(frozen=True)
class Tolerance:
    """What a variant must meet. `kind`: exact | fp16 | lowp."""

    kind: str
    max_abs: float | None = None
    max_auc_loss: float | None = None
    max_rel: float = LOWP_MAX_REL


def tolerance_for(
    kind: str,
    *,
    fp32_max_abs: float = FP32_MAX_ABS,
    fp16_max_abs: float = FP16_MAX_ABS,
    fp16_max_auc_loss: float = FP16_MAX_AUC_LOSS,
    lowp_max_auc_loss: float = LOWP_MAX_AUC_LOSS,
) -> Tolerance:
    if kind == "exact":
        return Tolerance("exact", max_abs=fp32_max_abs)
    if kind == "fp16":
        return Tolerance("fp16", max_abs=fp16_max_abs, max_auc_loss=fp16_max_auc_loss)
    return Tolerance("lowp", max_auc_loss=lowp_max_auc_loss)


def degenerate(reference: np.ndarray, *, classifier: bool) -> str | None:
    """Why the original's outputs cannot be validated against, or None: NaN/Inf in them,
    or the same value on every row (nothing to rank: AUC undefined)."""
    reference = np.asarray(reference, dtype=np.float64)
    bad = int(reference.size - np.isfinite(reference).sum())
    if bad:
        return f"model outputs contain NaN/Inf ({bad} of {reference.size} values)"
    rows = reference.reshape(reference.shape[0], -1) if reference.ndim else reference.reshape(1, 1)
    if rows.shape[0] > 1 and np.all(np.ptp(rows, axis=0) == 0):
        value = float(rows[0, 0])
        return f"model outputs are constant ({value:g} on every row)" + (": AUC undefined" if classifier else "")
    return None


def json_safe(value):
    """`value` with every NaN/Inf float replaced by None (JSON has no NaN: a JSONField
    would refuse it) and numpy scalars made plain."""
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def labels_from_reference(reference: np.ndarray, seed: int = 7) -> np.ndarray:
    """No labelled set: labels drawn from the original's own probabilities (seeded), so AUC
    deltas measure how much a variant changes the ranking the original makes."""
    return (np.random.default_rng(seed).random(reference.shape[0]) < reference.reshape(-1)).astype(np.float64)


def baseline(reference: np.ndarray, labels: np.ndarray | None) -> dict:
    if labels is None:
        return {}
    return {"auc": auc(labels, reference.reshape(-1)), "logloss": logloss(labels, reference.reshape(-1))}


def compare(reference: np.ndarray, out: np.ndarray, labels: np.ndarray | None = None, base: dict | None = None) -> dict:
    """Error statistics of `out` against `reference` (same rows), plus AUC and logloss and
    their deltas when `labels` are given (a classifier)."""
    reference = np.asarray(reference, dtype=np.float64)
    out = np.asarray(out, dtype=np.float64).reshape(reference.shape)
    nan_count = int(np.size(out) - np.isfinite(out).sum())
    evidence = {
        "values": int(out.size),
        "nan_count": nan_count,
        "max_abs_error": None,
        "max_rel_error": None,
        "mean_abs_error": None,
    }
    if nan_count < out.size:
        diff = np.abs(out - reference)
        evidence.update(
            max_abs_error=float(np.nanmax(diff)),
            max_rel_error=float(np.nanmax(diff / np.maximum(np.abs(reference), 1e-6))),
            mean_abs_error=float(np.nanmean(diff)),
        )
    if labels is not None and nan_count == 0:
        base = base if base is not None else baseline(reference, labels)
        score_auc, loss = auc(labels, out.reshape(-1)), logloss(labels, out.reshape(-1))
        evidence.update(
            auc=score_auc, logloss=loss, auc_delta=score_auc - base["auc"], logloss_delta=loss - base["logloss"]
        )
    return evidence


def judge(evidence: dict, tolerance: Tolerance, *, classifier: bool) -> tuple[bool, str, dict]:
    """(passed, why not, threshold) for one compared variant."""
    if evidence["nan_count"]:
        return False, f"the variant outputs NaN/Inf on {evidence['nan_count']} of {evidence['values']} values", {}
    max_abs, auc_delta, max_rel = (
        evidence.get("max_abs_error"),
        evidence.get("auc_delta"),
        evidence.get("max_rel_error"),
    )
    if tolerance.kind == "exact":
        ok = max_abs is not None and max_abs <= tolerance.max_abs
        return ok, f"max abs error {max_abs} > {tolerance.max_abs}", {"max_abs_error": tolerance.max_abs}
    if not classifier:
        ok = max_rel is not None and max_rel <= tolerance.max_rel
        return ok, f"max rel error {max_rel} > {tolerance.max_rel}", {"max_rel_error": tolerance.max_rel}
    threshold = {"auc_loss": tolerance.max_auc_loss}
    auc_ok = auc_delta is not None and -auc_delta <= tolerance.max_auc_loss
    why = f"AUC loss {-(auc_delta if auc_delta is not None else float('nan')):.6f} > {tolerance.max_auc_loss}"
    if tolerance.max_abs is not None:
        threshold["max_abs_error"] = tolerance.max_abs
        if auc_ok and not (max_abs is not None and max_abs <= tolerance.max_abs):
            return False, f"max abs error {max_abs} > {tolerance.max_abs}", threshold
    return auc_ok, why, threshold
