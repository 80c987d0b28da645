"""Helpers every benchmark uses: where results go and how tables are printed."""

import json
import os
import time
from pathlib import Path


def out_dir() -> Path:
    """var/bench/ (BENCH_DIR overrides: a benchmark that gives its processes a VAR_DIR of
    their own still writes its results here)."""
    path = Path(os.environ.get("BENCH_DIR") or Path(os.environ.get("VAR_DIR", "var")) / "bench")
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_json(name: str, payload: dict) -> Path:
    path = out_dir() / f"{name}.json"
    payload = {"benchmark": name, "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **payload}
    path.write_text(json.dumps(payload, indent=2, sort_keys=True))
    return path


def print_table(headers: list[str], rows: list[list]) -> None:
    cells = [[str(h) for h in headers]] + [
        [f"{c:.3f}" if isinstance(c, float) else str(c) for c in row] for row in rows
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        print("  ".join(c.rjust(w) if n else c.ljust(w) for c, w in zip(row, widths)))
        if n == 0:
            print("  ".join("-" * w for w in widths))
