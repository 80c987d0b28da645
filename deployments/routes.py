"""The gateway's route table, derived from endpoints, rollouts and pool readiness.

The contract is gateway/route_table.schema.json (and gateway/README.md): per endpoint,
its variants with role and weight in basis points, the *ready* replica URLs of their
pool and the signature of the served artifact (what the gateway checks requests
against before they reach Triton). Nothing here is stored: the table is a pure function
of the database and the artifacts' files, and its `version` (and the HTTP ETag) is a
digest of its content.

Inference keys (gateway side of issue 10): until the control plane issues keys, every
endpoint is published with `auth: {"public": true}` explicitly; the gateway refuses
calls to an endpoint whose entry has no auth block.
"""

import hashlib
import json
import math

from django.utils import timezone

from config.errors import InvalidInput
from deployments import triton_config
from deployments.models import Endpoint, PoolModel, PoolModelState, PoolReplica, ReplicaStatus, Rollout
from deployments.rollout_machine import ACTIVE
from registry.models import Artifact

# Triton's TYPE_* (model_config.proto) and numpy dtype names (registry signatures) -> KServe v2 datatypes
_TRITON_DATATYPES = {"TYPE_BOOL": "BOOL", "TYPE_UINT8": "UINT8", "TYPE_UINT16": "UINT16", "TYPE_UINT32": "UINT32",
                     "TYPE_UINT64": "UINT64", "TYPE_INT8": "INT8", "TYPE_INT16": "INT16", "TYPE_INT32": "INT32",
                     "TYPE_INT64": "INT64", "TYPE_FP16": "FP16", "TYPE_FP32": "FP32", "TYPE_FP64": "FP64",
                     "TYPE_STRING": "BYTES", "TYPE_BF16": "BF16"}
_NUMPY_DATATYPES = {"bool": "BOOL", "uint8": "UINT8", "uint16": "UINT16", "uint32": "UINT32", "uint64": "UINT64",
                    "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64", "float16": "FP16",
                    "float32": "FP32", "float64": "FP64", "object": "BYTES", "str": "BYTES", "string": "BYTES"}


_CONFIG_SIGNATURES: dict[tuple, dict] = {}  # (artifact pk, sha256): artifacts are content-addressed, never edited


def _config_signature(artifact: Artifact) -> dict | None:
    """The signature Triton enforces, from the artifact's config.pbtxt. None when the
    files are not there or name a datatype the gateway does not know."""
    from deployments.services import artifact_model_dir  # deployments' own reader of artifact dirs

    key = (artifact.pk, artifact.sha256)
    if key in _CONFIG_SIGNATURES:
        return _CONFIG_SIGNATURES[key]
    try:
        config = triton_config.parse((artifact_model_dir(artifact) / "config.pbtxt").read_text())
    except (OSError, InvalidInput, triton_config.ConfigError):
        return None
    batch = [-1] if config.max_batch_size > 0 else []

    def tensors(items):
        out = []
        for t in items:
            datatype = _TRITON_DATATYPES.get(triton_config.mc.DataType.Name(t.data_type))
            if datatype is None:
                return None
            spec = {"name": t.name, "datatype": datatype, "shape": batch + [int(d) for d in t.dims]}
            if getattr(t, "optional", False):
                spec["optional"] = True
            out.append(spec)
        return out

    inputs, outputs = tensors(config.input), tensors(config.output)
    if not inputs or outputs is None:
        return None
    if len(_CONFIG_SIGNATURES) > 4096:
        _CONFIG_SIGNATURES.clear()
    signature = _CONFIG_SIGNATURES[key] = {"max_batch_size": int(config.max_batch_size), "inputs": inputs, "outputs": outputs}
    return signature


def _version_signature(artifact: Artifact) -> dict | None:
    """From the registry's signature of the version ({"inputs": [{"name", "dtype", "shape"}]}),
    when the artifact's config cannot be read: shapes as stored, no batch limit."""
    raw = artifact.version.signature or {}

    def tensors(items):
        out = []
        for t in items or ():
            datatype = _NUMPY_DATATYPES.get(str(t.get("dtype", "")).lower())
            shape = t.get("shape")
            if datatype is None or not t.get("name") or not isinstance(shape, list):
                return None
            out.append({"name": t["name"], "datatype": datatype, "shape": [int(d) if d and d > 0 else -1 for d in shape]})
        return out

    inputs = tensors(raw.get("inputs"))
    if not inputs:
        return None
    outputs = tensors(raw.get("outputs"))
    return {"max_batch_size": 0, "inputs": inputs, **({"outputs": outputs} if outputs else {})}


def variant_signature(artifact: Artifact) -> dict | None:
    """What the gateway checks requests against for this artifact (None: only the shape/data checks)."""
    if artifact.path:
        signature = _config_signature(artifact)
        if signature is not None:
            return signature
    return _version_signature(artifact)


def variant_name(artifact: Artifact) -> str:
    """The name a variant has in X-Model-Variant, metric labels and the judge: v3-onnx-int8."""
    return f"v{artifact.version.version}-{artifact.variant}"


def triton_name(artifact: Artifact) -> str:
    return artifact.triton_model_name or f"{artifact.version.model.name}__v{artifact.version.version}__{artifact.variant}"


def _ready_urls(pool_id: int, model_name: str, ready_models: dict, replicas: dict) -> list[str]:
    pool_model = ready_models.get((pool_id, model_name))
    if pool_model is None:
        return []
    return sorted(
        replica.http_url.rstrip("/") for replica in replicas.get(pool_id, [])
        if replica.http_url and pool_model.replica_ready.get(replica.name)
    )


def _variant(artifact, role, weight_bp, urls) -> dict:
    out = {
        "name": variant_name(artifact), "model_version": str(artifact.version.version), "triton_model": triton_name(artifact),
        "role": role, "weight_bp": int(weight_bp), "replicas": urls,
    }
    signature = variant_signature(artifact)
    if signature is not None:
        out["signature"] = signature
    return out


def route_table() -> dict:
    """Every endpoint that has a stable artifact, with its current split."""
    endpoints = list(
        Endpoint.objects.filter(stable_artifact__isnull=False)
        .select_related("stable_artifact__version__model").order_by("name")
    )
    rollouts = {
        r.endpoint_id: r for r in Rollout.objects.filter(endpoint__in=endpoints, state__in=[s.value for s in ACTIVE])
        .select_related("candidate_artifact__version__model", "baseline_artifact__version__model")
    }
    pool_ids = {e.pool_id for e in endpoints}
    ready_models = {
        (pm.pool_id, pm.triton_model_name): pm
        for pm in PoolModel.objects.filter(pool_id__in=pool_ids, state=PoolModelState.READY)
    }
    replicas: dict[int, list] = {}
    for replica in PoolReplica.objects.filter(pool_id__in=pool_ids, status=ReplicaStatus.READY).order_by("name"):
        replicas.setdefault(replica.pool_id, []).append(replica)

    table = []
    for endpoint in endpoints:
        stable = endpoint.stable_artifact
        stable_urls = _ready_urls(endpoint.pool_id, triton_name(stable), ready_models, replicas)
        rollout = rollouts.get(endpoint.pk)
        entry = {
            "name": endpoint.name, "sticky_header": endpoint.sticky_header, "timeout_ms": endpoint.timeout_ms,
            # a client deadline below the endpoint's p99 SLO that expires is the client's doing
            "min_timeout_ms": max(1, min(endpoint.timeout_ms, math.ceil(endpoint.slo_p99_ms))),
            "salt": rollout.salt if rollout else "", "shadow_sample_rate": 0.0,
            "auth": {"public": True},  # until the control plane issues inference keys
        }
        variants = []
        split = rollout.split if rollout else None
        candidate = rollout.candidate_artifact if rollout else None
        if split and split.candidate_role and candidate.pk != stable.pk:
            candidate_urls = _ready_urls(endpoint.pool_id, triton_name(candidate), ready_models, replicas)
            variants.append(_variant(stable, "stable", split.stable_bp, stable_urls))
            if split.candidate_role == "shadow":
                entry["shadow_sample_rate"] = rollout.shadow_sample_rate
                variants.append(_variant(candidate, "shadow", 0, candidate_urls))
            else:
                variants.append(_variant(candidate, "canary", split.candidate_bp, candidate_urls))
        else:
            variants.append(_variant(stable, "stable", 10_000, stable_urls))
        entry["variants"] = variants
        table.append(entry)
    body = {"endpoints": table}
    version = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:20]
    return {"version": version, "generated_at": timezone.now().strftime("%Y-%m-%dT%H:%M:%SZ"), **body}
