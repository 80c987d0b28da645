"""Read a version's data file (an input example or a labelled validation set) and check it
against the version's signature. Nothing here unpickles: NPZ with
np.load(allow_pickle=False), Parquet with pyarrow, JSON lines with json.

Formats (by content, not by name):
- NPZ (a zip of .npy arrays): one array per input name, rows on axis 0, plus the label array.
- Parquet: one column per input; a vector input is a list column (one list per row).
- JSON lines: one object per row, {"<input>": value or nested list, ..., "<label>": number}.

The result is a dict of numpy arrays (inputs cast to the signature's dtypes, labels as
float64 under "label") that registry/services/version_data.py stores as NPZ. Every
refusal is an InvalidInput naming the input and what disagrees.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np

from kernel.errors import InvalidInput

FORMATS = ("npz", "parquet", "jsonl")
_NP = {
    "float32": np.float32,
    "float64": np.float64,
    "float16": np.float16,
    "int64": np.int64,
    "int32": np.int32,
    "int16": np.int16,
    "int8": np.int8,
    "uint8": np.uint8,
    "bool": np.bool_,
}


def _bad(message: str, code: str = "data_invalid") -> InvalidInput:
    return InvalidInput(f"file: {message}", code=code, field="file")


def sniff(path: Path) -> str:
    with open(path, "rb") as fh:
        head = fh.read(8)
    if head[:4] == b"PK\x03\x04":
        return "npz"
    if head[:4] == b"PAR1":
        return "parquet"
    if head[:1] == b"\x80":
        raise _bad(
            "the file is a Python pickle; pickles are never loaded (send NPZ, Parquet or JSON lines)", "data_format"
        )
    if head.lstrip()[:1] == b"{":
        return "jsonl"
    raise _bad("not NPZ, Parquet or JSON lines (one JSON object per line)", "data_format")


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except ValueError as exc:  # object arrays need pickle: refused
        raise _bad(
            f"the NPZ holds an array that needs pickle to load ({exc}); save plain numeric arrays", "data_format"
        ) from None
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise _bad(f"the NPZ does not read (truncated or not .npz): {exc}", "data_format") from None


def _column(values: list, name: str) -> np.ndarray:
    try:
        return np.asarray(values)
    except ValueError:
        raise _bad(f"input {name!r}: rows have different shapes (ragged)", "data_shape") from None


def _read_parquet(path: Path) -> dict[str, np.ndarray]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise _bad(f"the Parquet file does not read: {exc}", "data_format") from None
    out = {}
    for name in table.column_names:
        column = table.column(name)
        if (
            pa.types.is_list(column.type)
            or pa.types.is_large_list(column.type)
            or pa.types.is_fixed_size_list(column.type)
        ):
            out[name] = _column(column.to_pylist(), name)
        else:
            out[name] = column.to_numpy()
    return out


def _read_jsonl(path: Path) -> dict[str, np.ndarray]:
    rows = []
    with open(path, encoding="utf-8", errors="strict") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise _bad(
                    f"line {number} is not JSON: {exc.msg if hasattr(exc, 'msg') else exc}", "data_format"
                ) from None
            if not isinstance(row, dict):
                raise _bad(f"line {number} is not a JSON object keyed by input name", "data_format")
            rows.append(row)
    if not rows:
        raise _bad("the file has no rows", "data_rows")
    keys = set(rows[0])
    for number, row in enumerate(rows, 1):
        if set(row) != keys:
            raise _bad(f"row {number} has keys {sorted(row)}, row 1 has {sorted(keys)}", "data_names")
    return {k: _column([row[k] for row in rows], k) for k in rows[0]}


def read(path: Path) -> tuple[str, dict[str, np.ndarray]]:
    fmt = sniff(path)
    return fmt, {"npz": _read_npz, "parquet": _read_parquet, "jsonl": _read_jsonl}[fmt](path)


def _cast(name: str, array: np.ndarray, dtype: str) -> np.ndarray:
    want = np.dtype(_NP.get(dtype, np.float32))
    have = array.dtype
    if have.kind in "OUSV":
        raise _bad(
            f"input {name!r} is {dtype} in the model; the data holds {have.kind in 'US' and 'strings' or 'objects'}",
            "data_dtype",
        )
    if want.kind in "iu" and have.kind == "f":
        raise _bad(
            f"input {name!r} is {dtype} in the model; the data holds {have.name} (floats for an integer input)",
            "data_dtype",
        )
    if want.kind == "b" and have.kind != "b":
        raise _bad(f"input {name!r} is bool in the model; the data holds {have.name}", "data_dtype")
    if want.kind in "iu" and have.kind in "iu" and array.size:
        info = np.iinfo(want)
        if array.min() < info.min or array.max() > info.max:
            raise _bad(
                f"input {name!r} is {dtype} in the model; values in [{array.min()}, {array.max()}] do not fit",
                "data_dtype",
            )
    return np.ascontiguousarray(array.astype(want, copy=False))


def _check_names(arrays: dict, specs: dict, label: str | None) -> None:
    """Every input the model takes, the label when one is named, and nothing else."""
    missing = [n for n in specs if n not in arrays]
    if missing:
        raise _bad(f"missing input(s) {missing}; the model takes {sorted(specs)}", "data_names")
    if label is not None and label not in arrays:
        raise _bad(
            f"no label {label!r} (a column/array of 0/1 or numeric targets); found {sorted(arrays)}", "data_label"
        )
    extra = sorted(set(arrays) - set(specs) - ({label} if label else set()))
    if extra:
        raise _bad(
            f"unknown name(s) {extra}: the model's inputs are {sorted(specs)}"
            + (f" and the label is {label!r}" if label else ""),
            "data_names",
        )


def _shaped(name: str, array: np.ndarray, dims: list) -> np.ndarray:
    """`array` in the input's shape (one value per row becomes [rows, 1] for a [batch, 1] input), or the 400 saying how it differs."""
    if array.ndim == 0:
        raise _bad(f"input {name!r} is a scalar; rows go on the first axis", "data_shape")
    if dims and array.ndim == len(dims) - 1 and dims[-1] == 1:  # one value per row for a [batch, 1] input
        array = array.reshape(*array.shape, 1)
    if dims and array.ndim != len(dims):
        raise _bad(f"input {name!r} has shape {list(array.shape)}; the model takes {dims} (-1: any size)", "data_shape")
    for axis, (have, want) in enumerate(zip(array.shape, dims)):
        if axis > 0 and want not in (-1, None) and have != want:
            raise _bad(
                f"input {name!r} has shape {list(array.shape)}; the model takes {dims} (dimension {axis} is {have}, not {want})",
                "data_shape",
            )
    return array


def check(arrays: dict[str, np.ndarray], signature: dict, *, label: str | None, max_rows: int) -> dict[str, np.ndarray]:
    """Inputs named and shaped as the signature says, one row count, a finite numeric label
    when `label` is given. Returns the arrays to store (label under "label")."""
    specs = {s["name"]: s for s in signature.get("inputs") or []}
    if not specs:
        raise InvalidInput(
            "version: it has no input signature yet; data cannot be checked against it",
            code="signature_missing",
            field="version",
        )
    _check_names(arrays, specs, label)
    out, rows = {}, None
    for name, spec in specs.items():
        array = arrays[name]
        array = _shaped(name, array, list(spec.get("shape") or []))
        if rows is None:
            rows = array.shape[0]
        elif array.shape[0] != rows:
            raise _bad(f"input {name!r} has {array.shape[0]} rows, other inputs have {rows}", "data_rows")
        out[name] = _cast(name, array, spec.get("dtype", "float32"))
    if not rows:
        raise _bad("the data has no rows", "data_rows")
    if rows > max_rows:
        raise _bad(f"{rows} rows is over the {max_rows}-row limit (VERSION_DATA_MAX_ROWS)", "data_rows")
    if label is not None:
        values = arrays[label]
        if values.dtype.kind not in "biuf":
            raise _bad(
                f"label {label!r} holds {values.dtype.name}; labels are numbers (0/1 for a classifier)", "data_label"
            )
        values = values.reshape(values.shape[0], -1) if values.ndim > 1 else values
        if values.shape[0] != rows or (values.ndim == 2 and values.shape[1] != 1):
            raise _bad(
                f"label {label!r} has shape {list(values.shape)}; one value per row ({rows} rows) is needed",
                "data_label",
            )
        values = values.reshape(-1).astype(np.float64)
        if not np.all(np.isfinite(values)):
            raise _bad(f"label {label!r} has NaN/Inf values", "data_label")
        out["label"] = values
    return out


def to_npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def summary(arrays: dict[str, np.ndarray]) -> dict:
    inputs = {k: {"dtype": v.dtype.name, "shape": list(v.shape)} for k, v in arrays.items() if k != "label"}
    out = {"rows": int(next(iter(arrays.values())).shape[0]), "inputs": inputs}
    if "label" in arrays:
        labels = arrays["label"]
        out["label"] = {"mean": float(labels.mean()), "binary": bool(np.isin(labels, (0.0, 1.0)).all())}
    return out
