"""python -m bench build_box: what running a build's stages in a limited child process
(registry/factory/box.py) costs compared with running them in the worker itself.

For the tiny CTR model (harness/onnx.py) with the fast build settings the tests use,
each round runs the six stages twice: in this process (modules already imported, as in
a warm worker) and boxed (a fresh child: interpreter, Django settings, the stages'
libraries, then the same stages) — once with the worker's warm spare child ready (builds
some seconds apart) and once from a cold start (builds back to back). Reports the median
wall time of each and the overhead. Prints a table and writes
var/bench/build_box.json.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import print_table, write_json

FAST = {"BUILD_BENCH_SECONDS": 0.02, "BUILD_BENCH_BATCHES": "1,8", "BUILD_VALIDATION_ROWS": 512}


def _ctx_kwargs(work: Path, source: Path) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    return dict(
        work_dir=work,
        model_name="bench",
        version=1,
        task="ctr",
        source="upload",
        framework="onnx",
        source_path=source,
        source_uri="",
        expected_signature={},
        targets=["onnx-fp32", "onnx-int8"],
    )


def _in_process(work: Path, source: Path) -> float:
    from registry.factory import STAGES, stages

    started = time.perf_counter()
    ctx = stages.BuildContext(**_ctx_kwargs(work, source), log=lambda line: None)
    for name in STAGES:
        stages.STAGE_FUNCTIONS[name](ctx)
    assert all(v.status == "servable" for v in ctx.variants.values()), ctx.variants
    return time.perf_counter() - started


def _boxed(work: Path, source: Path, snapshot: dict, *, warm: bool) -> tuple[float, float]:
    from registry.factory import STAGES, box

    if warm:  # builds some seconds apart: the spare child is ready
        box.start_spare()
        assert box.wait_for_spare(120), "the spare build process did not warm up"
    elif box._spare is not None:  # builds back to back: no spare ready, a cold start
        box._spare[0].kill()
        box._spare[0].wait()
        box._spare = None
    started = time.perf_counter()
    first_line = []

    def log(line):
        if not first_line:
            first_line.append(time.perf_counter() - started)

    boxed = box.BoxedStages(_ctx_kwargs(work, source), settings_snapshot=snapshot, memory_mb=4096, cpu_s=600, gpu=False)
    try:
        for name in STAGES:
            boxed.run(name, log)
        variants = boxed.variants()
    finally:
        boxed.close()
    assert all(v.status == "servable" for v in variants.values()), variants
    return time.perf_counter() - started, first_line[0]


def main(argv) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench build_box")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    import django

    django.setup()
    from django.conf import settings

    from harness.onnx import write as write_onnx
    from registry.factory import conf

    for key, value in FAST.items():
        setattr(settings, key, value)
    snapshot = {name: conf.get(name) for name in conf.SETTINGS}
    root = Path(tempfile.mkdtemp(prefix="bench-box-"))
    try:
        source = write_onnx(root / "ctr.onnx")
        _in_process(root / "warm", source)  # imports and first-run costs out of the way, as in a warm worker
        inside, warm, cold, warm_start, cold_start = [], [], [], [], []
        for n in range(args.rounds):
            inside.append(_in_process(root / f"in-{n}", source))
            for label, walls, starts, is_warm in (
                ("warm spare", warm, warm_start, True),
                ("cold start", cold, cold_start, False),
            ):
                wall, first = _boxed(root / f"box-{label[:4]}-{n}", source, snapshot, warm=is_warm)
                walls.append(wall)
                starts.append(first)
            print(
                f"round {n + 1}/{args.rounds}: in process {inside[-1]:.2f}s, boxed with a warm spare {warm[-1]:.2f}s, "
                f"boxed from a cold start {cold[-1]:.2f}s"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    med = statistics.median
    rows = [["stages in the worker process", med(inside), min(inside), max(inside), ""]]
    for label, walls, starts in (
        ("boxed, warm spare child", warm, warm_start),
        ("boxed, cold child", cold, cold_start),
    ):
        rows.append(
            [
                label,
                med(walls),
                min(walls),
                max(walls),
                f"{med(walls) - med(inside):+.2f}s (child answers after {med(starts):.2f}s)",
            ]
        )
    print_table(["build of the tiny CTR model", "median s", "min s", "max s", "overhead"], rows)
    path = write_json(
        "build_box",
        {
            "rounds": args.rounds,
            "settings": FAST,
            "in_process_s": inside,
            "boxed_warm_s": warm,
            "boxed_cold_s": cold,
            "warm_first_reply_s": warm_start,
            "cold_first_reply_s": cold_start,
            "median_in_process_s": med(inside),
            "median_boxed_warm_s": med(warm),
            "median_boxed_cold_s": med(cold),
            "median_overhead_warm_s": med(warm) - med(inside),
            "median_overhead_cold_s": med(cold) - med(inside),
        },
    )
    print(f"wrote {path}")
    return 0
