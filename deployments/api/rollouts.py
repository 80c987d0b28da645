"""REST API v1 for endpoints, rollouts and the gateway's route table.

GET /api/v1/rollouts/{id}/status/ is a rollout's live status in one request (ETag; 304 on
If-None-Match), what `modelplane rollout watch` polls.

/api/v1/endpoints/ (by name), /api/v1/endpoints/{name}/rollouts/,
/api/v1/rollouts/{id}/ with POST …/{promote|pause|resume|rollback|retry}/,
POST /api/v1/endpoints/{name}/undo/ (back to the previous stable), and
/api/v1/gateway/routes (ETag; 304 on If-None-Match; held until a change with ?wait=) for the gateway.

Why this is one long module: the endpoint serializers carry the LLM settings
beside the tensor ones, and endpoints, rollouts and the route table view share them.
"""

import threading
import time

from django.contrib.auth.models import Permission
from django.db.models import Q
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field, extend_schema_view
from rest_framework import mixins, permissions, serializers
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from deployments.api.rollout_controls import EndpointUndoMixin, RolloutStatusRetryMixin
from deployments.models import Endpoint, Rollout
from deployments.models.rollouts import ON_INCONCLUSIVE_CHOICES
from deployments.rollout_machine import DEFAULT_PLAN, FULL_BP, Strategy
from deployments.routes import route_table
from deployments.selectors import pools as pool_selectors
from deployments.selectors import rollouts as selectors
from deployments.selectors.artifact_refs import artifact_for_ref
from deployments.selectors.rollout_page import ARM_ROLES, rollout_arms
from deployments.services import endpoints as endpoint_services
from deployments.services import rollouts as services
from kernel.api import created
from kernel.errors import InvalidInput, NotFound
from kernel.serializers import (
    IdOrModelUriField,
    StrictCharField,
    StrictModelSerializer,
    StrictRegexField,
    StrictSlugField,
)
from kernel.viewsets import TeamScopedViewSet
from registry.names import baseline_variant_name, variant_name


class EndpointSerializer(StrictModelSerializer):
    team = serializers.SlugRelatedField(slug_field="name", read_only=True)
    pool = StrictCharField(source="pool.name", read_only=True)
    stable_artifact = serializers.IntegerField(source="stable_artifact_id", read_only=True, allow_null=True)
    stable_variant = serializers.SerializerMethodField()
    url = serializers.HyperlinkedIdentityField(view_name="api:endpoint-detail", lookup_field="name")

    class Meta:
        model = Endpoint
        fields = [
            "name",
            "url",
            "team",
            "pool",
            "stable_artifact",
            "stable_variant",
            "kind",
            "slo_p99_ms",
            "slo_error_rate",
            "ttft_slo_ms",
            "itl_slo_ms",
            "psi_threshold",
            "latency_margin",
            "on_inconclusive",
            "sticky_header",
            "timeout_ms",
            "public",
            "capture_share",
            "kind",
            "ttft_slo_ms",
            "itl_slo_ms",
            "first_token_timeout_ms",
            "context_length",
            "max_tokens_default",
            "prefix_affinity_chars",
            "llm_fallbacks",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_stable_variant(self, endpoint) -> str | None:
        return variant_name(endpoint.stable_artifact) if endpoint.stable_artifact_id else None


class NumberField(serializers.FloatField):
    """A float that is a number: JSON true/false (which FloatField reads as 1.0/0.0) is refused."""

    def to_internal_value(self, data):
        if isinstance(data, bool):
            self.fail("invalid")
        return super().to_internal_value(data)


class EndpointUpdateSerializer(serializers.Serializer):
    capture_share = serializers.FloatField(
        required=False,
        help_text="Share (0-1) of served requests whose inputs are logged with their exposure for training data.",
    )
    slo_p99_ms = serializers.FloatField(required=False)
    slo_error_rate = serializers.FloatField(required=False)
    ttft_slo_ms = serializers.FloatField(required=False, help_text="LLM endpoints: time-to-first-token p99 SLO.")
    itl_slo_ms = serializers.FloatField(required=False, help_text="LLM endpoints: inter-token latency p99 SLO.")
    psi_threshold = serializers.FloatField(required=False)
    latency_margin = NumberField(
        required=False,
        allow_null=True,
        help_text="Candidate latency may exceed the control's by this fraction; null: derived from the p99 SLO's "
        "headroom over the control's p99 (half of it, 10-30 %).",
    )
    on_inconclusive = serializers.ChoiceField(
        choices=ON_INCONCLUSIVE_CHOICES,
        required=False,
        help_text="When a rollout step's deadline passes without a conclusive verdict: rollback, pause (and alert; the "
        "default) or promote (go on unless a check failed). A rollout may override it.",
    )
    sticky_header = StrictRegexField(r"^[A-Za-z0-9-]{1,100}$", required=False)
    timeout_ms = serializers.IntegerField(required=False)
    public = serializers.BooleanField(
        required=False,
        help_text="Callable without an inference key (default false: only the team's keys scoped to it).",
    )
    ttft_slo_ms = serializers.FloatField(required=False, help_text="LLM: candidate time-to-first-token p99 guardrail.")
    itl_slo_ms = serializers.FloatField(required=False, help_text="LLM: candidate inter-token latency p99 guardrail.")
    first_token_timeout_ms = serializers.IntegerField(
        required=False, help_text="LLM: an attempt without a first token by then fails over (1..600000)."
    )
    context_length = serializers.IntegerField(
        required=False, help_text="LLM: prompt + max_tokens above this is a 400; default the stable version's."
    )
    max_tokens_default = serializers.IntegerField(
        required=False, help_text="LLM: max_tokens when a request gives none."
    )
    prefix_affinity_chars = serializers.IntegerField(
        required=False, help_text="LLM: prompts sharing this many leading characters go to one replica (0: off)."
    )
    llm_fallbacks = serializers.ListField(
        child=serializers.IntegerField(),
        required=False,
        max_length=32,
        help_text="LLM: LLM artifact ids of your team tried in this order after the chosen variant's backends.",
    )


class EndpointCreateSerializer(EndpointUpdateSerializer):
    name = StrictSlugField(max_length=64)
    kind = serializers.ChoiceField(
        choices=["tensor", "llm"], default="tensor", help_text="tensor (KServe v2) or llm (the OpenAI API)."
    )
    pool = StrictCharField(help_text="Name of a serving pool of your team.")
    kind = serializers.ChoiceField(choices=["tensor", "llm"], required=False, default="tensor")
    stable_artifact = IdOrModelUriField(required=False, help_text="A servable artifact id or models:/ctr@champion.")
    stable_variant = StrictCharField(required=False, max_length=64, help_text="With a model URI: which variant.")


class ArmSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=list(ARM_ROLES))
    variant = serializers.CharField()
    weight_bp = serializers.IntegerField(help_text="Share of live traffic in basis points (a shadow's is 0).")

    class Meta:
        ref_name = "RolloutArm"


class RolloutSerializer(StrictModelSerializer):
    endpoint = StrictCharField(source="endpoint.name", read_only=True)
    candidate_artifact = serializers.IntegerField(source="candidate_artifact_id", read_only=True)
    baseline_artifact = serializers.IntegerField(source="baseline_artifact_id", read_only=True)
    candidate_variant = serializers.SerializerMethodField()
    baseline_variant = serializers.SerializerMethodField()
    fair_baseline = serializers.SerializerMethodField()
    traffic = serializers.SerializerMethodField()
    arms = serializers.SerializerMethodField()
    created_by = serializers.StringRelatedField()

    class Meta:
        model = Rollout
        fields = [
            "id",
            "endpoint",
            "candidate_artifact",
            "candidate_variant",
            "baseline_artifact",
            "baseline_variant",
            "fair_baseline",
            "strategy",
            "steps_bp",
            "shadow_seconds",
            "shadow_sample_rate",
            "step_min_seconds",
            "step_min_requests",
            "step_deadline_seconds",
            "on_inconclusive",
            "promote_grace_seconds",
            "state",
            "step_index",
            "paused_from",
            "generation",
            "reason",
            "traffic",
            "arms",
            "state_entered_at",
            "step_started_at",
            "traffic_started_at",
            "traffic_stopped_at",
            "created_by",
            "created_at",
            "finished_at",
        ]
        read_only_fields = fields

    def get_candidate_variant(self, rollout) -> str:
        return variant_name(rollout.candidate_artifact)

    def get_baseline_variant(self, rollout) -> str:
        return variant_name(rollout.baseline_artifact)

    def get_fair_baseline(self, rollout) -> dict | None:
        """The fresh copy of the stable the candidate is judged against (null: judged against the stable)."""
        if not rollout.baseline_model:
            return None
        return {"variant": baseline_variant_name(rollout.baseline_artifact), "triton_model": rollout.baseline_model}

    @extend_schema_field(ArmSerializer(many=True))
    def get_arms(self, rollout) -> list:
        """Every arm's share now, the baseline included (deployments.selectors.rollout_page.rollout_arms)."""
        return rollout_arms(rollout)

    def get_traffic(self, rollout) -> dict:
        split = rollout.split
        return {
            "stable_bp": split.stable_bp,
            "candidate_bp": split.candidate_bp,
            "baseline_bp": split.baseline_bp,
            "candidate_role": split.candidate_role,
        }


class RolloutCreateSerializer(serializers.Serializer):
    candidate_artifact = IdOrModelUriField(
        help_text="A servable artifact id or models:/ctr@challenger (models:/ctr/4)."
    )
    variant = StrictCharField(
        required=False, max_length=64, help_text="With a model URI: which variant (default: the stable's)."
    )
    strategy = serializers.ChoiceField(choices=[s.value for s in Strategy], default=Strategy.CANARY)
    steps_bp = serializers.ListField(child=serializers.IntegerField(min_value=1, max_value=FULL_BP), required=False)
    shadow_seconds = serializers.FloatField(min_value=0, default=DEFAULT_PLAN.shadow_seconds)
    shadow_sample_rate = serializers.FloatField(min_value=0, max_value=1, default=1.0)
    step_min_seconds = serializers.FloatField(min_value=0, default=DEFAULT_PLAN.step_min_seconds)
    step_min_requests = serializers.IntegerField(min_value=0, default=DEFAULT_PLAN.step_min_requests)
    step_deadline_seconds = serializers.FloatField(min_value=0, default=DEFAULT_PLAN.step_deadline_seconds)
    on_inconclusive = serializers.ChoiceField(
        choices=ON_INCONCLUSIVE_CHOICES,
        required=False,
        help_text="rollback, pause or promote; default: the endpoint's policy.",
    )
    promote_grace_seconds = serializers.FloatField(min_value=0, default=30.0)
    fair_baseline = serializers.BooleanField(
        default=True,
        help_text="Load a fresh copy of the stable with the candidate's share and judge the candidate "
        "against it (canary strategy; default true; a generative recommender's canary cannot turn it off: "
        "its cache starts as cold as the copy's, 400 cold_cache_needs_baseline).",
    )


class RolloutActionSerializer(serializers.Serializer):
    reason = StrictCharField(required=False, allow_blank=True, default="")
    generation = serializers.IntegerField(
        required=False, help_text="The generation you saw; 409 if it changed meanwhile."
    )


@extend_schema_view(
    list=extend_schema(summary="Endpoints of your teams"),
    retrieve=extend_schema(summary="One endpoint"),
    create=extend_schema(
        request=EndpointCreateSerializer, responses={201: EndpointSerializer}, summary="Create an endpoint on a pool"
    ),
    partial_update=extend_schema(
        request=EndpointUpdateSerializer, summary="Change SLOs, sticky header, timeout, public"
    ),
    update=extend_schema(request=EndpointUpdateSerializer),
    undo=extend_schema(responses={201: RolloutSerializer}),
)
class EndpointViewSet(
    EndpointUndoMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    TeamScopedViewSet,
):
    serializer_class = EndpointSerializer
    rollout_serializer = RolloutSerializer  # undo's answer (deployments/api/rollout_controls.py)
    lookup_field = "name"
    lookup_value_regex = r"[a-z0-9][a-z0-9_-]*"
    ordering = ["name"]

    def scoped_queryset(self, user):
        return selectors.endpoint_list(user=user)

    def create(self, request, *args, **kwargs):
        payload = EndpointCreateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = dict(payload.validated_data)
        try:
            pool = pool_selectors.pool_get(user=request.user, name=data.pop("pool"))
        except NotFound:
            raise InvalidInput(
                f"pool: no serving pool named {request.data.get('pool')!r}.", code="pool_not_found", field="pool"
            ) from None
        ref, variant = data.pop("stable_artifact", None), data.pop("stable_variant", None)
        stable = artifact_for_ref(user=request.user, ref=ref, field="stable_artifact", variant=variant)
        endpoint = endpoint_services.endpoint_create(
            user=request.user, name=data.pop("name"), pool=pool, stable_artifact=stable, **data
        )
        return created(EndpointSerializer(endpoint, context=self.get_serializer_context()).data)

    def update(self, request, *args, **kwargs):
        endpoint = self.get_object()
        payload = EndpointUpdateSerializer(data=request.data, partial=True)
        payload.is_valid(raise_exception=True)
        endpoint = endpoint_services.endpoint_update(user=request.user, endpoint=endpoint, **payload.validated_data)
        return Response(EndpointSerializer(endpoint, context=self.get_serializer_context()).data)

    @extend_schema(methods=["GET"], responses=RolloutSerializer(many=True), summary="List this endpoint's rollouts")
    @extend_schema(
        methods=["POST"],
        request=RolloutCreateSerializer,
        responses={201: RolloutSerializer},
        summary="Start a rollout on this endpoint",
    )
    @action(detail=True, methods=["get", "post"])
    def rollouts(self, request, name=None):
        endpoint = self.get_object()
        if request.method == "GET":
            page = self.paginate_queryset(selectors.rollout_list(user=request.user, endpoint=endpoint))
            return self.get_paginated_response(RolloutSerializer(page, many=True).data)
        payload = RolloutCreateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = dict(payload.validated_data)
        candidate = artifact_for_ref(
            user=request.user,
            ref=data.pop("candidate_artifact"),
            field="candidate_artifact",
            variant=data.pop("variant", None),
            endpoint=endpoint,
        )
        rollout = services.rollout_start(user=request.user, endpoint=endpoint, candidate=candidate, **data)
        return created(RolloutSerializer(rollout).data)


@extend_schema_view(retry=extend_schema(responses={201: RolloutSerializer}))
class RolloutViewSet(RolloutStatusRetryMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, TeamScopedViewSet):
    """/api/v1/rollouts/{id}/ and its manual controls (the same services as the dashboard);
    status and retry in deployments/api/rollout_controls.py."""

    serializer_class = RolloutSerializer
    rollout_serializer = RolloutSerializer
    ordering = ["-created_at"]
    filterset_fields = ["state"]

    def scoped_queryset(self, user):
        return selectors.rollout_list(user=user)

    def _act(self, request, service):
        payload = RolloutActionSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        rollout = service(
            user=request.user,
            rollout=self.get_object(),
            reason=payload.validated_data["reason"],
            expected_generation=payload.validated_data.get("generation"),
        )
        return Response(RolloutSerializer(rollout).data)

    @extend_schema(
        request=RolloutActionSerializer, responses=RolloutSerializer, summary="Promote now (skip remaining steps)"
    )
    @action(detail=True, methods=["post"])
    def promote(self, request, pk=None):
        return self._act(request, services.rollout_promote)

    @extend_schema(
        request=RolloutActionSerializer,
        responses=RolloutSerializer,
        summary="Pause (hold the split, stop the step timer)",
    )
    @action(detail=True, methods=["post"])
    def pause(self, request, pk=None):
        return self._act(request, services.rollout_pause)

    @extend_schema(request=RolloutActionSerializer, responses=RolloutSerializer, summary="Resume where it paused")
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        return self._act(request, services.rollout_resume)

    @extend_schema(request=RolloutActionSerializer, responses=RolloutSerializer, summary="Roll back now")
    @action(detail=True, methods=["post"])
    def rollback(self, request, pk=None):
        return self._act(request, services.rollout_rollback)


class CanReadRoutes(permissions.BasePermission):
    """The route table carries the LLM provider secrets' values (the gateway calls providers
    with them), so only an account granted deployments.read_routes itself or through a group
    reads it: a superuser's implied permissions do not count (an admin never sees a secret
    again after storing it)."""

    message = (
        "Reading the route table needs the deployments.read_routes permission granted to this account or one of "
        "its groups (the gateway's service account); a superuser's implied permissions are not enough: the table "
        "holds provider secrets."
    )

    def has_permission(self, request, view):
        user = request.user
        if not (user and user.is_authenticated and user.is_active):
            return False
        granted = Permission.objects.filter(codename="read_routes", content_type__app_label="deployments")
        return granted.filter(Q(user=user) | Q(group__user=user)).exists()


LONG_POLL_MAX_S = 25.0  # the longest `wait` a poll may ask for
LONG_POLL_STEP_S = 0.2  # how often a held poll looks at the generation: a change answers it within this
# polls each web process holds at once (its threads are shared with people): past it a poll is answered at once
_held_polls = threading.BoundedSemaphore(2)
_held_lock = threading.Lock()
_held_last: dict = {"at": -1.0, "table": None}


def _table_for_held_polls() -> dict:
    """The table as of at most LONG_POLL_STEP_S ago: the polls this process holds (one per
    gateway worker) share one look at the generation per step."""
    with _held_lock:
        now = time.monotonic()
        if now - _held_last["at"] >= LONG_POLL_STEP_S * 0.9:
            _held_last.update(at=now, table=route_table())
        return _held_last["table"]


class GatewayRoutesView(APIView):
    """The route table the gateway polls (contract: gateway/contracts/route_table.schema.json).

    `?wait=S` (0-25) with the current ETag in If-None-Match: the poll is held until the table
    changes (200 with the new table) or S seconds pass (304), a long poll; the table is
    compared each LONG_POLL_STEP_S (one query while nothing changed: deployments/routes.py).
    Each process holds at most two; past that, and without `wait`, a poll is answered at once."""

    permission_classes = [CanReadRoutes]

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "wait",
                float,
                description="seconds (0-25) to hold a poll whose If-None-Match is current, until the table changes",
            )
        ],
        responses={200: dict, 304: None},
        summary="Gateway route table (ETag / If-None-Match, long poll with ?wait=)",
    )
    def get(self, request):
        try:
            wait = float(request.query_params.get("wait") or 0)
        except ValueError:
            raise InvalidInput("wait must be a number of seconds (0-25).", code="invalid_wait", field="wait") from None
        if not 0 <= wait <= LONG_POLL_MAX_S:  # NaN fails this too
            raise InvalidInput("wait must be a number of seconds (0-25).", code="invalid_wait", field="wait")
        tags = [tag.strip() for tag in request.headers.get("If-None-Match", "").split(",")]
        table = route_table()
        etag = f'"{table["version"]}"'
        if etag in tags and wait > 0 and _held_polls.acquire(blocking=False):
            try:
                deadline = time.monotonic() + wait
                while etag in tags and time.monotonic() < deadline:
                    time.sleep(min(LONG_POLL_STEP_S, max(0.0, deadline - time.monotonic())))
                    table = _table_for_held_polls()
                    etag = f'"{table["version"]}"'
            finally:
                _held_polls.release()
        response = Response(status=304) if etag in tags else Response(table)
        response["ETag"] = etag
        response["Cache-Control"] = "no-cache"
        return response
