"""REST API of the artifact factory: builds (start, read, cancel) and artifacts (list,
read, download). Thin: validate, call a service or selector, serialize."""

import tarfile
import tempfile

from django.http import FileResponse
from django.urls import include, path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter

from kernel.serializers import StrictCharField, StrictModelSerializer
from kernel.viewsets import TeamScopedViewSet
from registry import storage
from registry.factory import BUILD_TARGETS, VARIANTS
from registry.models import Artifact, Build
from registry.selectors import builds as build_selectors
from registry.selectors.catalog import version_get
from registry.services import builds as build_services


class ArtifactSerializer(StrictModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="api:artifact-detail")
    download_url = serializers.HyperlinkedIdentityField(view_name="api:artifact-download")
    model = StrictCharField(source="version.model.name", read_only=True)
    version_number = serializers.IntegerField(source="version.version", read_only=True)
    auc_delta = serializers.SerializerMethodField()
    catalog = serializers.SerializerMethodField(
        help_text="A generative recommender's variant: the catalog version it serves ({catalog, version}); null otherwise."
    )

    class Meta:
        model = Artifact
        fields = [
            "id",
            "url",
            "download_url",
            "model",
            "version",
            "version_number",
            "build",
            "variant",
            "status",
            "status_reason",
            "triton_model_name",
            "path",
            "sha256",
            "size_bytes",
            "auc_delta",
            "catalog",
            "validation",
            "benchmark",
            "created_at",
        ]
        read_only_fields = fields

    def get_auc_delta(self, artifact) -> float | None:
        return (artifact.validation or {}).get("auc_delta")

    def get_catalog(self, artifact) -> dict | None:
        if artifact.item_catalog_version_id is None:
            return None
        served = artifact.item_catalog_version
        return {"catalog": served.catalog.name, "version": served.version}


class StageSerializer(serializers.Serializer):
    name = StrictCharField()
    status = StrictCharField(help_text="pending, running, succeeded, failed")
    started_at = StrictCharField(allow_null=True)
    duration_s = serializers.FloatField(allow_null=True)
    log = StrictCharField(allow_blank=True)


class TuneRequestSerializer(serializers.Serializer):
    """The tune request's shape, for the schema (registry/factory/tune/request.py checks it)."""

    slo_p99_ms = serializers.FloatField(help_text="The latency SLO to tune for: p99 in ms (0.1-60000).")
    variants = serializers.ListField(
        child=serializers.ChoiceField(choices=VARIANTS),
        required=False,
        help_text="Variants to tune (of the build's targets); default onnx-int8, else onnx-fp32.",
    )
    budget_s = serializers.FloatField(required=False, help_text="Wall time of the search (5-1200 s; default 120).")
    max_trials = serializers.IntegerField(required=False, help_text="Configs measured per variant at most (2-200).")
    search_space = serializers.DictField(
        child=serializers.ListField(child=serializers.IntegerField()),
        required=False,
        help_text="Narrow dimensions: instances, intra_op_threads, preferred_batch_size, max_queue_delay_us.",
    )
    max_queue_size = serializers.IntegerField(required=False, help_text="The serving pool's queue limit (0: none).")
    queue_timeout_ms = serializers.IntegerField(required=False, help_text="The serving pool's queue timeout (0: none).")


@extend_schema_field(TuneRequestSerializer)
class TuneRequestField(serializers.JSONField):
    pass


class BuildSerializer(StrictModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="api:build-detail")
    model = StrictCharField(source="version.model.name", read_only=True)
    version_number = serializers.IntegerField(source="version.version", read_only=True)
    stages = StageSerializer(many=True, read_only=True)
    log_tail = serializers.SerializerMethodField()
    artifacts = ArtifactSerializer(many=True, read_only=True)
    created_by = serializers.StringRelatedField()

    class Meta:
        model = Build
        fields = [
            "id",
            "url",
            "model",
            "version",
            "version_number",
            "targets",
            "tune",
            "status",
            "progress",
            "stages",
            "error",
            "attempt",
            "max_attempts",
            "idempotency_key",
            "log_tail",
            "artifacts",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields

    def get_log_tail(self, build) -> str:
        return build_selectors.build_log_tail(build)


class BuildCreateSerializer(serializers.Serializer):
    targets = serializers.ListField(
        child=serializers.ChoiceField(choices=BUILD_TARGETS),
        required=False,
        allow_empty=False,
        help_text="Variants to build; default onnx-fp32 and onnx-int8 (CPU pools); a generative recommender's "
        "version: gr-fp32, gr-int8 (default) and gr-fp16 (GPU).",
    )
    catalog_version = serializers.IntegerField(
        required=False,
        min_value=1,
        help_text="A generative recommender's build: the version of its catalog to package (default: the one "
        "the model version was built against). New items served without retraining.",
    )
    tune = TuneRequestField(
        required=False,
        help_text="Also tune: search each asked variant's serving config on a real tritonserver under this "
        "latency SLO and publish the best as `{variant}-tuned` (a seventh build stage).",
    )


class BuildCancelSerializer(serializers.Serializer):
    reason = StrictCharField(required=False, allow_blank=True)


IDEMPOTENCY = OpenApiParameter(
    "Idempotency-Key",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    required=False,
    description="A second POST with the same key for the same version returns the same build (200).",
)


def _builds(qs):
    return qs.select_related("version__model", "created_by").prefetch_related("artifacts__version__model")


@extend_schema_view(list=extend_schema(summary="Builds of a version"))
class VersionBuildViewSet(mixins.ListModelMixin, TeamScopedViewSet):
    """/api/v1/versions/{version_id}/builds/"""

    serializer_class = BuildSerializer
    ordering = ["-created_at"]
    ordering_fields = ["created_at"]
    filterset_fields = ["status"]

    def get_version(self):
        return version_get(user=self.request.user, version_id=self.kwargs["version_id"])

    def scoped_queryset(self, user):
        return _builds(build_selectors.build_list(user=user, version=self.get_version()))

    @extend_schema(
        request=BuildCreateSerializer,
        parameters=[IDEMPOTENCY],
        responses={
            201: BuildSerializer,
            200: OpenApiResponse(BuildSerializer, description="Same Idempotency-Key: the existing build"),
        },
        summary="Start a build of a version (Celery, queue build-cpu or build-gpu)",
    )
    def create(self, request, *args, **kwargs):
        version = self.get_version()
        payload = BuildCreateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        build, created = build_services.build_start(
            user=request.user,
            version=version,
            targets=payload.validated_data.get("targets"),
            idempotency_key=request.headers.get("Idempotency-Key", ""),
            tune=payload.validated_data.get("tune"),
            catalog_version=payload.validated_data.get("catalog_version"),
        )

        build = _builds(Build.objects.filter(pk=build.pk)).get()
        return Response(
            BuildSerializer(build, context=self.get_serializer_context()).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


@extend_schema_view(
    list=extend_schema(summary="Builds of your teams"),
    retrieve=extend_schema(summary="A build: status, stages, progress, log tail"),
)
class BuildViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TeamScopedViewSet):
    """/api/v1/builds/ and /api/v1/builds/{id}/"""

    serializer_class = BuildSerializer
    ordering = ["-created_at"]
    ordering_fields = ["created_at"]
    filterset_fields = ["status", "version"]

    def scoped_queryset(self, user):
        return _builds(build_selectors.build_list(user=user))

    @extend_schema(
        request=BuildCancelSerializer, responses={200: BuildSerializer}, summary="Cancel a queued or running build"
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        payload = BuildCancelSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        build = build_services.build_cancel(
            user=request.user, build=self.get_object(), reason=payload.validated_data.get("reason", "")
        )
        return Response(self.get_serializer(self.get_queryset().get(pk=build.pk)).data)


@extend_schema_view(list=extend_schema(summary="Artifacts of a version, with validation and benchmark results"))
class VersionArtifactViewSet(mixins.ListModelMixin, TeamScopedViewSet):
    """/api/v1/versions/{version_id}/artifacts/"""

    serializer_class = ArtifactSerializer
    filterset_fields = ["status", "variant", "build"]
    ordering = ["-build_id", "variant"]

    def scoped_queryset(self, user):
        version = version_get(user=user, version_id=self.kwargs["version_id"])
        return build_selectors.artifact_list(user=user, version=version)


@extend_schema_view(retrieve=extend_schema(summary="An artifact"))
class ArtifactViewSet(mixins.RetrieveModelMixin, TeamScopedViewSet):
    """/api/v1/artifacts/{id}/ and /download/ (the Triton model directory as .tar.gz)."""

    serializer_class = ArtifactSerializer

    def scoped_queryset(self, user):
        return build_selectors.artifact_list(user=user)

    @extend_schema(
        responses={(200, "application/gzip"): OpenApiTypes.BINARY},
        summary="Download the packaged Triton model directory (.tar.gz)",
    )
    @action(detail=True, methods=["get"])
    def download(self, request, pk=None):
        from kernel.errors import NotFound

        artifact = self.get_object()
        if not artifact.path:
            raise NotFound(
                f"Artifact {artifact.pk} ({artifact.variant}, {artifact.status}) has no packaged files.",
                code="artifact_not_packaged",
            )
        directory = storage.absolute(artifact.path)
        if not directory.is_dir():
            raise NotFound(
                f"The files of artifact {artifact.pk} are missing from the store.", code="artifact_files_missing"
            )
        spool = tempfile.TemporaryFile()
        with tarfile.open(fileobj=spool, mode="w:gz") as tar:
            tar.add(directory, arcname=artifact.triton_model_name)
        spool.seek(0)
        return FileResponse(
            spool, as_attachment=True, filename=f"{artifact.triton_model_name}.tar.gz", content_type="application/gzip"
        )


router = SimpleRouter()
router.register("builds", BuildViewSet, basename="build")
router.register("artifacts", ArtifactViewSet, basename="artifact")

urlpatterns = [
    path(
        "versions/<int:version_id>/builds/",
        VersionBuildViewSet.as_view({"get": "list", "post": "create"}),
        name="version-builds",
    ),
    path(
        "versions/<int:version_id>/artifacts/",
        VersionArtifactViewSet.as_view({"get": "list"}),
        name="version-artifacts",
    ),
    path("", include(router.urls)),
]
