"""Export the generative recommender's two inference graphs to ONNX, with the names and
dynamic axes registry/gr/runtime.py expects. TorchScript's exporter (what the factory uses for
the CTR ranker), dynamo where a torch no longer has it. No Django."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from registry.gr.runtime import (
    DECODE_INPUTS,
    DECODE_OUTPUTS,
    ENCODE_INPUTS,
    ENCODE_OUTPUTS,
    EXTEND_INPUTS,
    EXTEND_OUTPUTS,
    GRAPH_FILES,
)


class _Encode(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, codes):
        return self.model.encode(None, None, codes)


class _Extend(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, past_k, past_v, codes):
        return self.model.encode(past_k, past_v, codes)


class _Decode(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, past_k, past_v, tokens):
        return self.model.decode(past_k, past_v, tokens)


def _export(module, args, path: Path, inputs, outputs, axes, opset: int) -> None:
    module.eval()  # a new wrapper is in training mode, and the exporter restores that mode to the model after
    kwargs = dict(input_names=list(inputs), output_names=list(outputs), dynamic_axes=axes, opset_version=opset)
    try:
        torch.onnx.export(module, args, str(path), dynamo=False, **kwargs)
    except Exception as first:  # torch versions without the TorchScript exporter raise here
        try:
            torch.onnx.export(module, args, str(path), dynamo=True, **kwargs)
        except Exception as exc:
            raise RuntimeError(f"torch.onnx.export failed: TorchScript: {first}; dynamo: {exc}") from exc


def export_graphs(model, directory: Path, *, opset: int = 17) -> dict[str, Path]:
    """Write the encode, extend and decode graphs of `model` into `directory` (GRAPH_FILES)."""
    c = model.config
    model = model.cpu().eval()
    past = torch.zeros(c.layers, 3, c.d_model)
    codes = torch.zeros(2, c.levels, dtype=torch.int64)
    tokens = torch.zeros(4, 2, dtype=torch.int64)
    paths = {role: Path(directory) / name for role, name in GRAPH_FILES.items()}
    cache_axes = {"past_k": {1: "past"}, "past_v": {1: "past"}}
    new_axes = {"codes": {0: "new"}, "new_k": {1: "new"}, "new_v": {1: "new"}}
    with torch.no_grad():
        _export(_Encode(model), (codes,), paths["encode"], ENCODE_INPUTS, ENCODE_OUTPUTS, new_axes, opset)
        _export(
            _Extend(model),
            (past, past.clone(), codes),
            paths["extend"],
            EXTEND_INPUTS,
            EXTEND_OUTPUTS,
            {**cache_axes, **new_axes},
            opset,
        )
        _export(
            _Decode(model),
            (past, past.clone(), tokens),
            paths["decode"],
            DECODE_INPUTS,
            DECODE_OUTPUTS,
            {**cache_axes, "tokens": {0: "beams", 1: "steps"}, "logits": {0: "beams"}},
            opset,
        )
    return paths
