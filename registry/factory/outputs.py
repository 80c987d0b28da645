"""Models with several outputs, integer outputs or class-probability pairs (no Django).

The validate stage judges a variant on its *primary* output (the score AUC and logloss
are about) and checks every other output too: exact variants must reproduce each output
within the fp32 tolerance (integer outputs exactly); low-precision variants must not
produce NaN/Inf anywhere, and their other outputs are reported (error statistics, or
the share of equal values for integer outputs such as a tree ensemble's class label).
"""

from __future__ import annotations

import numpy as np

from registry.factory import graphs, numerics


def run_all(path, feeds: dict, chunk: int = 1024, providers=None) -> dict[str, np.ndarray]:
    """Every output over all rows of `feeds`, `chunk` rows per run."""
    session = graphs.session(path, providers=providers)
    names = [o.name for o in session.get_outputs()]
    rows = len(next(iter(feeds.values())))
    parts = [session.run(names, graphs.slice_rows(feeds, start, start + chunk)) for start in range(0, rows, chunk)]
    return {name: np.concatenate([p[i] for p in parts], axis=0) for i, name in enumerate(names)}


def primary(signature: dict, outputs: dict[str, np.ndarray]) -> tuple[str, np.ndarray]:
    """(name, scores [rows, k]): the first float output; a [rows, 2] probability pair
    (a binary classifier's P(class 0), P(class 1)) gives its second column."""
    names = [s["name"] for s in signature["outputs"]] or list(outputs)
    for name in names:
        values = outputs[name]
        if values.dtype.kind != "f":
            continue
        if values.ndim == 2 and values.shape[1] == 2 and np.allclose(values.sum(axis=1), 1.0, atol=1e-4):
            return name, values[:, 1:2]
        return name, values.reshape(values.shape[0], -1) if values.ndim == 1 else values
    return names[0], outputs[names[0]]


def pick(name: str, outputs: dict[str, np.ndarray], like: np.ndarray) -> np.ndarray:
    """The same view of `outputs[name]` that primary() took (the positive-class column)."""
    values = outputs[name]
    if values.ndim == 2 and values.shape[1] == 2 and like.shape[1:] == (1,):
        return values[:, 1:2]
    return values.reshape(like.shape)


def others(reference: dict, out: dict, primary_name: str, kind: str, fp32_max_abs: float) -> tuple[bool, str, dict]:
    """(passed, why not, evidence per output) for every output but the primary one."""
    evidence, failure = {}, ""
    for name, ref in reference.items():
        if name == primary_name:
            continue
        got = out.get(name)
        if got is None or got.shape != ref.shape:
            failure = (
                failure
                or f"output {name!r} has shape {None if got is None else list(got.shape)}, the original {list(ref.shape)}"
            )
            continue
        if ref.dtype.kind in "iub":
            equal = float(np.mean(got == ref)) if ref.size else 1.0
            evidence[name] = {"values": int(ref.size), "equal_share": equal}
            if kind == "exact" and equal < 1.0:
                failure = failure or f"output {name!r} differs from the original on {(1 - equal):.2%} of values"
            continue
        stats = numerics.compare(ref.astype(np.float64), got.astype(np.float64))
        evidence[name] = stats
        if stats["nan_count"]:
            failure = failure or f"output {name!r} has NaN/Inf on {stats['nan_count']} of {stats['values']} values"
        elif kind == "exact" and stats["max_abs_error"] > fp32_max_abs:
            failure = failure or f"output {name!r}: max abs error {stats['max_abs_error']} > {fp32_max_abs}"
    return not failure, failure, evidence
