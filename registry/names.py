"""The artifact naming contract, built here only and imported everywhere else.

- Triton model name, the directory a pool loads and the name Triton serves it under:
  `{model}__v{version}__{variant}` (e.g. `ctr__v3__onnx-int8`). The factory packages each
  variant under it; an Artifact row keeps it in `triton_model_name`.
- Variant name, what X-Model-Variant, metric labels and the canary judge call an artifact:
  `v{version}-{variant}` (e.g. `v3-onnx-int8`).
- Baseline: a rollout's fresh copy of the stable artifact, `{triton name}__baseline` in
  Triton and `{variant name}-baseline` in labels (Kayenta's fair baseline).
- TensorRT cache directory: where GPU variants' configs keep TensorRT engines and timing
  caches, and where the Kubernetes driver mounts a volume on GPU pools.
- Tuned variant: the tune stage's config of a variant, `{variant}-tuned` (`onnx-int8-tuned`):
  the same graph as its base variant with the config.pbtxt the search found. A hyphen, not
  a "+": Triton names, route tables and metric labels allow [A-Za-z0-9_.-] only.
- LLM variants: an LLM version's one artifact is `llm` (a Triton generate model made from
  its model directory, `{model}__v{version}__llm`) or `llm-backend` (a reference to an
  OpenAI-compatible server: nothing to load). Neither needs a GPU to be routed.
- Reserved model names: words a model may not be called because its page
  (`/models/{name}/`) would be another page's URL (`/models/new/` is the registration
  form). tests/registry/test_names.py checks every literal segment of the registry's
  URLs is here, so a new page cannot silently shadow a model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from registry.factory import CPU_VARIANTS, VARIANTS

if TYPE_CHECKING:
    from registry.models import Artifact

TENSORRT_CACHE_DIR = "/var/cache/modelplane/tensorrt"

# The registry's own URL words, plus the ones pages commonly grow into, so adding such a
# page later never strands a model that already has the name.
RESERVED_MODEL_NAMES = frozenset(
    {
        "new",
        "edit",
        "delete",
        "create",
        "builds",
        "versions",
        "artifacts",
        "runs",
        "compare",
        "search",
        "import",
        "export",
        "api",
        "admin",
        "static",
        "settings",
    }
)


def reserved_name_problem(name: str) -> str | None:
    """A human sentence saying why `name` cannot be a model's name, or None when it can."""
    if name in RESERVED_MODEL_NAMES:
        return (
            f"name: {name!r} is a reserved word (it is part of the site's addresses, e.g. /models/{name}/); "
            "choose another name, e.g. {name}-model."
        ).replace("{name}", name)
    return None


LLM_VARIANT = "llm"  # an LLM model directory packaged as a Triton generate model
LLM_BACKEND_VARIANT = "llm-backend"  # a reference to an OpenAI-compatible server
LLM_VARIANTS = (LLM_VARIANT, LLM_BACKEND_VARIANT)


def is_llm_variant(variant: str) -> bool:
    return variant in LLM_VARIANTS


BUILT_VARIANTS = VARIANTS  # what a build may target (registry/factory/__init__.py)
TUNED_SUFFIX = "-tuned"


def tuned_variant(base: str) -> str:
    return f"{base}{TUNED_SUFFIX}"


def base_variant(variant: str) -> str:
    """The variant whose graph a variant serves: `onnx-int8` for `onnx-int8-tuned`."""
    return variant[: -len(TUNED_SUFFIX)] if variant.endswith(TUNED_SUFFIX) else variant


def triton_model_name(model: str, version: int, variant: str) -> str:
    return f"{model}__v{version}__{variant}"


def triton_name(artifact: Artifact) -> str:
    """The Triton model name of a stored artifact (the one it was packaged under)."""
    return artifact.triton_model_name or triton_model_name(
        artifact.version.model.name, artifact.version.version, artifact.variant
    )


def variant_name(artifact: Artifact) -> str:
    """The name a variant has in X-Model-Variant, metric labels and the judge: v3-onnx-int8."""
    return f"v{artifact.version.version}-{artifact.variant}"


BASELINE_SUFFIX = "__baseline"


def baseline_triton_name(artifact: Artifact) -> str:
    """The Triton name a rollout's baseline (a fresh copy of the stable artifact, loaded
    under another name so it runs as its own model instance) is served under."""
    return f"{triton_name(artifact)}{BASELINE_SUFFIX}"


def baseline_variant_name(artifact: Artifact) -> str:
    """The baseline's variant name (X-Model-Variant, metric labels, the judge): v3-onnx-int8-baseline."""
    return f"{variant_name(artifact)}-baseline"


def needs_gpu(variant: str) -> bool:
    """Whether a replica needs a GPU to serve the variant (every variant but the CPU ones
    and their tuned configs)."""
    return base_variant(variant) not in CPU_VARIANTS and variant not in LLM_VARIANTS
