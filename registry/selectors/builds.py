"""Reads of the artifact factory shared by the API and the dashboard (team-scoped)."""

from django.db.models import QuerySet

from kernel.errors import NotFound
from registry.factory import conf
from registry.models import Artifact, ArtifactStatus, Build, ModelVersion
from registry.selectors.teams import team_scoped

LOG_TAIL_LINES = 40


def build_list(*, user, version: ModelVersion | None = None) -> QuerySet:
    qs = team_scoped(Build.objects.select_related("version", "version__model"), user, "version__model__team_id")
    if version is not None:
        qs = qs.filter(version=version)
    return qs


def build_get(*, user, build_id: int) -> Build:
    build = build_list(user=user).select_related("version__model__team", "created_by").filter(pk=build_id).first()
    if build is None:
        raise NotFound(f"No build with id {build_id}.", code="build_not_found")
    return build


def build_log_tail(build: Build, lines: int = LOG_TAIL_LINES) -> str:
    text = "".join(f"[{s['name']}]\n{s['log']}" for s in build.stages or [] if s.get("log"))
    return "\n".join(text.splitlines()[-lines:])


def artifact_list(*, user, version: ModelVersion | None = None, build: Build | None = None) -> QuerySet:
    qs = team_scoped(
        Artifact.objects.select_related("version__model", "build", "item_catalog_version__catalog"),
        user,
        "version__model__team_id",
    )

    if version is not None:
        qs = qs.filter(version=version)
    if build is not None:
        qs = qs.filter(build=build)
    return qs.order_by("-build_id", "variant")


def build_artifacts(build: Build) -> list[Artifact]:
    """A build's artifacts (not user-scoped: for services acting for the platform, e.g. a
    release moving from its build to its canary)."""
    return list(Artifact.objects.filter(build=build).select_related("version__model", "build").order_by("variant"))


def artifact_get(*, user, artifact_id: int) -> Artifact:
    artifact = artifact_list(user=user).filter(pk=artifact_id).first()
    if artifact is None:
        raise NotFound(f"No artifact with id {artifact_id}.", code="artifact_not_found")
    return artifact


def servable_artifacts(*, user, team_id: int | None = None) -> QuerySet:
    """Servable artifacts the user may see (of one team when given), newest first: what a
    pool may load or an endpoint may roll out."""
    qs = artifact_list(user=user).filter(status=ArtifactStatus.SERVABLE)
    if team_id is not None:
        qs = qs.filter(version__model__team_id=team_id)
    return qs.order_by("-created_at")


def latest_artifacts(*, user, version: ModelVersion) -> list[Artifact]:
    """The artifacts of the version's most recent build that produced any."""
    artifacts = list(artifact_list(user=user, version=version))
    if not artifacts:
        return []
    latest = artifacts[0].build_id
    return [a for a in artifacts if a.build_id == latest]


def latency_series(artifacts) -> dict:
    """Chart data: p50 latency (ms) by batch size per benchmarked variant (+ PyTorch eager)."""
    batches = (
        sorted({int(b) for a in artifacts for b in (a.benchmark or {}).get("batches", {})}) or conf.bench_batches()
    )
    series = []
    eager = None
    for artifact in artifacts:
        per_batch = (artifact.benchmark or {}).get("batches")
        if not per_batch:
            continue
        series.append(
            {
                "label": artifact.variant,
                "p50_ms": [per_batch.get(str(b), {}).get("p50_ms") for b in batches],
                "p99_ms": [per_batch.get(str(b), {}).get("p99_ms") for b in batches],
            }
        )
        eager = eager or artifact.benchmark.get("eager")
    if eager:
        series.append(
            {
                "label": "pytorch-eager",
                "p50_ms": [eager.get(str(b), {}).get("p50_ms") for b in batches],
                "p99_ms": [eager.get(str(b), {}).get("p99_ms") for b in batches],
            }
        )
    return {"batch_sizes": batches, "series": series}


def beam_gates(artifacts) -> list[dict]:
    """A generative recommender build's gate table: per variant its gates (figure, threshold,
    passed, reason), status and reason; [] for other builds (registry/factory/generative/gates.py)."""
    rows = []
    for artifact in artifacts:
        validation = artifact.validation or {}
        if validation.get("gates"):
            rows.append(
                {
                    "variant": artifact.variant,
                    "status": artifact.status,
                    "reason": artifact.status_reason,
                    "gates": validation["gates"],
                    "figures": validation.get("figures", {}),
                    "catalog": validation.get("catalog", ""),
                }
            )
    return rows
