"""Export the reference model to ONNX the way the factory's benchmarks do (dynamic batch,
inputs `dense`/`sparse`, output `ctr`). No Django: `python -m bench gpu --reference`
uses it on a GPU host."""

from __future__ import annotations

from pathlib import Path

from experiments.reference.data import N_DENSE, N_SPARSE


def export_onnx(model, path: Path, *, opset: int = 17) -> str:
    """Write `model` (moved to the CPU for the export) to `path`; returns which exporter
    wrote it. The TorchScript exporter first (what the factory uses); torch's dynamo
    exporter where a newer torch no longer has it."""
    import torch

    model = model.cpu().eval()
    example = (torch.randn(4, N_DENSE), torch.randint(0, 1 << 40, (4, N_SPARSE)))
    kwargs = dict(
        input_names=["dense", "sparse"],
        output_names=["ctr"],
        dynamic_axes={n: {0: "batch"} for n in ("dense", "sparse", "ctr")},
        opset_version=opset,
    )
    try:
        torch.onnx.export(model, example, str(path), dynamo=False, **kwargs)
        return "torchscript"
    except Exception as first:  # torch versions that dropped the TorchScript exporter raise here
        try:
            torch.onnx.export(model, example, str(path), dynamo=True, **kwargs)
        except Exception as exc:
            raise RuntimeError(
                f"torch.onnx.export failed: TorchScript exporter: {first}; dynamo exporter: {exc}"
            ) from exc
        return "dynamo"
