"""The factory's graph steps without Django: canonical graph, optimized graphs, variants.

The build stages (stages.py) call these with the build's settings; `python -m bench gpu
--reference` calls them on a GPU host without Django to make the same artifacts there.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx

from registry.factory import graphs
from registry.factory.gpu import graphs as gpu_graphs


class VariantRefused(Exception):
    """A variant that cannot be made from this graph (the build goes on without it)."""


class VariantNotApplicable(VariantRefused):
    """A variant that means nothing for this graph (skipped with the reason, not rejected)."""


# Low-precision variants rewrite float weights; ai.onnx.ml operators (tree ensembles, scalers,
# encoders) keep theirs in attributes, which no quantizer or fp16 converter here touches.
LOW_PRECISION = ("onnx-int8", "onnx-fp16", "tensorrt")
QUANTIZED_OPS = {
    "DynamicQuantizeLinear",
    "MatMulInteger",
    "DynamicQuantizeMatMul",
    "QLinearMatMul",
    "DequantizeLinear",
    "QuantizeLinear",
    "QGemm",
    "ConvInteger",
    "QLinearConv",
}


def _ml_ops(path: Path) -> list[str]:
    model = onnx.load(str(path))
    return sorted({n.op_type for n in model.graph.node if n.domain == "ai.onnx.ml"})


def canonical_graph(model: onnx.ModelProto, work_dir: Path, *, opset: int) -> tuple[Path, onnx.ModelProto, list[str]]:
    """Checked, opset-pinned, shape-inferred and constant-folded (ORT basic level) graph."""
    notes = []
    graphs.check(model)
    model, note = graphs.pin_opset(model, opset)
    notes.append(note)
    model = onnx.shape_inference.infer_shapes(model)
    raw = work_dir / "source.onnx"
    onnx.save(model, str(raw))
    # ORT's basic level = constant folding + redundant node elimination, standard ops only.
    canonical = work_dir / "canonical.onnx"
    folded = graphs.ort_offline(raw, canonical, "basic")
    graphs.check(folded)
    notes.append(f"folded constants: {len(model.graph.node)} -> {len(folded.graph.node)} nodes")
    return canonical, folded, notes


def optimized_graphs(canonical: Path, work_dir: Path) -> tuple[Path, Path, list[str]]:
    """(fused, optimized): the embedding gathers fused (exact; the base of int8 and every
    GPU variant), then ORT's extended level for the CPU (the base of onnx-fp32)."""
    model = onnx.load(str(canonical))
    fused, count = graphs.fuse_embedding_gathers(model)
    fused_path = work_dir / "fused.onnx"
    onnx.save(fused, str(fused_path))
    notes = [
        f"fused {count} embedding lookups into one gather over a concatenated table"
        if count
        else "no per-feature embedding lookups to fuse"
    ]
    # Extended level: operator fusions (Gemm+activation, …); not the hardware-specific
    # layout transforms of level "all", so the saved graph is portable across CPUs. Its
    # fused nodes are CPU kernels: GPU variants never start from it.
    optimized_path = work_dir / "optimized.onnx"
    optimized = graphs.ort_offline(fused_path, optimized_path, "extended")
    notes.append(
        f"ONNX Runtime offline optimization (extended, CPU): {len(fused.graph.node)} -> {len(optimized.graph.node)} nodes"
    )
    return fused_path, optimized_path, notes


def make_variant(target: str, *, fused: Path, optimized: Path, dest: Path) -> None:
    """Write `target`'s graph to `dest`; VariantRefused says why it cannot be made."""
    if target in LOW_PRECISION and (ml_ops := _ml_ops(fused)):
        raise VariantNotApplicable(
            f"{target} does not apply to ai.onnx.ml operators ({', '.join(ml_ops)}): their weights are "
            "attributes no quantizer or fp16 converter rewrites; serve onnx-fp32"
        )
    if target == "onnx-fp32":
        shutil.copyfile(optimized, dest)
    elif target == "onnx-int8":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        try:
            quantize_dynamic(
                str(fused), str(dest), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gemm", "Gather"]
            )
        except Exception as exc:  # the quantizer raises plain exceptions on graphs it cannot handle
            raise VariantRefused(f"INT8 quantization failed: {str(exc).splitlines()[0][:300]}") from exc
        if not any(n.op_type in QUANTIZED_OPS for n in onnx.load(str(dest)).graph.node):
            dest.unlink(missing_ok=True)
            raise VariantNotApplicable(
                "INT8 quantization does not apply: the graph has no MatMul, Gemm or Gather weights to quantize"
            )
    elif target in ("onnx-fp32-gpu", "tensorrt"):
        # tensorrt: Triton's TensorRT accelerator builds FP16 engines from this fp32 graph on the GPU.
        try:
            gpu_graphs.make_gpu_fp32(fused, dest)
        except graphs.GraphError as exc:
            raise VariantRefused(str(exc)) from exc
    elif target == "onnx-fp16":
        try:
            gpu_graphs.make_fp16(fused, dest)
        except graphs.GraphError as exc:
            raise VariantRefused(str(exc)) from exc
    else:
        raise KeyError(target)
