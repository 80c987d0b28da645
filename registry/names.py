"""The artifact naming contract, built here only and imported everywhere else.

- Triton model name, the directory a pool loads and the name Triton serves it under:
  `{model}__v{version}__{variant}` (e.g. `ctr__v3__onnx-int8`). The factory packages each
  variant under it; an Artifact row keeps it in `triton_model_name`.
- Variant name, what X-Model-Variant, metric labels and the canary judge call an artifact:
  `v{version}-{variant}` (e.g. `v3-onnx-int8`).
- TensorRT cache directory: where GPU variants' configs keep TensorRT engines and timing
  caches, and where the Kubernetes driver mounts a volume on GPU pools.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from registry.factory import CPU_VARIANTS

if TYPE_CHECKING:
    from registry.models import Artifact

TENSORRT_CACHE_DIR = "/var/cache/modelplane/tensorrt"


def triton_model_name(model: str, version: int, variant: str) -> str:
    return f"{model}__v{version}__{variant}"


def triton_name(artifact: Artifact) -> str:
    """The Triton model name of a stored artifact (the one it was packaged under)."""
    return artifact.triton_model_name or triton_model_name(artifact.version.model.name, artifact.version.version, artifact.variant)


def variant_name(artifact: Artifact) -> str:
    """The name a variant has in X-Model-Variant, metric labels and the judge: v3-onnx-int8."""
    return f"v{artifact.version.version}-{artifact.variant}"


def needs_gpu(variant: str) -> bool:
    """Whether a replica needs a GPU to serve the variant (every variant but the CPU ones)."""
    return variant not in CPU_VARIANTS
