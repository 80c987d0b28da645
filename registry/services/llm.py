"""Writes of LLM versions and the provider secrets they name.

An LLM version (of a model whose task is `llm`) is either
(a) an uploaded model directory (registry/llm_archive.py checks it: safetensors only, no
    path leaving it), stored content-addressed as the version's file; or
(b) a reference to an OpenAI-compatible backend: base URL, upstream model id, optionally
    one of the team's provider secrets as its bearer key, and its prices per 1k tokens.
Both record the tokenizer and context length (LLMSpec).

Each LLM version gets its one Artifact at registration, so endpoints, rollouts and
experiments (which point at artifacts) take it unchanged: no factory build runs (an LLM
needs no ONNX conversion, quantisation or benchmark), a Build row records the one
`package` stage that ran inline. Kind (a): variant `llm`, the Triton generate model
directory made by `registry.llm.triton.write_llm_model` from the model directory (a pool
loads it like any artifact); kind (b): variant `llm-backend`, no files (nothing to load).

Provider secrets: Fernet-encrypted at rest (registry/secret_box.py); `secret_create`
returns the value once, nothing else ever does. A secret is bound, when an admin stores it,
to the origins it may be sent to; a backend reference at another origin may not name it
(so a deployer cannot have the team's key sent to a listener of their own).

Tenant URLs (a backend's base URL, a secret's origins) pass the one outbound guard
(kernel/outbound.py) when registered: internal addresses, the platform's own listeners,
credentials, a query or a fragment are a 400 naming the rule (code `url_<rule>`).

Why this is one long module: both kinds of LLM version share the model, cost and
context checks and the inline artifact, and the secrets are what kind (b) names.
"""

from __future__ import annotations

import math
import re
import tempfile
import time
import urllib.parse
from pathlib import Path

from django.db import transaction
from django.utils import timezone

from kernel.errors import Conflict, InvalidInput, NotFound, TooLarge
from kernel.outbound import OutboundRefused, Unresolvable, origin_of, origin_refusal, vet_url
from registry import conf as registry_conf
from registry import llm_archive, names, secret_box, storage
from registry.factory import StageStatus
from registry.lock_objects import model_for_update
from registry.models import (
    MAX_CONTEXT_LENGTH,
    Artifact,
    ArtifactStatus,
    Build,
    BuildStatus,
    EventAction,
    Framework,
    LLMKind,
    LLMSpec,
    ModelVersion,
    ProviderSecret,
    RegisteredModel,
    Role,
    Task,
    VersionSource,
    VersionStatus,
)
from registry.services.catalog import _next_version
from registry.services.events import event_record
from registry.services.teams import require_role

SECRET_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
SECRET_VALUE_RE = re.compile(r"^[\x21-\x7e]{1,4096}$")  # the route table schema's secret value
UPSTREAM_MODEL_RE = re.compile(r"^[\x21-\x7e]{1,256}$")
URL_RE = re.compile(r"^https?://[^\s/]+(/[^\s]*)?$")
MAX_SECRET_ORIGINS = 8
MAX_COST = 1_000_000
MAX_TOKENIZER_NAME = 200
DEFAULT_BACKEND_CONTEXT = 4096
MAX_DELAY_MS = 10_000


# --- provider secrets ----------------------------------------------------------------------
def _vetted(url: str, field: str) -> None:
    """The outbound guard's verdict on a tenant URL as a 400 naming the rule (a host that does
    not resolve yet passes: the gateway vets every connection again)."""
    try:
        vet_url(url, fixed=True)
    except Unresolvable:
        pass
    except OutboundRefused as exc:
        raise InvalidInput(f"{field}: {exc}", code=f"url_{exc.rule}", field=field) from None


def _origins(values) -> list[str]:
    if isinstance(values, str):
        values = values.replace(",", " ").split()
    if not isinstance(values, list | tuple) or not 1 <= len(values) <= MAX_SECRET_ORIGINS:
        raise InvalidInput(
            f"origins: give 1..{MAX_SECRET_ORIGINS} origins the value may be sent to, e.g. https://api.openai.com.",
            code="bad_origins",
            field="origins",
        )
    origins = []
    for value in values:
        text = str(value).strip().rstrip("/")
        refusal = origin_refusal(text)
        if refusal is not None:
            raise InvalidInput(f"origins: {text[:200]!r}: {refusal}.", code=f"url_{refusal.rule}", field="origins")
        _vetted(text, "origins")
        origins.append(origin_of(text))
    return sorted(set(origins))


def secret_create(*, user, team, name: str, value: str, origins) -> ProviderSecret:
    """Store `value` encrypted under `name` in `team` (admins), bound to `origins` (where
    backends naming it may be: each passes the outbound guard). The caller shows `value`
    to the user this once; it is never returned again."""
    require_role(user=user, team=team, role=Role.ADMIN)
    bound = _origins(origins)
    if not SECRET_NAME_RE.match(name or ""):
        raise InvalidInput(
            "name: use 1-64 lower-case letters, digits, '-' or '_', starting with a letter or digit.", field="name"
        )
    if not isinstance(value, str) or not SECRET_VALUE_RE.match(value):
        raise InvalidInput(
            "value: give 1-4096 printable ASCII characters without spaces (the provider's API key).",
            code="bad_secret_value",
            field="value",
        )
    with transaction.atomic():
        if ProviderSecret.objects.filter(team=team, name=name).exists():
            raise Conflict(f"name: team {team.name!r} has a secret named {name!r}.", code="name_taken", field="name")
        secret = ProviderSecret.objects.create(
            team=team,
            name=name,
            ciphertext=secret_box.seal(value),
            origins=bound,
            last4=value[-4:] if len(value) >= 12 else "",  # a short value shows nothing of itself
            created_by=user,
        )
        event_record(
            actor=user, obj=secret, team=team, action=EventAction.CREATED, data={"name": name, "origins": bound}
        )
    return secret


def secret_delete(*, user, secret: ProviderSecret) -> None:
    """Delete a secret no LLM version names (409 otherwise)."""
    require_role(user=user, team=secret.team, role=Role.ADMIN)
    with transaction.atomic():
        users = list(LLMSpec.objects.filter(secret=secret).select_related("version__model")[:5])
        if users:
            named = ", ".join(str(spec.version) for spec in users)
            raise Conflict(f"Secret {secret.name!r} is named by LLM version(s) {named}.", code="secret_in_use")
        event_record(actor=user, obj=secret, team=secret.team, action=EventAction.DELETED, data={"name": secret.name})
        secret.delete()


def _team_secret(team, name: str | None) -> ProviderSecret | None:
    """The team's secret called `name`; another team's and an unknown one are the same 404."""
    if not name:
        return None
    secret = ProviderSecret.objects.filter(team=team, name=name).first()
    if secret is None:
        raise NotFound(
            f"secret: team {team.name!r} has no secret named {name!r}.", code="secret_not_found", field="secret"
        )
    return secret


# --- checks ---------------------------------------------------------------------------------
def _require_llm_model(user, model: RegisteredModel) -> None:
    require_role(user=user, team=model.team, role=Role.DEVELOPER)
    if model.task != Task.LLM:
        raise InvalidInput(
            f"model: {model.name!r} has task {model.task!r}; LLM versions go to a model whose task is 'llm'.",
            code="model_not_llm",
            field="model",
        )


def _context_length(value, *, limit: int | None) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidInput("context_length: give a whole number of tokens.", field="context_length")
    try:
        number = int(value)
    except ValueError:
        raise InvalidInput("context_length: give a whole number of tokens.", field="context_length") from None
    if not 1 <= number <= MAX_CONTEXT_LENGTH:
        raise InvalidInput(
            f"context_length: {number} is out of range; give 1..{MAX_CONTEXT_LENGTH}.",
            code="bad_context_length",
            field="context_length",
        )
    if limit is not None and number > limit:
        raise InvalidInput(
            f"context_length: {number} is more than the model's own limit, {limit} (config.json's position embeddings).",
            code="bad_context_length",
            field="context_length",
        )
    return number


def _cost(value, field: str) -> float:
    try:
        cost = float(value or 0)
    except (TypeError, ValueError):
        raise InvalidInput(f"{field}: give a price per 1,000 tokens (a number).", field=field) from None
    if not math.isfinite(cost) or not 0 <= cost <= MAX_COST:
        raise InvalidInput(f"{field}: give 0..{MAX_COST}.", field=field)
    return cost


def _base_url(value: str) -> str:
    """The backend's base URL, fixed here: the gateway appends its route to this path and
    sends nothing else (no query, fragment or credentials), to an address the guard allows."""
    url = (value or "").strip().rstrip("/")
    parsed = urllib.parse.urlsplit(url) if URL_RE.match(url) and len(url) <= 2000 else None
    if parsed is None or not parsed.hostname:
        raise InvalidInput(
            "base_url: give the server's http(s) base URL, e.g. https://llm.example.com/v1.",
            code="bad_base_url",
            field="base_url",
        )
    _vetted(url, "base_url")
    return url


def _secret_may_go_to(secret: ProviderSecret | None, url: str) -> None:
    if secret is None:
        return
    origin = origin_of(url)
    if origin not in (secret.origins or []):
        bound = ", ".join(secret.origins or []) or "no origin"
        raise InvalidInput(
            f"secret: {secret.name!r} may be sent only to {bound}, not to {origin} (a team admin binds a secret "
            "to its origins when storing it).",
            code="secret_origin_mismatch",
            field="secret",
        )


def _delay(value, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_DELAY_MS:
        raise InvalidInput(f"{field}: give 0..{MAX_DELAY_MS} milliseconds.", field=field)
    return value


def _tokenizer_name(value) -> str:
    name = str(value or "").strip()
    if len(name) > MAX_TOKENIZER_NAME or any(ord(c) < 32 for c in name):
        raise InvalidInput(f"tokenizer: give a name of at most {MAX_TOKENIZER_NAME} characters.", field="tokenizer")
    return name


# --- the version's one artifact ---------------------------------------------------------------
def _package_triton(hf_root: Path, triton_name: str, delays: dict) -> tuple[str, str, int]:
    """Write the Triton generate model for `hf_root` (llm-model's writer) and store it:
    (rel path, sha256, size)."""
    from registry.llm.triton import write_llm_model

    staging = Path(tempfile.mkdtemp(dir=storage.tmp_dir(), prefix="llm-triton-"))
    try:
        write_llm_model(staging, triton_name, hf_root, **delays)
        model_dir = staging / triton_name
        size = sum(p.stat().st_size for p in model_dir.rglob("*") if p.is_file())
        rel, sha = storage.put_dir(model_dir)
    finally:
        llm_archive.remove(staging)
    return rel, sha, size


def _artifact(*, user, version: ModelVersion, variant: str, path: str, sha: str, size: int, log: str, seconds: float):
    now = timezone.now()
    build = Build.objects.create(
        version=version,
        targets=[variant],
        status=BuildStatus.SUCCEEDED,
        progress=100,
        stages=[
            {
                "name": "package",
                "status": str(StageStatus.SUCCEEDED),
                "started_at": now.isoformat(),
                "duration_s": round(seconds, 3),
                "log": log,
            }
        ],
        attempt=1,
        created_by=user,
        started_at=now,
        finished_at=now,
    )
    return Artifact.objects.create(
        version=version,
        build=build,
        variant=variant,
        status=ArtifactStatus.SERVABLE,
        triton_model_name=names.triton_model_name(version.model.name, version.version, variant) if path else "",
        path=path,
        sha256=sha,
        size_bytes=size,
    )


# --- versions ----------------------------------------------------------------------------------
def llm_version_create_from_archive(
    *,
    user,
    model: RegisteredModel,
    filename: str,
    chunks,
    size: int | None = None,
    context_length=None,
    cost_per_1k_prompt=0,
    cost_per_1k_completion=0,
    delay_first_token_ms=0,
    delay_per_token_ms=0,
    metrics: dict | None = None,
    tags: dict | None = None,
) -> ModelVersion:
    """Register an uploaded model directory (kind a) as the next version of `model`, with
    its `llm` artifact. Nothing is stored when anything in it is refused. The delays make
    its Triton model deliberately slower (a canary that should be rolled back, a demo)."""
    _require_llm_model(user, model)
    delays = {
        "delay_first_token_ms": _delay(delay_first_token_ms, "delay_first_token_ms"),
        "delay_per_token_ms": _delay(delay_per_token_ms, "delay_per_token_ms"),
    }
    limit = int(registry_conf.get("LLM_MAX_ARCHIVE_MB")) * 1024 * 1024
    if size is not None and size > limit:
        raise TooLarge(
            f"archive: {size} bytes is over the {limit >> 20} MB limit (LLM_MAX_ARCHIVE_MB).", field="archive"
        )
    costs = _cost(cost_per_1k_prompt, "cost_per_1k_prompt"), _cost(cost_per_1k_completion, "cost_per_1k_completion")
    _context_length(context_length, limit=None)  # a bad value is refused before the upload is unpacked
    try:
        tmp_archive, _, _ = storage.stream_to_tmp(chunks, limit_bytes=limit)
    except OverflowError:
        raise TooLarge(f"archive: over the {limit >> 20} MB limit (LLM_MAX_ARCHIVE_MB).", field="archive") from None
    unpacked = Path(tempfile.mkdtemp(dir=storage.tmp_dir(), prefix="llm-dir-"))
    stored: list[str] = []
    try:
        started = time.monotonic()
        found = llm_archive.unpack(tmp_archive, filename, unpacked)
        context = _context_length(context_length, limit=found.context_length) or found.context_length
        if context is None:
            raise InvalidInput(
                "context_length: config.json does not say the model's context length; give context_length.",
                field="context_length",
            )
        hf_rel, hf_sha = storage.put_dir(found.root)
        stored.append(hf_rel)
        with transaction.atomic():
            locked = model_for_update(model.pk)
            number = _next_version(locked)
            triton_dir = _package_triton(
                storage.absolute(hf_rel), names.triton_model_name(locked.name, number, names.LLM_VARIANT), delays
            )
            stored.append(triton_dir[0])
            version = ModelVersion.objects.create(
                model=locked,
                version=number,
                source=VersionSource.LLM_DIR,
                framework=Framework.TRANSFORMERS,
                file_path=hf_rel,
                file_sha256=hf_sha,
                file_size=found.size,
                original_filename=filename[:255],
                status=VersionStatus.READY,  # its servable artifact is made with it
                metrics=metrics or {},
                tags=tags or {},
                created_by=user,
            )
            LLMSpec.objects.create(
                version=version,
                kind=LLMKind.DIR,
                context_length=context,
                tokenizer=found.tokenizer,
                cost_per_1k_prompt=costs[0],
                cost_per_1k_completion=costs[1],
            )
            artifact = _artifact(
                user=user,
                version=version,
                variant=names.LLM_VARIANT,
                path=triton_dir[0],
                sha=triton_dir[1],
                size=triton_dir[2],
                log=f"{len(found.files)} files, {found.size} bytes; Triton generate model {names.LLM_VARIANT}",
                seconds=time.monotonic() - started,
            )
            event_record(
                actor=user,
                obj=version,
                team=locked.team,
                action=EventAction.CREATED,
                to_state=version.status,
                data={"source": "llm_dir", "sha256": hf_sha, "size": found.size, "artifact": artifact.pk, **delays},
            )
        return version
    except BaseException:
        for rel in stored:
            referenced = (
                ModelVersion.objects.filter(file_path=rel).exists() or Artifact.objects.filter(path=rel).exists()
            )
            storage.delete_if_unreferenced(rel, referenced)
        raise
    finally:
        tmp_archive.unlink(missing_ok=True)
        llm_archive.remove(unpacked)


def llm_version_create_backend(
    *,
    user,
    model: RegisteredModel,
    base_url: str,
    upstream_model: str,
    secret: str | None = None,
    context_length=None,
    tokenizer: str = "",
    cost_per_1k_prompt=0,
    cost_per_1k_completion=0,
    metrics: dict | None = None,
    tags: dict | None = None,
) -> ModelVersion:
    """Register a backend reference (kind b): an OpenAI-compatible server or an external
    provider, with the team's secret `secret` (by name) as its key."""
    _require_llm_model(user, model)
    url = _base_url(base_url)
    if not isinstance(upstream_model, str) or not UPSTREAM_MODEL_RE.match(upstream_model):
        raise InvalidInput(
            "upstream_model: give the model id the server serves (1-256 printable characters, no spaces).",
            field="upstream_model",
        )
    context = _context_length(context_length, limit=None) or DEFAULT_BACKEND_CONTEXT
    costs = _cost(cost_per_1k_prompt, "cost_per_1k_prompt"), _cost(cost_per_1k_completion, "cost_per_1k_completion")
    tokenizer_name = _tokenizer_name(tokenizer)
    provider_secret = _team_secret(model.team, secret)
    _secret_may_go_to(provider_secret, url)
    with transaction.atomic():
        locked = model_for_update(model.pk)
        version = ModelVersion.objects.create(
            model=locked,
            version=_next_version(locked),
            source=VersionSource.LLM_BACKEND,
            source_uri=url,
            framework=Framework.OPENAI,
            status=VersionStatus.READY,
            metrics=metrics or {},
            tags=tags or {},
            created_by=user,
        )
        LLMSpec.objects.create(
            version=version,
            kind=LLMKind.OPENAI,
            context_length=context,
            tokenizer={"name": tokenizer_name} if tokenizer_name else {},
            base_url=url,
            upstream_model=upstream_model,
            secret=provider_secret,
            cost_per_1k_prompt=costs[0],
            cost_per_1k_completion=costs[1],
        )
        artifact = _artifact(
            user=user,
            version=version,
            variant=names.LLM_BACKEND_VARIANT,
            path="",
            sha="",
            size=0,
            log=f"backend {url} model {upstream_model}",
            seconds=0.0,
        )
        event_record(
            actor=user,
            obj=version,
            team=locked.team,
            action=EventAction.CREATED,
            to_state=version.status,
            data={
                "source": "llm_backend",
                "base_url": url,
                "upstream_model": upstream_model,
                "secret": provider_secret.name if provider_secret else None,
                "artifact": artifact.pk,
            },
        )
    return version
