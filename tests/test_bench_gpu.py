"""`python -m bench gpu` on this CPU-only machine, as a separate process without Django: the
CPU rows are measured, every GPU row is printed as skipped with the reason, and
var/bench/gpu.json says the same. Artifact directories are laid out as the factory
packages them (the factory's own graph steps over the tiny test model)."""

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from registry import names, triton_config
from registry.factory import recipes

ROOT = Path(__file__).resolve().parents[1]
SIGNATURE = {
    "inputs": [
        {"name": "dense", "dtype": "float32", "shape": [-1, 13]},
        {"name": "sparse", "dtype": "int64", "shape": [-1, 26]},
    ],
    "outputs": [{"name": "ctr", "dtype": "float32", "shape": [-1, 1]}],
}
# Runs the CLI as `python -m bench gpu` does, then fails if a package in $FORBID got imported.
NO_DJANGO = (
    "import os, runpy, sys\n"
    "sys.argv = ['bench', *sys.argv[1:]]\n"
    "try:\n    runpy.run_module('bench', run_name='__main__')\nexcept SystemExit as exc:\n    code = exc.code\n"
    "leaked = sorted(m for m in sys.modules if m.split('.')[0] in os.environ['FORBID'].split(','))\n"
    "assert not leaked, f'imported {leaked[:5]}'\n"
    "sys.exit(code)\n"
)


def _cli(
    *args, bench_dir: Path, timeout: int = 240, forbid: str = "django,config,tritonclient"
) -> subprocess.CompletedProcess:
    """GPU hosts have neither Django nor tritonclient; a directory not named after its
    variant may use tritonclient where it is installed (forbid="django,config")."""
    env = {"PATH": "/usr/bin:/bin", "BENCH_DIR": str(bench_dir), "HOME": str(bench_dir), "FORBID": forbid}
    return subprocess.run(
        [sys.executable, "-c", NO_DJANGO, "gpu", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


@pytest.fixture(scope="module")
def artifact_dirs(onnx_path, tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("artifacts")
    canonical, _, _ = recipes.canonical_graph(onnx.load(str(onnx_path)), work, opset=17)
    fused, optimized, _ = recipes.optimized_graphs(canonical, work)
    dirs = {}
    for variant in ("onnx-fp32", "onnx-int8", "onnx-fp32-gpu", "onnx-fp16", "tensorrt"):
        directory = work / "repo" / names.triton_model_name("tiny", 1, variant)
        (directory / "1").mkdir(parents=True)
        recipes.make_variant(variant, fused=fused, optimized=optimized, dest=directory / "1" / "model.onnx")
        config = triton_config.build_config(name=directory.name, signature=SIGNATURE, variant=variant)
        (directory / "config.pbtxt").write_text(triton_config.to_text(config))
        dirs[variant] = directory
    dirs["canonical"] = canonical
    return dirs


def test_bench_gpu_measures_the_cpu_rows_and_skips_each_gpu_row_with_the_reason(artifact_dirs, tmp_path):
    variants = [artifact_dirs[v] for v in ("onnx-fp32", "onnx-int8", "onnx-fp32-gpu", "onnx-fp16")]
    renamed = f"tensorrt={artifact_dirs['tensorrt']}"  # a directory not named after its variant
    proc = _cli(
        *variants,
        renamed,
        "--reference-onnx",
        artifact_dirs["canonical"],
        "--batches",
        "1,8",
        "--seconds",
        "0.01",
        "--validation-rows",
        "512",
        "--cpu-threads",
        "1",
        bench_dir=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "numerics against the CPU fp32 reference" in out and "latency and throughput" in out
    assert "onnx-fp16: skipped: not validated on CUDAExecutionProvider" in out
    assert "tensorrt: skipped: not validated on TensorrtExecutionProvider" in out
    assert "onnx-fp32 CPU graph on CUDA: skipped" in out
    result = json.loads((tmp_path / "gpu.json").read_text())
    assert result["complete"] is True
    numerics = result["numerics"]
    assert numerics["onnx-fp32"]["status"] == "validated" and numerics["onnx-fp32"]["max_abs_error"] <= 1e-5
    assert (
        numerics["onnx-int8"]["status"] == "validated" and numerics["onnx-int8"]["max_abs_error"] > 0
    )  # really quantized
    for variant in ("onnx-fp32-gpu", "onnx-fp16", "tensorrt"):
        assert (
            numerics[variant]["status"] == "skipped"
            and "the CPU build has no GPU providers" in numerics[variant]["reason"]
        )
        assert "skipped" in result["benchmarks"][variant]
        assert result["serving_plans"][variant]["basis"].startswith("default (no GPU measurement)")
    cpu_rows = result["benchmarks"]["onnx-int8 (CPU, 1 threads)"]["modes"]["host-io"]
    assert set(cpu_rows) == {"1", "8"} and all(
        row["p50_ms"] > 0 and row["throughput_p50_rps"] > 0 for row in cpu_rows.values()
    )
    assert result["reference"]["rows"] == 512 and result["host"]["runtime"].startswith("onnxruntime")
    assert [g["met"] for g in result["goals"]] == [None, None, None]  # no GPU: not measured, never "met"


def test_bench_gpu_refuses_what_it_cannot_check_with_a_clear_error(artifact_dirs, tmp_path):
    odd = tmp_path / "some-model"
    (odd / "1").mkdir(parents=True)
    proc = _cli(odd, bench_dir=tmp_path, forbid="django,config")
    assert proc.returncode == 2 and "cannot tell the variant" in proc.stderr and "VARIANT=DIR" in proc.stderr
    proc = _cli(artifact_dirs["onnx-fp16"], bench_dir=tmp_path)
    assert proc.returncode == 2 and "no CPU fp32 reference" in proc.stderr
    proc = _cli(f"onnx-int8={tmp_path / 'missing'}", bench_dir=tmp_path)
    assert proc.returncode == 2 and "not a directory" in proc.stderr
    proc = _cli(artifact_dirs["onnx-fp32"], "--batches", "0", bench_dir=tmp_path)
    assert proc.returncode == 2 and "--batches" in proc.stderr
    assert not (tmp_path / "gpu.json").exists()


@pytest.mark.integration
def test_bench_gpu_reference_makes_the_factorys_artifacts_and_checks_them(tmp_path):
    """The mode the GPU host runs (`--reference`), at toy scale on the CPU: trains the
    reference ranker with torch, exports it, runs the factory's graph steps, checks all five
    variants and benchmarks what this machine can run."""
    proc = _cli(
        "--reference",
        "--rows",
        "3000",
        "--vocab",
        "500",
        "--validation-rows",
        "1000",
        "--batches",
        "1,32",
        "--seconds",
        "0.01",
        "--cpu-threads",
        "1",
        bench_dir=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "gpu.json").read_text())
    assert result["train"]["device"] == "cpu" and result["exporter"] in ("torchscript", "dynamo")
    assert set(result["numerics"]) == {"onnx-fp32", "onnx-int8", "onnx-fp32-gpu", "onnx-fp16", "tensorrt"}
    assert result["numerics"]["onnx-fp32"]["max_abs_error"] <= 1e-5 and result["reference"]["auc"] > 0.6
    assert result["numerics"]["onnx-fp16"]["status"] == "skipped"
    assert "pytorch eager fp32 (cpu)" in result["benchmarks"]
    assert "[" in proc.stdout and "trained in" in proc.stdout  # progress lines
