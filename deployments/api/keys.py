"""REST API v1 for inference keys: /api/v1/inference-keys/ (list, create, retrieve) and
POST /api/v1/inference-keys/{id}/revoke/. The secret is in the create response only;
lists and details show the display prefix. Team-scoped like every resource: another
team's key is a 404; any member lists, deployers and admins create and revoke."""

from django.contrib.auth.models import Group
from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers
from rest_framework.decorators import action
from rest_framework.response import Response

from deployments.models import InferenceKey
from deployments.selectors import keys as selectors
from deployments.services import keys as services
from kernel.api import created
from kernel.serializers import StrictCharField, StrictModelSerializer
from kernel.viewsets import TeamScopedViewSet
from registry.selectors.teams import team_list


class InferenceKeySerializer(StrictModelSerializer):
    team = serializers.SlugRelatedField(slug_field="name", read_only=True)
    gateway_id = StrictCharField(
        read_only=True, help_text="The key's id in the route table and in the gateway's metric labels (key=\"k17\")."
    )
    endpoints = serializers.SerializerMethodField(
        help_text='"all" (every endpoint of the team, also later ones) or the names.'
    )
    active = serializers.BooleanField(read_only=True)
    created_by = serializers.StringRelatedField()
    revoked_by = serializers.StringRelatedField()

    class Meta:
        model = InferenceKey
        fields = [
            "id",
            "gateway_id",
            "name",
            "team",
            "prefix",
            "endpoints",
            "rate_per_s",
            "burst",
            "max_concurrency",
            "tokens_per_minute",
            "token_budgets",
            "max_streams",
            "active",
            "created_by",
            "created_at",
            "revoked_at",
            "revoked_by",
        ]
        read_only_fields = fields

    def get_endpoints(self, key) -> list[str] | str:
        return "all" if key.all_endpoints else [e.name for e in key.endpoints.all()]


class InferenceKeyCreatedSerializer(InferenceKeySerializer):
    secret = StrictCharField(
        read_only=True,
        help_text="The key itself: shown this once, never stored. Send it as "
        "Authorization: Bearer <secret> (or X-API-Key).",
    )

    class Meta(InferenceKeySerializer.Meta):
        fields = [*InferenceKeySerializer.Meta.fields, "secret"]
        read_only_fields = fields


class InferenceKeyCreateSerializer(serializers.Serializer):
    # a CharField (not SlugRelatedField): its checks (NUL, length) run before any query
    team = StrictCharField(max_length=150, help_text="Name of one of your teams.")
    name = StrictCharField(max_length=100)
    endpoints = serializers.ListField(
        child=StrictCharField(max_length=64),
        required=False,
        max_length=services.MAX_SCOPED_ENDPOINTS,
        help_text="Names of the team's endpoints it may call; leave out for all of them (also later ones).",
    )
    rate_per_s = serializers.FloatField(
        required=False,
        allow_null=True,
        help_text=f"Requests per second (token bucket; default {services.DEFAULT_RATE_PER_S:g}; null: no limit).",
    )
    burst = serializers.FloatField(required=False, allow_null=True, help_text="Bucket size (default twice the rate).")
    max_concurrency = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text=f"Requests in flight at once (default {services.DEFAULT_MAX_CONCURRENCY}; null: no limit).",
    )
    tokens_per_minute = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="LLM tokens (prompt + completion) per minute (default null: no token limit); 429 with Retry-After.",
    )
    max_streams = serializers.IntegerField(
        required=False, allow_null=True, help_text="LLM requests in flight at once (default null: no limit)."
    )
    token_budgets = serializers.ListField(
        child=serializers.DictField(child=serializers.IntegerField()),
        required=False,
        help_text=f"At most {services.MAX_BUDGETS} LLM token budgets over windows from a second to a month: "
        '[{"tokens": 5000000, "window_s": 2592000}]; reserved atomically before a request, corrected after.',
    )

    def validate_team(self, value: str) -> Group:
        # teams the user is not a member of "do not exist"; a member without the role gets a 403 from the service
        request = self.context.get("request")
        team = team_list(user=request.user).filter(name=value).first() if request is not None else None
        if team is None:
            raise serializers.ValidationError(f"You are in no team named {value[:150]!r}.", code="team_not_found")
        return team


class RevokeSerializer(serializers.Serializer):
    reason = StrictCharField(required=False, allow_blank=True, default="", max_length=2000)


class InferenceKeyFilter(filters.FilterSet):
    team = filters.CharFilter(field_name="team__name")
    active = filters.BooleanFilter(field_name="revoked_at", lookup_expr="isnull", help_text="true: not revoked.")

    class Meta:
        model = InferenceKey
        fields = ["team", "active"]


@extend_schema_view(
    list=extend_schema(summary="Inference keys of your teams (display prefix only, never the secret)"),
    retrieve=extend_schema(summary="One inference key (display prefix only)"),
    create=extend_schema(
        request=InferenceKeyCreateSerializer,
        responses={201: InferenceKeyCreatedSerializer},
        summary="Create an inference key; the response carries the secret, shown once",
    ),
)
class InferenceKeyViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, TeamScopedViewSet):
    serializer_class = InferenceKeySerializer
    filterset_class = InferenceKeyFilter
    ordering_fields = ["created_at", "name", "revoked_at"]
    ordering = ["-created_at"]
    search_fields = ["name", "prefix"]

    def scoped_queryset(self, user):
        return selectors.inference_key_list(user=user)

    def create(self, request, *args, **kwargs):
        payload = InferenceKeyCreateSerializer(data=request.data, context=self.get_serializer_context())
        payload.is_valid(raise_exception=True)
        data = dict(payload.validated_data)
        key, secret = services.inference_key_create(user=request.user, **data)
        body = InferenceKeyCreatedSerializer(selectors.inference_key_get(user=request.user, key_id=key.pk)).data
        body["secret"] = secret
        response = created(body)
        response["Cache-Control"] = "no-store"  # the secret must not sit in a cache
        return response

    @extend_schema(
        request=RevokeSerializer,
        responses=InferenceKeySerializer,
        summary="Revoke: the gateway refuses the key (401) within its poll interval; revoking twice changes nothing",
    )
    @action(detail=True, methods=["post"])
    def revoke(self, request, pk=None):
        payload = RevokeSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        key = services.inference_key_revoke(
            user=request.user, key=self.get_object(), reason=payload.validated_data["reason"]
        )
        return Response(InferenceKeySerializer(selectors.inference_key_get(user=request.user, key_id=key.pk)).data)
