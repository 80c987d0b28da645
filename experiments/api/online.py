"""REST API v1 for online experiments and feedback.

/api/v1/experiments/ (list, create), /api/v1/experiments/{id}/ (id: 12 or exp-12),
POST …/{start|stop|ship}/, GET …/results/, and POST /api/v1/feedback/ (batches).
"""

import time

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, permissions, serializers
from rest_framework.decorators import action
from rest_framework.exceptions import NotAuthenticated, Throttled
from rest_framework.response import Response
from rest_framework.views import APIView

from deployments.rollout_machine import FULL_BP
from deployments.selectors import rollouts as endpoint_selectors
from deployments.selectors.artifact_refs import artifact_for_ref
from deployments.selectors.keys import inference_key_for_endpoint
from experiments.api.results_schema import ExperimentResultsSerializer
from experiments.models import Experiment
from experiments.selectors import online as selectors
from experiments.services import feedback as feedback_services
from experiments.services import online as services
from kernel.api import created
from kernel.errors import InvalidInput, NotFound, PlatformError
from kernel.serializers import IdOrModelUriField, StrictCharField, StrictModelSerializer, StrictSlugField
from kernel.viewsets import TeamScopedViewSet
from registry.selectors.teams import user_role_in


class OnlineArmSerializer(serializers.Serializer):
    name = StrictCharField()
    artifact = serializers.IntegerField(source="artifact_id")
    is_control = serializers.BooleanField()
    allocation_bp = serializers.IntegerField()


class OnlineExperimentSerializer(StrictModelSerializer):
    id = StrictCharField(source="public_id", read_only=True)
    endpoint = StrictCharField(source="endpoint.name", read_only=True)
    arms = OnlineArmSerializer(many=True, read_only=True)
    winner = StrictCharField(source="winner.name", read_only=True, allow_null=True, default=None)

    class Meta:
        model = Experiment
        fields = [
            "id",
            "name",
            "endpoint",
            "hypothesis",
            "state",
            "unit_header",
            "salt",
            "primary_metric",
            "secondary_metrics",
            "baseline_rate",
            "exposures_per_unit",
            "mde",
            "power",
            "alpha",
            "srm_alpha",
            "attribution_window_s",
            "guardrail_psi",
            "feedback_tokens",
            "planned_units_per_arm",
            "arms",
            "decision",
            "winner",
            "rollout_id",
            "mlflow_run_id",
            "started_at",
            "ended_at",
            "created_at",
        ]
        read_only_fields = fields


class ExperimentCreateSerializer(serializers.Serializer):
    endpoint = StrictCharField(help_text="Name of an endpoint of your team; its stable artifact is the control.")
    name = StrictSlugField(max_length=64)
    hypothesis = StrictCharField(required=False, allow_blank=True, default="")
    candidates = serializers.ListField(
        child=IdOrModelUriField(),
        min_length=1,
        max_length=8,
        help_text="The candidate arms: artifact ids or model URIs (models:/ctr@challenger: that version's servable "
        "artifact in the stable's variant).",
    )
    allocation_bp = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=FULL_BP),
        required=False,
        help_text="Per arm, control first, summing to 10000 (default: equal).",
    )
    primary_metric = serializers.ChoiceField(choices=["ctr"], default="ctr")
    secondary_metrics = serializers.ListField(
        child=serializers.ChoiceField(choices=["conversions", "value"]), required=False
    )
    baseline_rate = serializers.FloatField(min_value=1e-6, max_value=1 - 1e-6, default=0.1)
    exposures_per_unit = serializers.FloatField(min_value=1.0, max_value=1e6, default=1.0)
    mde = serializers.FloatField(min_value=-0.99, max_value=10.0, default=0.05)
    power = serializers.FloatField(min_value=0.5, max_value=0.999, default=0.8)
    alpha = serializers.FloatField(min_value=1e-6, max_value=0.5, default=0.05)
    attribution_window_s = serializers.IntegerField(min_value=1, max_value=30 * 86400, default=3600)
    feedback_tokens = serializers.BooleanField(
        default=False,
        help_text="Accept feedback citing the replies' signed X-Exposure-Token without an inference key "
        "(e.g. clicks from browsers on a public endpoint). Off: feedback needs a key of the endpoint's team.",
    )
    guardrail_psi = serializers.BooleanField(
        default=True, help_text="Judge prediction-score PSI per arm as a guardrail (off: shown, never failed)."
    )


class ExperimentActionSerializer(serializers.Serializer):
    reason = StrictCharField(required=False, allow_blank=True, default="", max_length=1000)


@extend_schema_view(
    list=extend_schema(summary="Online experiments of your teams"),
    retrieve=extend_schema(summary="One online experiment"),
    create=extend_schema(
        request=ExperimentCreateSerializer,
        responses={201: OnlineExperimentSerializer},
        summary="Draft an experiment: the endpoint's stable against candidate artifacts",
    ),
)
class ExperimentViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, TeamScopedViewSet):
    serializer_class = OnlineExperimentSerializer
    lookup_value_regex = r"(exp-)?[0-9]+"
    filterset_fields = ["state"]
    ordering = ["-created_at"]

    def scoped_queryset(self, user):
        return selectors.online_experiment_list(user=user)

    def get_object(self):
        return selectors.online_experiment_get(user=self.request.user, experiment_id=self.kwargs["pk"])

    def create(self, request, *args, **kwargs):
        payload = ExperimentCreateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = dict(payload.validated_data)
        try:
            endpoint = endpoint_selectors.endpoint_get(user=request.user, name=data.pop("endpoint"))
        except NotFound:
            raise InvalidInput(
                f"endpoint: no endpoint named {request.data.get('endpoint')!r}.",
                field="endpoint",
                code="endpoint_not_found",
            ) from None
        candidates = [
            artifact_for_ref(user=request.user, ref=ref, field="candidates", endpoint=endpoint)
            for ref in data.pop("candidates")
        ]
        experiment = services.experiment_create(user=request.user, endpoint=endpoint, candidates=candidates, **data)
        return created(OnlineExperimentSerializer(experiment).data)

    @extend_schema(request=None, responses=OnlineExperimentSerializer, summary="Start: the arms get traffic")
    @action(detail=True, methods=["post"])
    def start(self, request, pk=None):
        return Response(
            OnlineExperimentSerializer(services.experiment_start(user=request.user, experiment=self.get_object())).data
        )

    @extend_schema(
        request=ExperimentActionSerializer,
        responses=OnlineExperimentSerializer,
        summary="Stop: the control keeps all traffic",
    )
    @action(detail=True, methods=["post"])
    def stop(self, request, pk=None):
        payload = ExperimentActionSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        experiment = services.experiment_stop(
            user=request.user, experiment=self.get_object(), reason=payload.validated_data["reason"]
        )
        return Response(OnlineExperimentSerializer(experiment).data)

    @extend_schema(
        request=ExperimentActionSerializer,
        responses=OnlineExperimentSerializer,
        summary="Ship the winner (a one-step rollout to 100 %): shipping, then shipped once the rollout succeeded",
    )
    @action(detail=True, methods=["post"])
    def ship(self, request, pk=None):
        payload = ExperimentActionSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        experiment = services.experiment_ship(
            user=request.user, experiment=self.get_object(), reason=payload.validated_data["reason"]
        )
        return Response(OnlineExperimentSerializer(experiment).data)

    @extend_schema(
        responses=ExperimentResultsSerializer,
        summary="Per-arm counts, lift with its always-valid band, SRM, guardrails per arm, progress, decision",
    )
    @action(detail=True, methods=["get"])
    def results(self, request, pk=None):
        return Response(selectors.experiment_results(experiment=self.get_object()))


class FeedbackBatchSerializer(serializers.Serializer):
    endpoint = StrictCharField(help_text="The endpoint the exposures came from.")
    events = serializers.ListField(child=serializers.DictField(), help_text="click / conversion / value events.")


def _presented_key(request) -> str:
    raw = request.headers.get("Authorization", "")
    return raw[7:].strip() if raw.lower().startswith("bearer ") else request.headers.get("X-API-Key", "")


def _caller(request, endpoint) -> str | None:
    """Who sends feedback for `endpoint`: `key:<id>` for a key of its team scoped to it,
    `user:<id>` for a member of its team, else None (anonymous, or another team's)."""
    key = inference_key_for_endpoint(secret=_presented_key(request), endpoint=endpoint)
    if key is not None:
        return f"key:{key.pk}"
    if request.user.is_authenticated and user_role_in(user=request.user, team=endpoint.team):
        return f"user:{request.user.pk}"
    return None


class FeedbackView(APIView):
    """POST /api/v1/feedback/: a key of the endpoint's team (Authorization: Bearer or
    X-API-Key) or a member of its team, public endpoint or not; with neither, only events
    citing exposure tokens of the endpoint's running experiment that accepts them, all of
    one unit. Every cited token must verify and be unexpired; no exposure may be asked for
    more than one exposure carries (409, counting what earlier feedback took). The batch is
    checked by the rules the gateway's door uses (gateway/contracts/feedback.schema.json). With the durable
    log (EVENT_LOG_URL answers) the admitted batch is published on it like the gateway's (202
    {received, queued}: its reader attributes and stores it); without, it is stored at once (202
    with the counts)."""

    permission_classes = [permissions.AllowAny]
    # no or a wrong key or token, another team, unknown endpoint, a replayed token, over rate
    schema_error_codes = ("401", "403", "404", "409", "429")

    @extend_schema(request=FeedbackBatchSerializer, responses={202: dict}, summary="Record a batch of feedback events")
    def post(self, request):
        if not isinstance(request.data, dict):
            raise InvalidInput("give a JSON object {endpoint, events}.")
        name = request.data.get("endpoint")
        endpoint = (
            next((e for e in endpoint_selectors.serving_endpoints() if e.name == name), None)
            if isinstance(name, str)
            else None
        )
        if endpoint is None:
            raise NotFound(f"No endpoint named {str(name)[:64]!r}.", code="endpoint_not_found")
        caller = _caller(request, endpoint)
        try:
            result = feedback_services.feedback_admit(
                endpoint=endpoint, data=request.data, caller=caller, now_ms=int(time.time() * 1000)
            )
        except feedback_services.FeedbackRefused as exc:
            if exc.code == feedback_services.NEEDS_A_KEY:
                self._refuse(request, endpoint)
            if caller is None and exc.code == "invalid_exposure_token":  # no credentials, and no valid token
                raise NotAuthenticated(exc.detail) from None
            raise PlatformError(exc.detail, field=exc.field, code=exc.code, status=exc.status) from None
        except feedback_services.FeedbackThrottled as exc:
            raise Throttled(wait=exc.wait, detail=exc.detail) from None
        return Response(result, status=202)

    @staticmethod
    def _refuse(request, endpoint):
        if not request.user.is_authenticated:
            raise NotAuthenticated(
                f"feedback for {endpoint.name!r} needs a key of its team: Authorization: Bearer <key> or X-API-Key "
                "(or, where the experiment accepts them, the replies' exposure tokens, all of one unit)."
            )
        raise NotFound(f"No endpoint named {endpoint.name!r}.", code="endpoint_not_found")
