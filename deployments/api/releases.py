"""REST API v1 for releases: one flow from a build request to a canary.

POST /api/v1/releases/ {"endpoint", "version", "variant", …} builds the version, tunes the
variant against the endpoint's p99 SLO (or `slo_p99_ms`) and canaries the result against
the stable; GET /api/v1/releases/ and /api/v1/releases/{id}/ follow it (state, build and
its progress, candidate, rollout, the tune's prediction).
"""

from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_view
from rest_framework import mixins, serializers

from deployments.models import Release
from deployments.models.rollouts import ON_INCONCLUSIVE_CHOICES
from deployments.rollout_machine import FULL_BP
from deployments.selectors import releases as selectors
from deployments.selectors import rollouts as rollout_selectors
from deployments.services import releases as services
from kernel.api import created
from kernel.errors import InvalidInput, NotFound
from kernel.serializers import IdOrModelUriField, StrictCharField, StrictModelSerializer
from kernel.viewsets import TeamScopedViewSet
from registry.names import BUILT_VARIANTS, variant_name
from registry.selectors.aliases import is_model_uri, version_resolve
from registry.selectors.catalog import version_get


class PredictionSerializer(serializers.Serializer):
    slo_p99_ms = serializers.FloatField(allow_null=True)
    default_rps = serializers.FloatField(allow_null=True, help_text="The factory's config: throughput within the SLO.")
    tuned_rps = serializers.FloatField(allow_null=True, help_text="The tuned config: throughput within the SLO.")
    gain = serializers.FloatField(allow_null=True)
    default_p50_ms = serializers.FloatField(allow_null=True)
    default_p99_ms = serializers.FloatField(allow_null=True)
    tuned_p50_ms = serializers.FloatField(allow_null=True)
    tuned_p99_ms = serializers.FloatField(allow_null=True)
    config = StrictCharField(allow_blank=True)
    load_avg = serializers.FloatField(allow_null=True)


class ReleaseSerializer(StrictModelSerializer):
    endpoint = StrictCharField(source="endpoint.name", read_only=True)
    build = serializers.IntegerField(source="build_id", read_only=True, allow_null=True)
    build_status = serializers.SerializerMethodField()
    build_progress = serializers.SerializerMethodField()
    candidate_artifact = serializers.IntegerField(source="candidate_artifact_id", read_only=True, allow_null=True)
    candidate_variant = serializers.SerializerMethodField()
    rollout = serializers.IntegerField(source="rollout_id", read_only=True, allow_null=True)
    rollout_state = serializers.SerializerMethodField()
    prediction = serializers.SerializerMethodField()
    created_by = serializers.StringRelatedField()

    class Meta:
        model = Release
        fields = [
            "id",
            "endpoint",
            "version",
            "variant",
            "slo_p99_ms",
            "state",
            "reason",
            "build",
            "build_status",
            "build_progress",
            "candidate_artifact",
            "candidate_variant",
            "rollout",
            "rollout_state",
            "rollout_options",
            "prediction",
            "created_by",
            "created_at",
            "finished_at",
        ]
        read_only_fields = fields

    def get_build_status(self, release) -> str | None:
        return release.build.status if release.build_id else None

    def get_build_progress(self, release) -> int | None:
        return release.build.progress if release.build_id else None

    def get_candidate_variant(self, release) -> str | None:
        return variant_name(release.candidate_artifact) if release.candidate_artifact_id else None

    def get_rollout_state(self, release) -> str | None:
        return release.rollout.state if release.rollout_id else None

    @extend_schema_field(PredictionSerializer(allow_null=True))
    def get_prediction(self, release) -> dict | None:
        return selectors.release_prediction(release)


class ReleaseCreateSerializer(serializers.Serializer):
    endpoint = StrictCharField(max_length=64, help_text="The endpoint to release to (its pool, stable and SLO).")
    version = IdOrModelUriField(
        help_text="The model version to build, a version of the endpoint's model: its id, or a model URI "
        "(models:/ctr@challenger, models:/ctr/4)."
    )
    variant = serializers.ChoiceField(
        choices=BUILT_VARIANTS, default="onnx-int8", help_text="The variant to build and tune."
    )
    slo_p99_ms = serializers.FloatField(
        required=False, min_value=0.1, max_value=60_000, help_text="Tune for this p99 instead of the endpoint's SLO."
    )
    tune_budget_s = serializers.FloatField(required=False, min_value=5, max_value=1_200)
    max_trials = serializers.IntegerField(required=False, min_value=2, max_value=200)
    search_space = serializers.DictField(child=serializers.ListField(child=serializers.IntegerField()), required=False)
    steps_bp = serializers.ListField(child=serializers.IntegerField(min_value=1, max_value=FULL_BP), required=False)
    step_min_seconds = serializers.FloatField(required=False, min_value=0, max_value=86_400)
    step_min_requests = serializers.IntegerField(required=False, min_value=0, max_value=10_000_000)
    step_deadline_seconds = serializers.FloatField(required=False, min_value=1, max_value=86_400)
    on_inconclusive = serializers.ChoiceField(choices=[c[0] for c in ON_INCONCLUSIVE_CHOICES], required=False)
    fair_baseline = serializers.BooleanField(required=False)
    promote_grace_seconds = serializers.FloatField(required=False, min_value=0, max_value=3_600)


@extend_schema_view(
    list=extend_schema(summary="Releases of your teams' endpoints (build → tune → canary)"),
    retrieve=extend_schema(summary="One release: state, build, candidate, rollout, the tune's prediction"),
)
class ReleaseViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TeamScopedViewSet):
    serializer_class = ReleaseSerializer
    ordering = ["-created_at"]
    filterset_fields = ["state"]

    def scoped_queryset(self, user):
        return selectors.release_list(user=user)

    @extend_schema(
        request=ReleaseCreateSerializer,
        responses={201: ReleaseSerializer},
        summary="Build a version, tune it against the endpoint's SLO, canary it against the stable",
    )
    def create(self, request, *args, **kwargs):
        payload = ReleaseCreateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = dict(payload.validated_data)
        try:
            endpoint = rollout_selectors.endpoint_get(user=request.user, name=data.pop("endpoint"))
        except NotFound:
            raise InvalidInput(
                f"endpoint: no endpoint named {request.data.get('endpoint')!r}.",
                code="endpoint_not_found",
                field="endpoint",
            ) from None
        ref = data.pop("version")
        if is_model_uri(ref):  # another team's model answers 404 as an unknown one
            version = version_resolve(user=request.user, uri=ref, field="version")
        else:
            version = self._version_by_id(request, ref)
        options = {k: data.pop(k) for k in list(data) if k in services.ROLLOUT_OPTIONS}
        release = services.release_start(
            user=request.user, endpoint=endpoint, version=version, rollout_options=options, **data
        )
        return created(ReleaseSerializer(selectors.release_get(user=request.user, release_id=release.pk)).data)

    @staticmethod
    def _version_by_id(request, version_id: int):
        try:
            return version_get(user=request.user, version_id=version_id)
        except NotFound:
            raise InvalidInput(
                f"version: no version with id {request.data.get('version')!r}.",
                code="version_not_found",
                field="version",
            ) from None
