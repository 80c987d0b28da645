"""Plain factory functions for test data (each call makes fresh, uniquely named rows).

Rows are written directly, not through services: a test that needs "an endpoint" to
exercise something else does not re-test endpoint creation. Tests of a service call the
service itself."""

import itertools
import shutil

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from deployments.models import Endpoint, PoolReplica, PoolStatus, ReplicaStatus, Rollout, ServingPool
from deployments.rollout_machine import State
from harness.packaging import write_model_dir
from registry import storage
from registry.models import (
    Artifact,
    ArtifactStatus,
    Build,
    BuildStatus,
    ModelVersion,
    RegisteredModel,
    Role,
    TeamMembership,
    VersionSource,
)
from registry.names import triton_model_name

_seq = itertools.count(1)


def user(username: str | None = None, *, staff: bool = False, password: str = "pw-for-tests-only"):
    username = username or f"user{next(_seq)}"
    return get_user_model().objects.create_user(
        username=username, password=password, is_staff=staff, is_superuser=staff, email=f"{username}@example.test"
    )


def team(name: str | None = None) -> Group:
    return Group.objects.create(name=name or f"team{next(_seq)}")


def member(u, t: Group, role: str = Role.DEVELOPER) -> TeamMembership:
    u.groups.add(t)
    return TeamMembership.objects.create(user=u, team=t, role=role)


def registered_model(t: Group, name: str | None = None, **fields) -> RegisteredModel:
    return RegisteredModel.objects.create(name=name or f"model-{next(_seq)}", team=t, **fields)


def artifact(
    team, onnx_path, tmp_path, *, model_name="ctr", status=ArtifactStatus.SERVABLE, variant="onnx-fp32", broken=False
) -> Artifact:
    """An Artifact row over a packaged model directory stored like the factory stores it
    (registry.storage.put_dir: Artifact.path is the content-addressed directory)."""
    model = RegisteredModel.objects.filter(name=model_name).first() or registered_model(team, name=model_name)
    version = ModelVersion.objects.create(
        model=model,
        version=model.versions.count() + 1,
        source=VersionSource.UPLOAD,
        file_sha256="0" * 64,
        file_path="x.onnx",
    )
    build = Build.objects.create(version=version, targets=[variant], status=BuildStatus.SUCCEEDED)
    name = triton_model_name(model.name, version.version, variant)
    staged = write_model_dir(tmp_path / "staging", name, onnx_path, broken=broken)
    rel, sha = storage.put_dir(staged)
    shutil.rmtree(tmp_path / "staging", ignore_errors=True)
    return Artifact.objects.create(
        version=version, build=build, variant=variant, status=status, triton_model_name=name, path=rel, sha256=sha
    )


def pool(t: Group, name: str | None = None, *, ready_replicas: int = 0, **fields) -> ServingPool:
    """A local pool row (no processes: a driver is never asked) with `ready_replicas`
    READY replica rows r0, r1, … on HTTP ports 18000, 18001, … (gRPC 19000, 19001, …)"""
    fields.setdefault("replicas", max(ready_replicas, 1))
    fields.setdefault("status", PoolStatus.READY if ready_replicas else PoolStatus.PENDING)
    row = ServingPool.objects.create(name=name or f"pool-{next(_seq)}", team=t, **fields)
    for index in range(ready_replicas):
        replica(row, f"r{index}", http_url=f"http://127.0.0.1:{18000 + index}", grpc_url=f"127.0.0.1:{19000 + index}")
    return row


def replica(p: ServingPool, name: str = "r0", *, status: str = ReplicaStatus.READY, **fields) -> PoolReplica:
    return PoolReplica.objects.create(pool=p, name=name, status=status, **fields)


def endpoint(p: ServingPool, stable: Artifact | None = None, name: str | None = None, **fields) -> Endpoint:
    """An endpoint row of the pool's team (the stable is not loaded: no task runs)."""
    return Endpoint.objects.create(
        name=name or f"endpoint-{next(_seq)}", team=p.team, pool=p, stable_artifact=stable, **fields
    )


def rollout(e: Endpoint, candidate: Artifact, *, state: str = State.PENDING, **fields) -> Rollout:
    """A rollout row of `candidate` against the endpoint's stable, in `state`."""
    return Rollout.objects.create(
        endpoint=e, candidate_artifact=candidate, baseline_artifact=e.stable_artifact, state=state, **fields
    )


def llm_artifact(
    team,
    *,
    model_name: str = "chat",
    kind: str = "triton",
    context_length: int = 2048,
    base_url: str = "http://127.0.0.1:18900/v1",
    upstream_model: str = "upstream-chat",
    secret=None,
    cost_per_1k_prompt: float = 0.0,
    cost_per_1k_completion: float = 0.0,
) -> Artifact:
    """An LLM version's artifact row: kind "triton" (variant llm: a stored directory with a
    decoupled python-backend config.pbtxt, enough for a pool load request; no model code)
    or "openai" (variant llm-backend, a reference to `base_url`), with its LLMSpec.
    Registration itself is tested through registry.services.llm."""
    from registry.models import Framework, LLMKind, LLMSpec, Task, VersionStatus
    from registry.names import LLM_BACKEND_VARIANT, LLM_VARIANT

    model = RegisteredModel.objects.filter(name=model_name).first() or registered_model(
        team, name=model_name, task=Task.LLM
    )
    openai = kind == "openai"
    version = ModelVersion.objects.create(
        model=model,
        version=model.versions.count() + 1,
        source=VersionSource.LLM_BACKEND if openai else VersionSource.LLM_DIR,
        source_uri=base_url if openai else "",
        file_sha256="" if openai else "0" * 64,
        framework=Framework.OPENAI if openai else Framework.TRANSFORMERS,
        status=VersionStatus.READY,
    )
    LLMSpec.objects.create(
        version=version,
        kind=LLMKind.OPENAI if openai else LLMKind.DIR,
        context_length=context_length,
        base_url=base_url if openai else "",
        upstream_model=upstream_model if openai else "",
        secret=secret,
        cost_per_1k_prompt=cost_per_1k_prompt,
        cost_per_1k_completion=cost_per_1k_completion,
    )
    variant = LLM_BACKEND_VARIANT if openai else LLM_VARIANT
    build = Build.objects.create(version=version, targets=[variant], status=BuildStatus.SUCCEEDED)
    name = "" if openai else triton_model_name(model.name, version.version, variant)
    rel = sha = ""
    if not openai:
        import tempfile
        from pathlib import Path

        staged = Path(tempfile.mkdtemp(dir=storage.tmp_dir())) / name
        staged.mkdir()
        (staged / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
            "model_transaction_policy { decoupled: true }\n"
            'input [{ name: "text_input" data_type: TYPE_STRING dims: [1] }]\n'
            'output [{ name: "text_output" data_type: TYPE_STRING dims: [1] }]\n'
        )
        rel, sha = storage.put_dir(staged)
    return Artifact.objects.create(
        version=version,
        build=build,
        variant=variant,
        status=ArtifactStatus.SERVABLE,
        triton_model_name=name,
        path=rel,
        sha256=sha,
    )


def pool_model_ready(p: ServingPool, artifact: Artifact):
    """A PoolModel row: `artifact` READY on every replica of `p` (no Triton is asked)."""
    from deployments.models import PoolModel, PoolModelState
    from registry.names import triton_name

    return PoolModel.objects.create(
        pool=p,
        artifact=artifact,
        triton_model_name=triton_name(artifact),
        state=PoolModelState.READY,
        replica_ready={r.name: True for r in PoolReplica.objects.filter(pool=p)},
    )


def item_catalog_version(t: Group, name: str = "items", version: int = 1, *, levels: int = 3, codes: int = 8):
    """An item catalog (created when missing) and its version `version` as rows (no files)."""
    from registry.models import ItemCatalog, ItemCatalogVersion

    catalog = ItemCatalog.objects.filter(name=name).first() or ItemCatalog.objects.create(
        name=name, team=t, levels=levels, codes_per_level=codes
    )
    return ItemCatalogVersion.objects.create(
        catalog=catalog, version=version, path=f"dirs/00/{name}-{version}", sha256="0" * 64, items=10
    )


def gr_artifact(t: Group, catalog_version, *, model_name: str = "recs", version: int = 1, target: str = "gr-fp32"):
    """A generative recommender's artifact row serving `catalog_version` (its version and
    GRSpec made when missing), stored as a model directory with its config.pbtxt only (enough
    for an endpoint and a pool load request; no model code)."""
    import tempfile
    from pathlib import Path

    from google.protobuf import text_format

    from registry.gr.triton import SIGNATURE, gr_config
    from registry.models import GRSpec, Task
    from registry.names import gr_variant

    model = RegisteredModel.objects.filter(name=model_name).first() or registered_model(
        t, name=model_name, task=Task.GENERATIVE_REC
    )
    row = ModelVersion.objects.filter(model=model, version=version).first()
    if row is None:
        row = ModelVersion.objects.create(
            model=model,
            version=version,
            source=VersionSource.GR_BUNDLE,
            file_sha256="0" * 64,
            file_path="dirs/00/bundle",
            signature=SIGNATURE,
        )
        GRSpec.objects.create(
            version=row,
            catalog_version=catalog_version,
            levels=3,
            codes_per_level=8,
            layers=2,
            d_model=32,
            max_history=24,
            codebook_sha256="0" * 64,
        )
    variant = gr_variant(target, catalog_version.version)
    name = triton_model_name(model.name, version, variant)
    staged = Path(tempfile.mkdtemp(dir=storage.tmp_dir())) / name
    (staged / "1").mkdir(parents=True)
    (staged / "config.pbtxt").write_text(text_format.MessageToString(gr_config(name)))
    rel, sha = storage.put_dir(staged)
    build = Build.objects.create(
        version=row, targets=[target], status=BuildStatus.SUCCEEDED, item_catalog_version=catalog_version
    )
    return Artifact.objects.create(
        version=row,
        build=build,
        variant=variant,
        status=ArtifactStatus.SERVABLE,
        triton_model_name=name,
        path=rel,
        sha256=sha,
        item_catalog_version=catalog_version,
    )
