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
- Generative recommender variants: a build target (`gr-fp32`, `gr-int8`, `gr-fp16`) packaged
  against one catalog version is `{target}-c{catalog version}` (`gr-int8-c2`): the same model
  version rebuilt on a new catalog version is another variant, with its own Triton name, so a
  catalog can be rolled out like a model. Only gr-fp16 needs a GPU.
- Reserved model names: words a model may not be called because its page
  (`/models/{name}/`) would be another page's URL (`/models/new/` is the registration
  form). tests/registry/test_names.py checks every literal segment of the registry's
  URLs is here, so a new page cannot silently shadow a model.
- Taken names (models, pools, endpoints: one namespace each across teams): `name_conflict`
  is the one answer. A name held by a team the user can see says so ("already exists in
  team 'ads'"); a name held by any other team and a reserved word get the same 409
  `name_unavailable`, word for word, so a create never tells whether another team holds a
  name (no name oracle).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from registry.factory import CPU_VARIANTS, GR_CPU_TARGETS, GR_TARGETS, VARIANTS

if TYPE_CHECKING:
    from kernel.errors import Conflict
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
        return unavailable_message("model", name)
    return None


def unavailable_message(kind: str, name: str) -> str:
    """The one sentence for a name that cannot be had: a reserved word, or one a team the
    user is not in holds (which of the two is not said)."""
    return (
        f"name: {name!r} is not available for a {kind} (a reserved word of the site's addresses, or in use "
        f"by a team you are not in); choose another name, e.g. {name}-2."
    )


def name_conflict(*, user, kind: str, name: str, holder_team=None) -> Conflict:
    """The 409 for a create whose `name` is reserved (holder_team None) or held by
    `holder_team`: "already exists in team …" only when `user` may see that team (a member
    or staff), else the reserved word's answer (`name_unavailable`), the same bytes."""
    from kernel.errors import Conflict  # here: `python -m bench gpu` imports this module and no Django
    from registry.selectors.teams import user_role_in

    if holder_team is not None and user_role_in(user=user, team=holder_team) is not None:
        return Conflict(
            f"name: a {kind} named {name!r} already exists in team {holder_team.name!r}.",
            code="name_taken",
            field="name",
        )
    return Conflict(unavailable_message(kind, name), code="name_unavailable", field="name")


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
    and their tuned configs, the LLM ones and the CPU generative recommender ones)."""
    if is_gr_variant(variant):
        return gr_target(variant) not in GR_CPU_TARGETS
    return base_variant(variant) not in CPU_VARIANTS and variant not in LLM_VARIANTS


GR_CATALOG_RE = re.compile(r"^(?P<target>gr-[a-z0-9]+)-c(?P<catalog>[1-9][0-9]{0,8})$")


def gr_variant(target: str, catalog_version: int) -> str:
    """A GR build target packaged on catalog version N: gr-int8-c2."""
    return f"{target}-c{catalog_version}"


def is_gr_variant(variant: str) -> bool:
    match = GR_CATALOG_RE.match(variant or "")
    return bool(match) and match["target"] in GR_TARGETS


def gr_target(variant: str) -> str:
    """The build target of a GR variant (gr-int8 for gr-int8-c2); "" for another variant."""
    match = GR_CATALOG_RE.match(variant or "")
    return match["target"] if match and match["target"] in GR_TARGETS else ""


# --- version aliases and model URIs ------------------------------------------------------------
# An alias (MLflow's @champion): lower-case, bounded, and never something a version number or
# MLflow's own words could be read as ("latest", "3", "v3").
ALIAS_RE = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
RESERVED_ALIASES = frozenset({"latest"})
VERSION_ALIKE_RE = re.compile(r"^v\d+$")
MODEL_URI_MAX = 200
MODEL_NAME_PART = r"[a-z0-9][a-z0-9_-]{0,63}"
MODEL_URI_RE = re.compile(rf"^models:/(?P<model>{MODEL_NAME_PART})(?:@(?P<alias>[^/@]+)|/(?P<version>[0-9]{{1,9}}))$")


def alias_problem(name: str) -> str | None:
    """Why `name` cannot be an alias (a sentence starting with "alias:"), or None."""
    if not isinstance(name, str) or not ALIAS_RE.match(name):
        return (
            "alias: use 1-64 lower-case letters, digits, '-' or '_', starting with a letter (e.g. champion); "
            f"got {str(name)[:80]!r}."
        )
    if name in RESERVED_ALIASES or VERSION_ALIKE_RE.match(name):
        return f"alias: {name!r} reads as a version (MLflow reserves 'latest' and v<number>); choose another."
    return None


def parse_model_uri(uri: str) -> tuple[str, str | None, int | None]:
    """`models:/name@alias` -> (name, alias, None); `models:/name/3` -> (name, None, 3).
    Raises ValueError with a sentence naming what is wrong."""
    if not isinstance(uri, str) or not uri:
        raise ValueError("give a model URI: models:/<model>@<alias> or models:/<model>/<version>.")
    if len(uri) > MODEL_URI_MAX:
        raise ValueError(f"the model URI is {len(uri)} characters; at most {MODEL_URI_MAX}.")
    if not uri.startswith("models:/"):
        raise ValueError(f"{uri[:80]!r} is not a model URI: give models:/<model>@<alias> or models:/<model>/<version>.")
    match = MODEL_URI_RE.match(uri)
    if match is None:
        rest = uri[len("models:/") :]
        name = re.split(r"[@/]", rest, maxsplit=1)[0]
        if not re.fullmatch(MODEL_NAME_PART, name):
            raise ValueError(f"{uri[:80]!r}: {name[:70]!r} is not a model name (lower-case letters, digits, - and _).")
        raise ValueError(
            f"{uri[:80]!r}: after the model name give @<alias> or /<version number>, e.g. models:/{name}@champion."
        )
    if match["alias"] is not None:
        problem = alias_problem(match["alias"])
        if problem:
            raise ValueError(f"{uri[:80]!r}: {problem}")
        return match["model"], match["alias"], None
    if int(match["version"]) < 1:
        raise ValueError(f"{uri[:80]!r}: version numbers start at 1.")
    return match["model"], None, int(match["version"])
