"""The graphs GPU variants are made of.

The CPU `onnx-fp32` artifact is ORT-optimized at the extended level *for the CPU*: it
holds CPU-only fused nodes (`FusedGemm`, …) that the CUDA EP cannot run, so on a GPU
they fall back to the CPU with a host copy around each (9x slower at batch 4096 on an
H100, docs/benchmarks.md). GPU variants start instead from the canonical graph (ORT basic level:
constant folding and redundant-node elimination, standard ops only) with the embedding
gathers fused; ONNX Runtime applies its CUDA-aware fusions when the GPU session loads it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx

from registry.factory.graphs import GraphError

# Contrib ops ONNX Runtime's CPU graph optimizer or quantizer produces that have no CUDA
# kernel; the placement check of a GPU session (providers.placement) is the proof.
CPU_ONLY_OPS = {
    "com.microsoft": {
        "FusedGemm",
        "NhwcMaxPool",
        "DynamicQuantizeMatMul",
        "MatMulInteger16",
        "QLinearConv",
        "QLinearAdd",
        "QLinearMul",
        "QLinearAveragePool",
        "QLinearGlobalAveragePool",
        "QLinearLeakyRelu",
        "QLinearSigmoid",
        "QLinearSoftmax",
        "QLinearConcat",
        "QLinearWhere",
        "MurmurHash3",
        "Tokenizer",
        "WordConvEmbedding",
        "CDist",
        "Unique",
        "ExpandDims",
    },
}
CPU_ONLY_DOMAINS = {"com.microsoft.nchwc"}  # the CPU's blocked memory layout


def cpu_only_ops(model: onnx.ModelProto) -> list[str]:
    """'Op (node name)' for every node a GPU session would have to run on the CPU."""
    found = []
    for node in model.graph.node:
        if node.domain in CPU_ONLY_DOMAINS or node.op_type in CPU_ONLY_OPS.get(node.domain, ()):
            found.append(f"{node.domain}::{node.op_type} (node {node.name or node.output[0]!r})")
    return found


def _refuse_cpu_only(model: onnx.ModelProto, what: str) -> None:
    found = cpu_only_ops(model)
    if found:
        raise GraphError(
            f"{what} has CPU-only operators that a GPU session would run on the CPU: {', '.join(found[:5])}"
            + (f" and {len(found) - 5} more" if len(found) > 5 else ""),
            "cpu_only_ops",
        )


def make_gpu_fp32(src: Path, dest: Path) -> onnx.ModelProto:
    """The fp32 GPU graph: `src` (canonical + fused gathers) as is, refused if it holds
    CPU-only contrib ops (a user's graph saved by ORT's CPU optimizer, say)."""
    model = onnx.load(str(src))
    _refuse_cpu_only(model, "the fp32 GPU graph")
    shutil.copyfile(src, dest)
    return model


def make_fp16(src: Path, dest: Path) -> onnx.ModelProto:
    """fp16 weights and activations, fp32 inputs and outputs (callers keep their types)."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(str(src))
    _refuse_cpu_only(model, "the graph the fp16 variant is made from")
    fp16 = convert_float_to_float16(model, keep_io_types=True)
    onnx.save(fp16, str(dest))
    return fp16
